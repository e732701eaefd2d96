"""Removing decoder layers from a model: an in-memory view, a copy, an exported HF folder, the loss.

Removing a set D of layers from a model of L layers keeps the layers l not in D in their order;
the kept layer that was number l computes exactly what it computed in the full model (its
weights, its LNS scale, its attention type), only its input changes: the pruned model equals the
full model run with the layers of D replaced by the identity. For every family the adapter
supports (depthlab.architectures) removal

  - swaps the decoder ModuleList for one holding the kept layers (no weight is copied),
  - renumbers `layer_idx` of every submodule that has one (KV caches index layers by it),
  - sets the layer count (`num_hidden_layers`, GPT-2's `n_layer` through its attribute map) and
    slices the per-layer config lists (`layer_types` and every other list with one entry per
    layer); Qwen's `max_window_layers`, Mix-LN's `mix_ln_post_layers` count the kept layers
    below the old boundary.

`pruned_view` does this in place and undoes it on exit (sweeps: one model in memory, no weight
copies); `export_pruned` writes an ordinary HF folder that `from_pretrained` loads with no
missing, unexpected or re-initialised weight. A depthlab pre_ln / lns / scaled_init model exports
as plain `LlamaForCausalLM` (each kept layer's LNS factor 1/sqrt(l) of its *original* depth
folded into its norm gains); post_ln / mix_ln / deepnorm as `depthlab_llama`. DeepNorm's residual
factor alpha = (2L)^(1/4) is recomputed from the layer count when a folder is loaded, so the
export keeps the original alpha by scaling the sublayer outputs (o_proj, down_proj) by
alpha'/alpha: RMSNorm(alpha' h + (alpha'/alpha) f(h)) = RMSNorm(alpha h + f(h)) up to the norm's
epsilon (relative 1e-6).

This module sits below the pruning strategies (depthlab.pruning), healing, the lm-eval tasks and
the speed measurement, which all use it; it imports none of them.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .architectures import ModelAdapter, adapt
from .errors import PruningError, UnsupportedModelError

# Config lists with one entry per layer (sliced on removal) and config ints that count the
# first layers with some property (recounted over the kept layers).
PER_LAYER_LISTS = ("layer_types", "no_rope_layers", "sliding_window_pattern_list")
LEADING_COUNTS = ("max_window_layers", "mix_ln_post_layers")
# Config lists of layer *indices* (remapped to the kept layers' new indices).
LAYER_INDEX_LISTS = ("mlp_only_layers",)


# --------------------------------------------------------------------------- removal sets


def normalise_removal(removed: Iterable[int], num_layers: int) -> tuple[int, ...]:
    """Sorted, unique layer indices; every index in 0..L-1 and at least one layer kept."""
    removed = tuple(sorted({int(l) for l in removed}))
    bad = [l for l in removed if not 0 <= l < num_layers]
    if bad:
        raise PruningError(f"layers {bad} are outside 0..{num_layers - 1}")
    if len(removed) >= num_layers:
        raise PruningError(f"removing {len(removed)} of {num_layers} layers leaves none")
    return removed


# --------------------------------------------------------------------------- the view


def _layer_container(adapter: ModelAdapter) -> tuple[nn.Module, str]:
    """(parent module, attribute) of the ModuleList that holds the decoder layers."""
    first = adapter.layers[0]
    for parent in adapter.backbone.modules():
        for name, child in parent.named_children():
            if (
                isinstance(child, nn.ModuleList)
                and len(child) == adapter.num_layers
                and child[0] is first
            ):
                return parent, name
    raise UnsupportedModelError(f"{type(adapter.model).__name__}: decoder ModuleList not found")


def config_updates(config, kept: Sequence[int], num_layers: int) -> dict:
    """The config attributes that change when only `kept` (old indices) remain."""
    updates = {"num_hidden_layers": len(kept)}
    values = config.to_dict() if hasattr(config, "to_dict") else vars(config)
    for key, value in values.items():
        if key in LAYER_INDEX_LISTS and isinstance(value, (list, tuple)):
            updates[key] = [kept.index(i) for i in value if i in kept]
        elif (
            isinstance(value, (list, tuple))
            and len(value) == num_layers
            and (key in PER_LAYER_LISTS or "layer" in key)
        ):
            updates[key] = type(value)(value[i] for i in kept)
        elif key in LEADING_COUNTS and isinstance(value, int) and not isinstance(value, bool):
            updates[key] = sum(1 for i in kept if i < value)
    return updates


def _set_config(config, updates: dict) -> dict:
    """Apply updates, returning the previous values (strict configs validate on assignment,
    so the layer count goes last when it shrinks and first when it grows)."""
    previous = {key: getattr(config, key) for key in updates}
    order = sorted(
        updates,
        key=lambda k: (
            (k == "num_hidden_layers")
            == (updates["num_hidden_layers"] < previous["num_hidden_layers"])
        ),
    )
    for key in order:
        setattr(config, key, updates[key])
    return previous


def _renumber(layers: Sequence[nn.Module], indices: Sequence[int]) -> list[tuple]:
    """Set layer_idx of every submodule of layers[k] to indices[k]; return what to restore."""
    restore = []
    for layer, index in zip(layers, indices):
        for module in layer.modules():
            if isinstance(getattr(module, "layer_idx", None), int):
                restore.append((module, module.layer_idx))
                module.layer_idx = index
    return restore


@contextlib.contextmanager
def pruned_view(model: nn.Module, removed: Iterable[int]):
    """Within the block, `model` is the model without the layers `removed` (old indices): the
    decoder ModuleList holds the kept layers (the same module objects, no copy), layer indices
    and config are those of a model built with that many layers. Everything is restored on exit.
    Yields the model."""
    adapter = adapt(model)
    num_layers = adapter.num_layers
    removed = normalise_removal(removed, num_layers)
    if not removed:
        yield model
        return
    kept = [l for l in range(num_layers) if l not in removed]
    parent, name = _layer_container(adapter)
    original = getattr(parent, name)
    previous = _set_config(model.config, config_updates(model.config, kept, num_layers))
    setattr(parent, name, nn.ModuleList([original[l] for l in kept]))
    restore = _renumber([original[l] for l in kept], range(len(kept)))
    try:
        yield model
    finally:
        for module, index in restore:
            module.layer_idx = index
        setattr(parent, name, original)
        _set_config(model.config, previous)


def prune_copy(model: nn.Module, removed: Iterable[int]) -> nn.Module:
    """A new model without the layers `removed` (its own copy of the kept weights only)."""
    with pruned_view(model, removed) as view:
        return copy.deepcopy(view)


# --------------------------------------------------------------------------- export


def _plain_llama_export(model):
    """A depthlab pre_ln / lns / scaled_init model (possibly a view) as plain LlamaForCausalLM,
    each layer's own LNS factor folded into its norm gains (not the factor of its new depth)."""
    # transformers' model classes and depthlab.models are needed by exports only: the view and
    # the loss (sweeps, lm-eval variants) run without importing them
    from transformers import LlamaConfig, LlamaForCausalLM

    from .models import DEPTHLAB_CONFIG_KEYS

    fields = model.config.to_dict()
    for key in (*DEPTHLAB_CONFIG_KEYS, "model_type", "architectures", "transformers_version"):
        fields.pop(key, None)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for idx, layer in enumerate(model.model.layers):
        scale = getattr(layer, "norm_output_scale", 1.0)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            state[f"model.layers.{idx}.{norm}.weight"] *= scale
    llama = LlamaForCausalLM(LlamaConfig(**fields)).to(next(model.parameters()).dtype)
    llama.load_state_dict(state, strict=True)
    return llama


