"""LLaMA-style decoder (RMSNorm, RoPE, SwiGLU, no biases) with six normalisation schemes.

Built from transformers' Llama components, so attention kernels, caching and masks are the
library's own; only the decoder block's placement of norms and residuals changes:

    pre_ln       h = h + Attn(N1(h));               h = h + MLP(N2(h))
    lns          h = h + Attn(N1(h)/sqrt(l));       h = h + MLP(N2(h)/sqrt(l))   (CoD Eq. 5, l 1-based)
    scaled_init  pre_ln with o_proj/down_proj init std sigma/sqrt(2L)
    post_ln      h = N1(h + Attn(h));               h = N2(h + MLP(h))
    mix_ln       post_ln for the first round(f*L) layers, pre_ln after (Mix-LN, f = 0.25)
    deepnorm     h = N1(alpha*h + Attn(h));         h = N2(alpha*h + MLP(h)),
                 alpha = (2L)^(1/4); v/o/MLP init scaled by beta = (8L)^(-1/4) (DeepNet)

The final norm is never scaled. pre_ln, lns and scaled_init models export as plain
`LlamaForCausalLM` (the 1/sqrt(l) of LNS is folded into the norm gains, which is exact because
RMSNorm's output is linear in its gain); the others save as `DepthlabForCausalLM`, registered
with the transformers Auto classes when this module is imported.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import (AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM,
                          initialization as init)
from transformers.models.llama.modeling_llama import (LlamaDecoderLayer, LlamaModel,
                                                      LlamaPreTrainedModel, LlamaRMSNorm,
                                                      LlamaRotaryEmbedding)

NORM_SCHEMES = ("pre_ln", "post_ln", "mix_ln", "deepnorm", "scaled_init", "lns")
PLAIN_LLAMA_SCHEMES = ("pre_ln", "scaled_init", "lns")


@strict
class DepthlabConfig(LlamaConfig):
    model_type = "depthlab_llama"
    norm_scheme: str = "pre_ln"
    # Mix-LN: how many of the first layers are Post-LN (the rest are Pre-LN).
    mix_ln_post_layers: int = 0

    def validate_architecture(self):
        super().validate_architecture()
        if self.norm_scheme not in NORM_SCHEMES:
            raise ValueError(f"norm_scheme: unknown scheme '{self.norm_scheme}' "
                             f"(known: {', '.join(NORM_SCHEMES)})")
        if not 0 <= self.mix_ln_post_layers <= self.num_hidden_layers:
            raise ValueError(f"mix_ln_post_layers: {self.mix_ln_post_layers} is outside "
                             f"0..{self.num_hidden_layers}")


def is_post_ln_layer(config: DepthlabConfig, layer_idx: int) -> bool:
    if config.norm_scheme in ("post_ln", "deepnorm"):
        return True
    if config.norm_scheme == "mix_ln":
        return layer_idx < config.mix_ln_post_layers
    return False


def residual_scale(config: DepthlabConfig) -> float:
    """DeepNorm's alpha = (2N)^(1/4) on the residual branch; 1 otherwise."""
    if config.norm_scheme == "deepnorm":
        return (2 * config.num_hidden_layers) ** 0.25
    return 1.0


def norm_output_scale(config: DepthlabConfig, layer_idx: int) -> float:
    """LayerNorm Scaling: 1/sqrt(l) with l = layer_idx + 1 (layer 1 unscaled); 1 otherwise."""
    if config.norm_scheme == "lns":
        return 1.0 / math.sqrt(layer_idx + 1)
    return 1.0


def projection_init_stds(config: DepthlabConfig) -> dict[str, float]:
    """Per-projection init std overriding N(0, initializer_range), by norm scheme."""
    std = config.initializer_range
    if config.norm_scheme == "scaled_init":
        scaled = std / math.sqrt(2 * config.num_hidden_layers)
        return {"o_proj": scaled, "down_proj": scaled}
    if config.norm_scheme == "deepnorm":
        beta = (8 * config.num_hidden_layers) ** -0.25
        return {name: std * beta for name in ("v_proj", "o_proj", "gate_proj", "up_proj",
                                              "down_proj")}
    return {}


