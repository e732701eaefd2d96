"""LLaMA-style decoder (RMSNorm, RoPE, SwiGLU, no biases) with the normalisation schemes of
`NORM_SCHEMES`.

Self-contained: imports only torch and transformers (and huggingface_hub, which transformers
requires), because this file is copied beside the weights of every checkpoint that is not a
plain Llama, so that `AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`
loads it anywhere.

Built from transformers' Llama components, so attention kernels, caching and masks are the
library's own; only the decoder block's placement of norms and residuals changes:

    pre_ln       h = h + Attn(N1(h));               h = h + MLP(N2(h))
    lns          h = h + Attn(N1(h)/sqrt(l));       h = h + MLP(N2(h)/sqrt(l))   (l 1-based)
    scaled_init  pre_ln with o_proj/down_proj init std sigma/sqrt(2L)
    post_ln      h = N1(h + Attn(h));               h = N2(h + MLP(h))
    mix_ln       post_ln for the first `mix_ln_post_layers` layers, pre_ln after
    peri_ln      h = h + N3(Attn(N1(h)));           h = h + N4(MLP(N2(h)))
                 (Peri-LN, Kim et al. 2025: a norm before and after each sub-layer, the
                 placement of Gemma-2/3; OLMo-2 keeps only the output norms N3, N4)
    deepnorm     h = N1(alpha*h + Attn(h));         h = N2(alpha*h + MLP(h)), with
                 deepnorm_variant
                   deepnet        alpha = (2L)^(1/4); v/o/MLP init std sigma*(8L)^(-1/4)
                                  (DeepNet, decoder-only)
                   lns_reference  alpha = 2*sqrt(2) whatever L; v/o/MLP Xavier-normal init
                                  with gain (8L)^(+1/4), q/k Xavier-normal with gain 1 (the
                                  DeepNorm baseline of the LayerNorm-Scaling code)

sigma is `initializer_range`; every other matrix is N(0, sigma), norm gains start at 1. The final
norm is never scaled.

`NORM_SCHEMES` declares each scheme once: its placement of the norms (the layer below reads it),
its RMSNorms per layer (the resource planner's parameter count), whether it exports as plain
Llama and its colour in every figure. It holds plain literals only, because the planner and the
figures read it without importing torch (depthlab.core.norm_schemes parses this file); adding a
scheme is one entry here plus its formula in the layer.
"""

from __future__ import annotations

import math

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers import initialization as init
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaModel,
    LlamaPreTrainedModel,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

# placement: "pre"  h = h + F(N(h))                          (per sub-layer F: attention, MLP)
#            "post" h = N(s*h + F(h))
#            "mix"  post for the first mix_ln_post_layers layers, pre after
#            "peri" h = h + N_out(F(N_in(h)))
# norms_per_layer: RMSNorms in one decoder layer; plain_llama: the checkpoint is a plain
# LlamaForCausalLM (else this file is copied beside the weights); colour: hex RGB in figures
# (seaborn's colourblind palette; its grey, pink, yellow and sky blue are the hub models').
NORM_SCHEMES = {
    "pre_ln": {"placement": "pre", "norms_per_layer": 2, "plain_llama": True, "colour": "#0173b2"},
    "post_ln": {"placement": "post", "norms_per_layer": 2, "plain_llama": False, "colour": "#de8f05"},
    "mix_ln": {"placement": "mix", "norms_per_layer": 2, "plain_llama": False, "colour": "#029e73"},
    "deepnorm": {"placement": "post", "norms_per_layer": 2, "plain_llama": False, "colour": "#cc78bc"},
    "scaled_init": {"placement": "pre", "norms_per_layer": 2, "plain_llama": True, "colour": "#ca9161"},
    "lns": {"placement": "pre", "norms_per_layer": 2, "plain_llama": True, "colour": "#d55e00"},
    "peri_ln": {"placement": "peri", "norms_per_layer": 4, "plain_llama": False, "colour": "#332288"},
}  # fmt: skip
DEEPNORM_VARIANTS = ("deepnet", "lns_reference")
LNS_REFERENCE_ALPHA = 2 * math.sqrt(2)
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


@strict
class DepthlabConfig(LlamaConfig):
    model_type = "depthlab_llama"
    norm_scheme: str = "pre_ln"
    # Mix-LN: how many of the first layers are Post-LN (the rest are Pre-LN).
    mix_ln_post_layers: int = 0
    # DeepNorm's residual factor and init (see the module docstring); read only by deepnorm.
    deepnorm_variant: str = "deepnet"

    def validate_architecture(self):
        super().validate_architecture()
        if self.norm_scheme not in NORM_SCHEMES:
            raise ValueError(
                f"norm_scheme: unknown scheme '{self.norm_scheme}' "
                f"(known: {', '.join(NORM_SCHEMES)})"
            )
        if not 0 <= self.mix_ln_post_layers <= self.num_hidden_layers:
            raise ValueError(
                f"mix_ln_post_layers: {self.mix_ln_post_layers} is outside "
                f"0..{self.num_hidden_layers}"
            )
        if self.deepnorm_variant not in DEEPNORM_VARIANTS:
            raise ValueError(
                f"deepnorm_variant: unknown variant '{self.deepnorm_variant}' "
                f"(known: {', '.join(DEEPNORM_VARIANTS)})"
            )


def layer_placement(config: DepthlabConfig, layer_idx: int) -> str:
    """Where layer `layer_idx` puts its norms: "pre", "post" (or another placement of
    NORM_SCHEMES); mix resolves to post for the first mix_ln_post_layers layers."""
    placement = NORM_SCHEMES[config.norm_scheme]["placement"]
    if placement == "mix":
        return "post" if layer_idx < config.mix_ln_post_layers else "pre"
    return placement


