"""Removing decoder layers from a model: an in-memory view, a copy, an exported HF folder, the loss.

Removing a set D of layers from a model of L layers keeps the layers l not in D in their order;
the kept layer that was number l computes exactly what it computed in the full model (its
weights, its LNS scale, its attention type), only its input changes: the pruned model equals the
full model run with the layers of D replaced by the identity. For every family the adapter
supports (depthlab.models.architectures) removal

  - swaps the decoder ModuleList for one holding the kept layers (no weight is copied),
  - renumbers `layer_idx` of every submodule that has one (KV caches index layers by it),
  - sets the layer count (`num_hidden_layers`, GPT-2's `n_layer` through its attribute map) and
    slices the per-layer config lists (`layer_types` and every other list with one entry per
    layer); Qwen's `max_window_layers`, Mix-LN's `mix_ln_post_layers` count the kept layers
    below the old boundary.

`pruned_view` does this in place and undoes it on exit (sweeps: one model in memory, no weight
copies; a model dispatched over several devices keeps its layers' accelerate hooks, so each kept
layer still runs on its own device); `export_pruned` writes an ordinary HF folder that
`from_pretrained` loads with no
missing, unexpected or re-initialised weight. A depthlab pre_ln / lns / scaled_init model exports
as plain `LlamaForCausalLM` (each kept layer's LNS factor 1/sqrt(l) of its *original* depth
folded into its norm gains); post_ln / mix_ln / deepnorm as `depthlab_llama`. DeepNorm's residual
factor alpha = (2L)^(1/4) is recomputed from the layer count when a folder is loaded, so the
export keeps the original alpha by scaling the sublayer outputs (o_proj, down_proj) by
alpha'/alpha: RMSNorm(alpha' h + (alpha'/alpha) f(h)) = RMSNorm(alpha h + f(h)) up to the norm's
epsilon (relative 1e-6). Beside the folder, `mergekit.yaml` is the mergekit passthrough config
that rebuilds the same layer selection from the original model (one slice per run of kept layers,
`layer_range` 0-based and end-exclusive): `mergekit-yaml mergekit.yaml OUT` (mergekit 0.1.5,
pinned) writes a folder whose logits equal the export's. Where a passthrough cannot rebuild the
export (`mergekit_obstacle`: a depthlab_llama original, a config list that removal slices; or a
caller's reason, e.g. a sub-layer removal) the record says why and no config is written.

The loss projects the final states onto the vocabulary a few positions at a time
(`head_losses`), so a 262k-word head never holds [batch, seq, vocab] logits at once; with
`loss_tokens` only the last that many target positions of each window are scored (the earlier
ones are context), which is where the head's cost goes down.

This module sits below the pruning strategies (depthlab.stages.pruning.strategies), healing, the lm-eval tasks and
the speed measurement, which all use it; it imports none of them.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from depthlab.core.errors import PruningError, UnsupportedModelError
from depthlab.core.placement import materialised_state_dict
from depthlab.models.architectures import ModelAdapter, adapt, first_output
from depthlab.plan.engine_budgets import LOSS_CHUNK_ELEMENTS

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
    # transformers' model classes and depthlab.models.decoders are needed by exports only: the view and
    # the loss (sweeps, lm-eval variants) run without importing them
    from transformers import LlamaConfig, LlamaForCausalLM

    from depthlab.models.decoders import DEPTHLAB_CONFIG_KEYS

    fields = model.config.to_dict()
    for key in (*DEPTHLAB_CONFIG_KEYS, "model_type", "architectures", "transformers_version"):
        fields.pop(key, None)
    state = {k: v.detach().clone() for k, v in materialised_state_dict(model).items()}
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
    from depthlab.models.decoders import residual_scale  # export only (see _plain_llama_export)

    alpha_new = residual_scale(model.config)
    state = dict(materialised_state_dict(model))
    for idx, layer in enumerate(model.model.layers):
        factor = alpha_new / layer.residual_scale
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            key = f"model.layers.{idx}.{name}"
            state[key] = state[key] * factor
    return state


def kept_ranges(removed: Iterable[int], num_layers: int) -> list[tuple[int, int]]:
    """The kept layers as maximal runs [start, end): 0-based, end exclusive."""
    removed = set(normalise_removal(removed, num_layers))
    ranges: list[tuple[int, int]] = []
    for layer in range(num_layers):
        if layer in removed:
            continue
        if ranges and ranges[-1][1] == layer:
            ranges[-1] = (ranges[-1][0], layer + 1)
        else:
            ranges.append((layer, layer + 1))
    return ranges


def mergekit_config(
    source: str,
    removed: Iterable[int],
    num_layers: int,
    dtype: str,
    revision: str | None = None,
) -> str:
    """The text of a mergekit passthrough config that builds the model without `removed` from
    `source` (a local folder or hub id; `revision` as mergekit's `model@revision`): a comment
    stating the index convention, then the data (yaml.safe_dump)."""
    removed = normalise_removal(removed, num_layers)
    ranges = kept_ranges(removed, num_layers)
    model = f"{source}@{revision}" if revision else source
    data = {
        "merge_method": "passthrough",
        "dtype": dtype,
        "slices": [
            {"sources": [{"model": model, "layer_range": [start, end]}]} for start, end in ranges
        ],
    }
    header = [
        "# mergekit passthrough config: `mergekit-yaml mergekit.yaml OUT` rebuilds this pruned",
        "# model from the original. layer_range [start, end] is 0-based and END-EXCLUSIVE (like",
        "# Python's range): [0, 4] takes layers 0, 1, 2, 3.",
        f"# Original: {num_layers} layers; removed (0-based): "
        + (", ".join(map(str, removed)) or "none")
        + f"; kept: {num_layers - len(removed)} layers in {len(ranges)} slice(s).",
        "# A relative model path is relative to the directory the workflow ran in.",
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False)


# mergekit 0.1.5 (pinned) reads the original's folder, copies the kept layers' tensors unchanged
# and sets only `num_hidden_layers` in the output config: an export is a passthrough of the
# original exactly when its weights are the original's kept tensors and no other config entry
# changes. `mergekit_obstacle` says why not, where not; the export then records that reason
# instead of writing a config that would build a different model.
DEPTHLAB_OBSTACLE = (
    "the original is a depthlab_llama model ({scheme}), an architecture mergekit does not "
    "know{extra}; use the exported folder itself"
)
SUBLAYER_OBSTACLE = (
    "the removal set names sub-layer units (attention or MLP blocks of a layer): a mergekit "
    "passthrough copies whole layers only"
)


def mergekit_obstacle(model: nn.Module, removed: Iterable[int]) -> str | None:
    """Why a mergekit passthrough of the original model cannot rebuild `model` without the
    layers `removed` (None: it can). A model loaded from a folder this workflow wrote is plain
    Llama where exact (pre_ln / lns / scaled_init, depthlab.models.decoders.save_checkpoint);
    a depthlab_llama model is not, and DeepNorm's export also rescales o_proj / down_proj (alpha).
    Config lists with one entry per layer (Qwen's and Gemma's `layer_types`) and leading counts
    (`max_window_layers`) change on removal, which mergekit does not do."""
    config = model.config
    num_layers = adapt(model).num_layers
    removed = normalise_removal(removed, num_layers)
    if getattr(config, "model_type", None) == "depthlab_llama":
        scheme = getattr(config, "norm_scheme", None)
        extra = {
            "deepnorm": ", and the export rescales o_proj/down_proj (alpha), which a passthrough "
            "does not",
            "mix_ln": ", and mix_ln_post_layers is recounted over the kept layers",
        }.get(scheme, "")
        return DEPTHLAB_OBSTACLE.format(scheme=scheme, extra=extra)
    kept = [l for l in range(num_layers) if l not in removed]
    updates = config_updates(config, kept, num_layers)
    others = sorted(k for k in updates if k != "num_hidden_layers")
    if others:
        return (
            "removal also changes the config entries "
            + ", ".join(others)
            + ", which mergekit leaves as the original's (it sets only num_hidden_layers)"
        )
    return None


def export_pruned(
    model: nn.Module,
    removed: Iterable[int],
    out_dir: str | Path,
    tokenizer=None,
    metadata: dict | None = None,
    mergekit_source: str | None = None,
    revision: str | None = None,
    obstacle: str | None = None,
) -> dict:
    """Write the model without `removed` as an ordinary HF folder (plus the tokenizer and
    `pruning.json` naming the removed layers); returns that record. With `mergekit_source`
    (the original model's folder or hub id, at `revision`), also `mergekit.yaml`, the mergekit
    passthrough config that rebuilds the same model from the original, and the record's
    `mergekit`: {"expressible": true, "config": "mergekit.yaml"}; where a passthrough cannot
    rebuild it (`mergekit_obstacle`, or `obstacle`: a caller's own reason, e.g.
    SUBLAYER_OBSTACLE for an export of a sub-layer removal) no config is written and `mergekit`
    is {"expressible": false, "reason": ...}."""
    from depthlab.models.decoders import (
        PLAIN_LLAMA_SCHEMES,  # export only (see _plain_llama_export)
    )

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
    if mergekit_source is not None:
        reason = obstacle or mergekit_obstacle(model, removed)
        if reason:
            record["mergekit"] = {"expressible": False, "reason": reason}
        else:
            dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
            text = mergekit_config(mergekit_source, removed, num_layers, dtype, revision)
            (out_dir / "mergekit.yaml").write_text(text)
            record["mergekit"] = {"expressible": True, "config": "mergekit.yaml"}
    (out_dir / "pruning.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


# --------------------------------------------------------------------------- loss


def _vocab_size(adapter: ModelAdapter) -> int:
    weight = getattr(adapter.lm_head, "weight", None)
    return int(weight.shape[0]) if weight is not None else int(adapter.model.config.vocab_size)


def scored_positions(seq_len: int, loss_tokens: int | None) -> int:
    """Target positions scored per window of `seq_len` targets: the last `loss_tokens` (null:
    all of them)."""
    if loss_tokens is None:
        return seq_len
    if not 1 <= loss_tokens <= seq_len:
        raise PruningError(
            f"val.loss_tokens: {loss_tokens} scored positions per window, outside 1..{seq_len} "
            f"(val.seq_len)"
        )
    return loss_tokens


def head_losses(
    adapter: ModelAdapter,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    chunk_elements: int = LOSS_CHUNK_ELEMENTS,
    loss_tokens: int | None = None,
) -> tuple[float, np.ndarray]:
    """(summed loss, per-window summed loss) of the LM head read on `hidden`, the last layer's
    output before the final norm, [..., T, d] against `targets` [..., T] (one window per leading
    index). The one place every validation loss is scored: only the last `loss_tokens` target
    positions of each window are scored (null: all T); the earlier ones served as context in
    the layers and never reach the head. Positions go through norm -> head -> cross-entropy in
    chunks of at most `chunk_elements` float32 logits, each chunk's sum added in float64, so
    peak memory is bounded whatever the vocabulary. A config's `final_logit_softcapping`
    (Gemma 2/3) is applied as the model's own forward does."""
    if adapter.lm_head is None:
        raise UnsupportedModelError(f"{type(adapter.model).__name__} has no LM head: no loss")
    scored = scored_positions(targets.shape[-1], loss_tokens)
    if scored < targets.shape[-1]:
        hidden, targets = hidden[..., -scored:, :], targets[..., -scored:]
    rows = hidden.reshape(-1, hidden.shape[-1])
    flat = targets.reshape(-1).to(rows.device)  # adapter.logits answers on the rows' device
    step = max(1, int(chunk_elements) // _vocab_size(adapter))
    cap = getattr(adapter.model.config, "final_logit_softcapping", None)
    total = 0.0
    per_position = np.empty(rows.shape[0], dtype=np.float64)
    for start in range(0, rows.shape[0], step):
        # the final norm acts on each position alone: applying it per chunk changes nothing
        logits = adapter.logits(rows[start : start + step]).float()
        if cap:
            logits = torch.tanh(logits / cap) * cap
        # cross_entropy is nll_loss of log_softmax: one log-softmax gives the chunk's sum
        # (bit for bit what cross_entropy(reduction="sum") returns) and each position's loss
        log_probs = F.log_softmax(logits, dim=-1)
        target = flat[start : start + step]
        total += float(F.nll_loss(log_probs, target, reduction="sum"))
        per_position[start : start + step] = (
            F.nll_loss(log_probs, target, reduction="none").double().cpu().numpy()
        )
    return total, per_position.reshape(-1, scored).sum(axis=1)


def model_loss(
    model: nn.Module,
    windows: Sequence[torch.Tensor],
    chunk_elements: int = LOSS_CHUNK_ELEMENTS,
    loss_tokens: int | None = None,
) -> float:
    """Mean next-token cross-entropy of a model over validation windows (no reuse): a healed
    variant's loss, and (with prune_copy) the reference a prefix-reuse sweep must equal. The
    backbone runs once per window; the head is read in chunks on the last `loss_tokens` target
    positions of each window (null: all; `head_losses`)."""
    return model_losses(model, windows, chunk_elements, loss_tokens)[0]


def model_losses(
    model: nn.Module,
    windows: Sequence[torch.Tensor],
    chunk_elements: int = LOSS_CHUNK_ELEMENTS,
    loss_tokens: int | None = None,
) -> tuple[float, np.ndarray]:
    """(model_loss, the loss per validation window: the mean over each window's scored
    positions, as LossSweep.window_losses gives for a removal set)."""
    adapter = adapt(model)
    device = adapter.input_device
    captured = {}
    handle = adapter.layers[-1].register_forward_hook(
        lambda module, args, output: captured.__setitem__("h", first_output(output))
    )
    total, count, per_window = 0.0, 0, []
    try:
        with torch.inference_mode():
            for window in windows:
                window = window.to(device)
                targets = window[:, 1:]
                adapter.backbone(input_ids=window[:, :-1], use_cache=False)
                scored = scored_positions(targets.shape[-1], loss_tokens)
                summed, rows = head_losses(
                    adapter, captured.pop("h"), targets, chunk_elements, loss_tokens
                )
                total += summed
                count += targets.shape[0] * scored
                per_window.append(np.asarray(rows, dtype=np.float64) / scored)
    finally:
        handle.remove()
    return total / count, np.concatenate(per_window)