class DepthlabDecoderLayer(LlamaDecoderLayer):
    def __init__(self, config: DepthlabConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.post_ln = is_post_ln_layer(config, layer_idx)
        self.residual_scale = residual_scale(config)
        self.norm_output_scale = norm_output_scale(config, layer_idx)
        # Read by DepthlabPreTrainedModel._init_weights (HF init runs module by module).
        for name, std in projection_init_stds(config).items():
            owner = self.self_attn if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) \
                else self.mlp
            getattr(owner, name).init_std = std

    def forward(self, hidden_states, attention_mask=None, position_ids=None, cache=None,
                use_cache=False, position_embeddings=None, **kwargs):
        attention_kwargs = dict(attention_mask=attention_mask, position_ids=position_ids,
                                cache=cache, use_cache=use_cache,
                                position_embeddings=position_embeddings, **kwargs)
        if self.post_ln:
            attn_out, _ = self.self_attn(hidden_states=hidden_states, **attention_kwargs)
            hidden_states = self.input_layernorm(self.residual_scale * hidden_states + attn_out)
            mlp_out = self.mlp(hidden_states)
            return self.post_attention_layernorm(self.residual_scale * hidden_states + mlp_out)

        normed = self.input_layernorm(hidden_states)
        if self.norm_output_scale != 1.0:
            normed = normed * self.norm_output_scale
        attn_out, _ = self.self_attn(hidden_states=normed, **attention_kwargs)
        hidden_states = hidden_states + attn_out
        normed = self.post_attention_layernorm(hidden_states)
        if self.norm_output_scale != 1.0:
            normed = normed * self.norm_output_scale
        return hidden_states + self.mlp(normed)


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
            [DepthlabDecoderLayer(config, idx) for idx in range(config.num_hidden_layers)])
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


AutoConfig.register(DepthlabConfig.model_type, DepthlabConfig, exist_ok=True)
AutoModelForCausalLM.register(DepthlabConfig, DepthlabForCausalLM, exist_ok=True)


def make_config(architecture: dict, norm_scheme: str, vocab_size: int, max_positions: int,
                init_std: float = 0.02, bos_token_id=None, eos_token_id=None,
                pad_token_id=None) -> DepthlabConfig:
    """DepthlabConfig from a config-file `architecture:` block (see config/schema.yaml)."""
    if norm_scheme not in NORM_SCHEMES:
        raise ValueError(f"norm_scheme: unknown scheme '{norm_scheme}' "
                         f"(known: {', '.join(NORM_SCHEMES)})")
    num_layers = architecture["num_layers"]
    mix_ln_post_layers = 0
    if norm_scheme == "mix_ln":
        post_fraction = architecture.get("mix_ln_post_fraction")
        if post_fraction is None:
            raise ValueError("architecture.mix_ln_post_fraction: required for norm_scheme mix_ln")
        mix_ln_post_layers = math.floor(post_fraction * num_layers + 0.5)  # round half up
        if mix_ln_post_layers == 0:
            raise ValueError(f"architecture.mix_ln_post_fraction: {post_fraction} of "
                             f"{num_layers} layers rounds to no Post-LN layer (that is pre_ln)")
    return DepthlabConfig(
        vocab_size=vocab_size,
        hidden_size=architecture["hidden_size"],
        intermediate_size=architecture["intermediate_size"],
        num_hidden_layers=num_layers,
        num_attention_heads=architecture["num_heads"],
        num_key_value_heads=architecture.get("num_kv_heads", architecture["num_heads"]),
        max_position_embeddings=max_positions,
        rope_parameters={"rope_type": "default",
                         "rope_theta": architecture.get("rope_theta", 10000.0)},
        initializer_range=init_std,
        tie_word_embeddings=False,
        use_cache=False,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        norm_scheme=norm_scheme,
        mix_ln_post_layers=mix_ln_post_layers,
    )


def build_model(config: DepthlabConfig, seed: int) -> DepthlabForCausalLM:
    """A freshly initialised model; the seed fixes the weights exactly."""
    torch.manual_seed(seed)
    return DepthlabForCausalLM(config)


def to_plain_llama(model: DepthlabForCausalLM) -> LlamaForCausalLM:
    """Export a pre_ln / lns / scaled_init model as vanilla LlamaForCausalLM (LNS folded in)."""
    config = model.config
    if config.norm_scheme not in PLAIN_LLAMA_SCHEMES:
        raise ValueError(f"norm_scheme '{config.norm_scheme}' has no plain-Llama equivalent "
                         f"(only {', '.join(PLAIN_LLAMA_SCHEMES)})")
    fields = config.to_dict()
    for key in ("norm_scheme", "mix_ln_post_layers", "model_type", "architectures",
                "transformers_version"):
        fields.pop(key, None)
    llama_config = LlamaConfig(**fields)
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    for idx, layer in enumerate(model.model.layers):
        scale = norm_output_scale(config, idx)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            state[f"model.layers.{idx}.{norm}.weight"] *= scale
    llama = LlamaForCausalLM(llama_config).to(next(model.parameters()).dtype)
    llama.load_state_dict(state, strict=True)
    return llama


def save_checkpoint(model: DepthlabForCausalLM, tokenizer, out_dir: str | Path) -> None:
    """An ordinary HF directory: plain Llama where exact, else the registered depthlab class."""
    export = to_plain_llama(model) if model.config.norm_scheme in PLAIN_LLAMA_SCHEMES else model
    export.save_pretrained(out_dir)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