def is_post_ln_layer(config: DepthlabConfig, layer_idx: int) -> bool:
    return layer_placement(config, layer_idx) == "post"


def residual_scale(config: DepthlabConfig) -> float:
    """DeepNorm's alpha on the residual branch; 1 for every other scheme."""
    if config.norm_scheme != "deepnorm":
        return 1.0
    if config.deepnorm_variant == "lns_reference":
        return LNS_REFERENCE_ALPHA
    return (2 * config.num_hidden_layers) ** 0.25


def norm_output_scale(config: DepthlabConfig, layer_idx: int) -> float:
    """LayerNorm Scaling: 1/sqrt(l) with l = layer_idx + 1 (layer 1 unscaled); 1 otherwise."""
    if config.norm_scheme == "lns":
        return 1.0 / math.sqrt(layer_idx + 1)
    return 1.0


def projection_shapes(config: DepthlabConfig) -> dict[str, tuple[int, int]]:
    """(fan_in, fan_out) of each decoder-layer projection."""
    hidden, inner = config.hidden_size, config.intermediate_size
    query = config.num_attention_heads * config.head_dim
    key_value = config.num_key_value_heads * config.head_dim
    return {
        "q_proj": (hidden, query),
        "k_proj": (hidden, key_value),
        "v_proj": (hidden, key_value),
        "o_proj": (query, hidden),
        "gate_proj": (hidden, inner),
        "up_proj": (hidden, inner),
        "down_proj": (inner, hidden),
    }


def projection_init_stds(config: DepthlabConfig) -> dict[str, float]:
    """Per-projection init std overriding N(0, initializer_range), by norm scheme."""
    std = config.initializer_range
    if config.norm_scheme == "scaled_init":
        scaled = std / math.sqrt(2 * config.num_hidden_layers)
        return {"o_proj": scaled, "down_proj": scaled}
    if config.norm_scheme != "deepnorm":
        return {}
    if config.deepnorm_variant == "lns_reference":
        # Xavier normal: std = gain * sqrt(2 / (fan_in + fan_out)).
        gain = (8 * config.num_hidden_layers) ** 0.25
        return {
            name: (1.0 if name in ("q_proj", "k_proj") else gain)
            * math.sqrt(2.0 / (fan_in + fan_out))
            for name, (fan_in, fan_out) in projection_shapes(config).items()
        }
    beta = (8 * config.num_hidden_layers) ** -0.25
    return {name: std * beta for name in ("v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")}


class DepthlabDecoderLayer(LlamaDecoderLayer):
    def __init__(self, config: DepthlabConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.placement = layer_placement(config, layer_idx)
        self.post_ln = self.placement == "post"
        # The modules whose outputs are added to the residual stream (read by the analysis
        # adapter, depthlab.models.architectures).
        self.update_modules = {"attention": "self_attn", "mlp": "mlp"}
        if self.placement not in ("pre", "post", "peri"):
            raise ValueError(
                f"norm_scheme {config.norm_scheme}: unknown placement {self.placement!r}"
            )
        if self.placement == "peri":  # the sub-layers' output norms (gains start at 1)
            self.attention_output_norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.mlp_output_norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.update_modules = {"attention": "attention_output_norm", "mlp": "mlp_output_norm"}
        self.residual_scale = residual_scale(config)
        self.norm_output_scale = norm_output_scale(config, layer_idx)
        # Read by DepthlabPreTrainedModel._init_weights (HF init runs module by module).
        for name, std in projection_init_stds(config).items():
            owner = self.self_attn if name in ATTENTION_PROJECTIONS else self.mlp
            getattr(owner, name).init_std = std

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        position_ids=None,
        cache=None,
        use_cache=False,
        position_embeddings=None,
        **kwargs,
    ):
        attention_kwargs = dict(
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
        if self.post_ln:
            attn_out, _ = self.self_attn(hidden_states=hidden_states, **attention_kwargs)
            hidden_states = self.input_layernorm(self.residual_scale * hidden_states + attn_out)
            mlp_out = self.mlp(hidden_states)
            return self.post_attention_layernorm(self.residual_scale * hidden_states + mlp_out)

        normed = self.input_layernorm(hidden_states)
        if self.norm_output_scale != 1.0:
            normed = normed * self.norm_output_scale
        attn_out, _ = self.self_attn(hidden_states=normed, **attention_kwargs)
        if self.placement == "peri":
            attn_out = self.attention_output_norm(attn_out)
        hidden_states = hidden_states + attn_out
        normed = self.post_attention_layernorm(hidden_states)
        if self.norm_output_scale != 1.0:
            normed = normed * self.norm_output_scale
        mlp_out = self.mlp(normed)
        if self.placement == "peri":
            mlp_out = self.mlp_output_norm(mlp_out)
        return hidden_states + mlp_out


class DepthlabPreTrainedModel(LlamaPreTrainedModel):
    config: DepthlabConfig
    config_class = DepthlabConfig
    _no_split_modules = ["DepthlabDecoderLayer"]

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        std = getattr(module, "init_std", None)
        if std is not None:
            init.normal_(module.weight, mean=0.0, std=std)


class DepthlabModel(DepthlabPreTrainedModel, LlamaModel):
    def __init__(self, config: DepthlabConfig):
        DepthlabPreTrainedModel.__init__(self, config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList(
            [DepthlabDecoderLayer(config, idx) for idx in range(config.num_hidden_layers)]
        )
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config=config)
        self.gradient_checkpointing = False
        self.post_init()


class DepthlabForCausalLM(DepthlabPreTrainedModel, LlamaForCausalLM):
    def __init__(self, config: DepthlabConfig):
        DepthlabPreTrainedModel.__init__(self, config)
        self.model = DepthlabModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()