def _deepnorm_state(model) -> dict:
    """State dict whose sublayer outputs carry alpha'/alpha: alpha' is the alpha the reloaded
    model computes for its kept depth ((2 L_kept)^(1/4) for DeepNet, constant for the LNS
    reference variant)."""
    from .models import residual_scale  # export only (see _plain_llama_export)

    alpha_new = residual_scale(model.config)
    state = dict(model.state_dict())
    for idx, layer in enumerate(model.model.layers):
        factor = alpha_new / layer.residual_scale
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            key = f"model.layers.{idx}.{name}"
            state[key] = state[key] * factor
    return state


def export_pruned(
    model: nn.Module,
    removed: Iterable[int],
    out_dir: str | Path,
    tokenizer=None,
    metadata: dict | None = None,
) -> dict:
    """Write the model without `removed` as an ordinary HF folder (plus the tokenizer and
    `pruning.json` naming the removed layers); returns that record."""
    from .models import PLAIN_LLAMA_SCHEMES  # export only (see _plain_llama_export)

    out_dir = Path(out_dir)
    num_layers = adapt(model).num_layers
    removed = normalise_removal(removed, num_layers)
    with pruned_view(model, removed) as view:
        scheme = getattr(view.config, "norm_scheme", None)
        model_type = getattr(view.config, "model_type", None)
        if model_type == "depthlab_llama" and scheme in PLAIN_LLAMA_SCHEMES:
            _plain_llama_export(view).save_pretrained(out_dir)
            exported_as = "LlamaForCausalLM"
        elif model_type == "depthlab_llama" and scheme == "deepnorm":
            view.save_pretrained(out_dir, state_dict=_deepnorm_state(view))
            exported_as = type(view).__name__
        else:
            view.save_pretrained(out_dir)
            exported_as = type(view).__name__
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
    record = {
        "removed_layers": list(removed),
        "original_num_layers": num_layers,
        "num_layers": num_layers - len(removed),
        "exported_as": exported_as,
        **(metadata or {}),
    }
    (out_dir / "pruning.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


# --------------------------------------------------------------------------- loss


def token_loss_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy (float32 logits)."""
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
    )


def model_loss(model: nn.Module, windows: Sequence[torch.Tensor]) -> float:
    """Mean next-token cross-entropy of a model over validation windows (no reuse): a healed
    variant's loss, and (with prune_copy) the reference a prefix-reuse sweep must equal."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.inference_mode():
        for window in windows:
            window = window.to(device)
            logits = model(input_ids=window[:, :-1], use_cache=False).logits
            total += float(token_loss_sum(logits, window[:, 1:]))
            count += window[:, 1:].numel()
    return total / count
