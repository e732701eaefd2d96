"""Every model family depthlab reads, declared once per config.json `model_type`: where its
modules sit (what depthlab.models.architectures' adapter hooks for the residual stream, pruning
and skipping) and how it spends parameters beyond its matrices (what depthlab.plan.model_shapes
sizes a job from). A family added here is analysed and planned; torch-free, so the planner reads
it at DAG time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModulePaths:
    """Module paths of one architecture family: `layers`/`final_norm`/`project_out` from the
    base model, `attention`/`mlp` from inside one decoder layer."""

    family: str
    layers: str
    final_norm: str | None
    attention: str
    mlp: str
    project_out: str | None = None


@dataclass(frozen=True)
class ParameterLayout:
    """How a model family spends parameters beyond its matrices."""

    norm_params: int  # per norm and hidden unit: 1 (RMSNorm gain) or 2 (LayerNorm gain + bias)
    norms_per_layer: int
    gated_mlp: bool  # gate, up, down (SwiGLU) or two matrices
    qkv_bias: bool
    output_bias: bool  # attention output and both MLP matrices carry biases
    qk_norm: str | None  # "head": a gain per head dim on q and k; "full": over all of q and k
    learned_positions: int | None = None  # rows of a learned position table beyond max_positions


@dataclass(frozen=True)
class ModelType:
    """One model_type: `paths` None means its modules are found by their structure when it is
    loaded; `parameters` None means the planner sizes it with Llama's layout."""

    paths: ModulePaths | None
    parameters: ParameterLayout | None
    placement: str = "pre"  # where its norms sit: a key of NORM_PLACEMENTS


# Where a family's norms sit around its sub-layers. The Curse of Depth's claims are about Pre-LN:
# decided on a family of another placement they test another architecture, and its rows say so.
NORM_PLACEMENTS = {
    "pre": "Pre-LN: a norm before each sub-layer",
    "peri": "a norm before and after each sub-layer (Peri-LN's placement), not Pre-LN",
    "output": "a norm after each sub-layer's output only (OLMo-2's placement), not Pre-LN",
    "post": "Post-LN: a norm after each residual add",
}


LLAMA_PATHS = ModulePaths("llama", layers="layers", final_norm="norm", attention="self_attn",
                          mlp="mlp")  # fmt: skip
OLMO2_PATHS = ModulePaths("olmo2", layers="layers", final_norm="norm",
                          attention="post_attention_layernorm", mlp="post_feedforward_layernorm")  # fmt: skip
GPT_NEOX_PATHS = ModulePaths("gpt_neox", layers="layers", final_norm="final_layer_norm",
                             attention="attention", mlp="mlp")  # fmt: skip
GPT2_PATHS = ModulePaths("gpt2", layers="h", final_norm="ln_f", attention="attn", mlp="mlp")
OPT_PATHS = ModulePaths("opt", layers="decoder.layers", final_norm="decoder.final_layer_norm",
                        attention="self_attn", mlp="fc2", project_out="decoder.project_out")  # fmt: skip
BERT_PATHS = ModulePaths("bert", layers="encoder.layer", final_norm=None,
                         attention="attention.output.dense", mlp="output.dense")  # fmt: skip
# Tried in this order for an unknown model_type whose modules look like a known family.
STRUCTURAL_PATHS = (OLMO2_PATHS, LLAMA_PATHS, GPT_NEOX_PATHS, GPT2_PATHS, OPT_PATHS, BERT_PATHS)

LLAMA_PARAMETERS = ParameterLayout(norm_params=1, norms_per_layer=2, gated_mlp=True,
                                   qkv_bias=False, output_bias=False, qk_norm=None)  # fmt: skip
LAYER_NORM_MLP_PARAMETERS = ParameterLayout(norm_params=2, norms_per_layer=2, gated_mlp=False,
                                            qkv_bias=True, output_bias=True, qk_norm=None)  # fmt: skip

MODEL_TYPES = {
    "llama": ModelType(LLAMA_PATHS, LLAMA_PARAMETERS),
    "mistral": ModelType(LLAMA_PATHS, LLAMA_PARAMETERS),
    # the models trained here, every norm scheme (a scheme's norms per layer: core/norm_schemes)
    "depthlab_llama": ModelType(LLAMA_PATHS, LLAMA_PARAMETERS),
    "qwen2": ModelType(LLAMA_PATHS, replace(LLAMA_PARAMETERS, qkv_bias=True)),
    "qwen3": ModelType(LLAMA_PATHS, replace(LLAMA_PARAMETERS, qk_norm="head")),
    "olmo": ModelType(LLAMA_PATHS, None),
    "olmo2": ModelType(OLMO2_PATHS, replace(LLAMA_PARAMETERS, qk_norm="full"), "output"),
    "gemma3_text": ModelType(
        None, replace(LLAMA_PARAMETERS, norms_per_layer=4, qk_norm="head"), "peri"
    ),
    "gpt_neox": ModelType(GPT_NEOX_PATHS, LAYER_NORM_MLP_PARAMETERS),
    "gpt2": ModelType(GPT2_PATHS, None),
    # OPT's position table has 2 extra rows
    "opt": ModelType(OPT_PATHS, replace(LAYER_NORM_MLP_PARAMETERS, learned_positions=2)),
    "bert": ModelType(BERT_PATHS, replace(LAYER_NORM_MLP_PARAMETERS, learned_positions=0), "post"),
    "roberta": ModelType(BERT_PATHS, None, "post"),
    "xlm-roberta": ModelType(BERT_PATHS, None, "post"),
    "electra": ModelType(BERT_PATHS, None, "post"),
}


def module_paths() -> dict[str, ModulePaths]:
    """model_type -> its module paths, for the types that declare them."""
    return {name: t.paths for name, t in MODEL_TYPES.items() if t.paths is not None}


def parameter_layout(model_type: str) -> ParameterLayout:
    """The planner's parameter layout of `model_type` (Llama's where none is declared)."""
    declared = MODEL_TYPES.get(model_type)
    return declared.parameters if declared and declared.parameters else LLAMA_PARAMETERS


def norm_placement(model_type: str | None) -> str | None:
    """Where `model_type`'s norms sit (a key of NORM_PLACEMENTS; None for an undeclared type)."""
    declared = MODEL_TYPES.get(model_type or "")
    return declared.placement if declared else None
