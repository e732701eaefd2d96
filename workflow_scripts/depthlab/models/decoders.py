"""The project's models: building, seeding and saving the decoders of `modeling_depthlab`.

The classes and the norm-scheme formulas live in `depthlab/models/modeling_depthlab.py` (see its
docstring), which imports only torch and transformers. Checkpoints are ordinary HF folders:
the schemes declared `plain_llama` (pre_ln, lns, scaled_init) export as plain `LlamaForCausalLM`
(the 1/sqrt(l) of LNS is folded into the norm gains, which is exact because RMSNorm's output is
linear in its gain); the others (post_ln, mix_ln, deepnorm, ...) save as `DepthlabForCausalLM`
with `modeling_depthlab.py` copied beside the weights and an `auto_map` in config.json, the transformers convention for custom code, so
`AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)` loads them without this
project. Importing this module also registers `depthlab_llama` with the Auto classes, so the
workflow loads them with its own copy of the code.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from depthlab.core.norm_schemes import check_architecture, deepnorm_variants
from depthlab.models.modeling_depthlab import (  # noqa: F401
    DEEPNORM_VARIANTS,
    LNS_REFERENCE_ALPHA,
    NORM_SCHEMES,
    DepthlabConfig,
    DepthlabDecoderLayer,
    DepthlabForCausalLM,
    DepthlabModel,
    DepthlabPreTrainedModel,
    is_post_ln_layer,
    norm_output_scale,
    projection_init_stds,
    residual_scale,
)

PLAIN_LLAMA_SCHEMES = tuple(name for name, s in NORM_SCHEMES.items() if s["plain_llama"])
# DepthlabConfig fields a plain LlamaConfig must not carry.
DEPTHLAB_CONFIG_KEYS = ("norm_scheme", "mix_ln_post_layers", "deepnorm_variant", "auto_map")

AutoConfig.register(DepthlabConfig.model_type, DepthlabConfig, exist_ok=True)
AutoModelForCausalLM.register(DepthlabConfig, DepthlabForCausalLM, exist_ok=True)
# save_pretrained then copies modeling_depthlab.py into the folder and writes config.auto_map.
DepthlabConfig.register_for_auto_class("AutoConfig")
DepthlabForCausalLM.register_for_auto_class("AutoModelForCausalLM")


def make_config(
    architecture: dict,
    norm_scheme: str,
    vocab_size: int,
    max_positions: int,
    init_std: float = 0.02,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
) -> DepthlabConfig:
    """DepthlabConfig from a config-file `architecture:` block (see config/schema.yaml)."""
    if norm_scheme not in NORM_SCHEMES:
        raise ValueError(
            f"norm_scheme: unknown scheme '{norm_scheme}' (known: {', '.join(NORM_SCHEMES)})"
        )
    num_layers = architecture["num_layers"]
    mix_ln_post_layers = check_architecture(architecture, norm_scheme)
    deepnorm_variant = architecture.get("deepnorm_variant", deepnorm_variants()[0])
    return DepthlabConfig(
        vocab_size=vocab_size,
        hidden_size=architecture["hidden_size"],
        intermediate_size=architecture["intermediate_size"],
        num_hidden_layers=num_layers,
        num_attention_heads=architecture["num_heads"],
        num_key_value_heads=architecture.get("num_kv_heads", architecture["num_heads"]),
        max_position_embeddings=max_positions,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": architecture.get("rope_theta", 10000.0),
        },
        initializer_range=init_std,
        tie_word_embeddings=False,
        use_cache=False,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        norm_scheme=norm_scheme,
        mix_ln_post_layers=mix_ln_post_layers,
        deepnorm_variant=deepnorm_variant,
    )


def build_model(config: DepthlabConfig, seed: int) -> DepthlabForCausalLM:
    """A freshly initialised model; the seed fixes the weights exactly."""
    torch.manual_seed(seed)
    return DepthlabForCausalLM(config)


def to_plain_llama(model: DepthlabForCausalLM) -> LlamaForCausalLM:
    """Export a pre_ln / lns / scaled_init model as vanilla LlamaForCausalLM (LNS folded in)."""
    config = model.config
    if config.norm_scheme not in PLAIN_LLAMA_SCHEMES:
        raise ValueError(
            f"norm_scheme '{config.norm_scheme}' has no plain-Llama equivalent "
            f"(only {', '.join(PLAIN_LLAMA_SCHEMES)})"
        )
    fields = config.to_dict()
    for key in (*DEPTHLAB_CONFIG_KEYS, "model_type", "architectures", "transformers_version"):
        fields.pop(key, None)
    llama_config = LlamaConfig(**fields)
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    for idx in range(len(model.model.layers)):
        scale = norm_output_scale(config, idx)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            state[f"model.layers.{idx}.{norm}.weight"] *= scale
    llama = LlamaForCausalLM(llama_config).to(next(model.parameters()).dtype)
    llama.load_state_dict(state, strict=True)
    return llama


def save_checkpoint(model: DepthlabForCausalLM, tokenizer, out_dir: str | Path) -> None:
    """An ordinary HF directory: plain Llama where exact, else `DepthlabForCausalLM` with its
    modeling file and config.auto_map (loads with trust_remote_code=True without depthlab)."""
    export = to_plain_llama(model) if model.config.norm_scheme in PLAIN_LLAMA_SCHEMES else model
    export.save_pretrained(out_dir)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
