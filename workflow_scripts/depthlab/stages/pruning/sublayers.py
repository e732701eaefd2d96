"""Sub-layer pruning: the attention and MLP sub-blocks of decoder layers removed one at a time
(BlockPruner, Zhong et al. 2024; "A deeper look at depth pruning of LLMs", Siddiqui et al. 2024),
reported in removed parameters, not only in layers.

A unit is (layer, kind), kind "attn" or "mlp". Removing a unit makes that residual branch
contribute nothing and lets the residual stream pass it unchanged (`removed_sublayers`, forward
hooks on the loaded model, undone on exit):

  Pre-LN blocks (Llama, Mistral, Qwen2/3, OLMo, GPT-2, OPT >= 1.3B, sequential GPT-NeoX, depthlab
  pre_ln / lns / scaled_init and the Pre-LN layers of mix_ln): h + f(norm(h)) becomes h. The
  branch module the adapter names (depthlab.models.architectures: `attention[l]`, `mlp[l]`)
  returns zeros; its pre-norm still runs but reaches nothing.
  Parallel blocks (GPT-NeoX use_parallel_residual): h + a(ln1 h) + m(ln2 h) loses that term.
  Branch post-norms (OLMo-2, Gemma-3's sandwich norms, depthlab peri_ln): the adapter's branch
  module is the post-norm, whose output is what is added: it returns zeros.
  Post-LN blocks (OPT-350m-style do_layer_norm_before=False, depthlab post_ln, deepnorm and the
  first layers of mix_ln): x -> N(s x + f(x)) (s = 1; DeepNorm s = alpha) becomes x -> x: the
  branch returns zeros and the norm that follows it returns its input divided by s. Keeping the
  norm instead (N(s x)) would leave a removed unit changing the stream.

So removing both units of layer l is removing layer l (`pruned_view` of layer_removal) in every
supported family: exactly for Pre-LN, parallel and post-norm blocks (h + 0 + 0), up to rounding
for Post-LN (N's input s x divided by s; DeepNorm's alpha is not a power of two). The unit's
parameters (`unit_params`) are the layer's submodules that serve only that branch: the
projections and the branch's own norms (pre-norm, and Gemma-3/OLMo-2/Peri-LN post-norm; a Post-LN
block's norm after the branch). A depthlab model's units are its norm scheme's, declared in the
scheme registry (depthlab.core.norm_schemes.sublayer_units), so every scheme is prunable by
sub-layer; the hub families' are the module names below. Every parameter of a layer belongs to
exactly one of its two units (`layer_params(l)` = attn + mlp), so a layer-level removal and a
sub-layer removal compare at equal removed parameters.

Search (`sublayer_path`), following BlockPruner's block_search.py: n times, every unit not yet
removed is tried on top of the current set and the one whose removal gives the lowest loss on the
given windows is removed (BlockPruner ranks by the perplexity after removal, exp of the same mean
loss, so the order is the same). Differences: the loss is the mean next-token loss on
calibration windows of the train split (the prune stage's `pruning.calibration`, every position
scored, as the block criteria and SLEB rank; BlockPruner: Alpaca samples), and each step's set is
then scored on the validation windows like every other strategy, so the chosen path is never
scored on the data that chose it (without calibration windows the search ranks on the validation
windows themselves); ties go to the smallest (layer,
kind), "attn" before "mlp" (BlockPruner keeps the first candidate in its order, every MHA block
before every MLP block); BlockPruner's block removal is written for Llama only, here for every
family above, Post-LN included. Step k scores 2L - k + 1 candidates; one pass per batch with the
current set stores every layer's input, and a candidate of layer l reruns layers l..L-1 only
(`candidate_losses`; LossSweep shares prefixes the same way for layer sets), so a step runs
about L full passes' worth of layers (not 2L) and 2L - k + 1 heads.

Exports: a sub-layer removal set keeps every layer with one branch gone, which a mergekit
passthrough (whole-layer slices) cannot express and HF configs cannot describe; sub-layer sets
are measured only, never exported.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from depthlab.core import norm_schemes
from depthlab.core.errors import PruningError, UnsupportedModelError
from depthlab.models.architectures import ModelAdapter, adapt, first_output, with_first_output
from depthlab.plan.engine_budgets import LOSS_CHUNK_ELEMENTS
from depthlab.stages.pruning.layer_removal import (
    head_losses,
    model_loss,
    scored_positions,
)

KINDS = ("attn", "mlp")
Unit = tuple[int, str]

# Direct children of a decoder layer serving one branch only (their parameters are the unit's),
# in the hub families; a depthlab model's come from its scheme (norm_schemes.sublayer_units).
ATTENTION_PARTS = frozenset(
    {"self_attn", "attn", "attention", "input_layernorm", "ln_1", "self_attn_layer_norm"}
)
MLP_PARTS = frozenset(
    {
        "mlp",
        "fc1",
        "fc2",
        "ln_2",
        "final_layer_norm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    }
)
# Post-LN layers of OPT: the norm that follows each branch (a depthlab Post-LN layer's is its
# scheme's unit norm).
OPT_POST_LN_NORMS = {"attn": "self_attn_layer_norm", "mlp": "final_layer_norm"}
DEPTHLAB_MODEL_TYPE = "depthlab_llama"
PRUNABLE_FAMILIES = ("llama", "olmo2", "gpt_neox", "gpt2", "opt")


def _check_family(adapter: ModelAdapter) -> None:
    if adapter.family not in PRUNABLE_FAMILIES:
        raise UnsupportedModelError(
            f"{type(adapter.model).__name__} ({adapter.family} layout): sub-layer removal "
            f"supports the families {', '.join(PRUNABLE_FAMILIES)}"
        )


def _scheme_units(adapter: ModelAdapter) -> dict[str, dict] | None:
    """The sub-layer units of a depthlab model's norm scheme (depthlab.core.norm_schemes), None
    for any other model."""
    config = adapter.model.config
    if getattr(config, "model_type", None) != DEPTHLAB_MODEL_TYPE:
        return None
    try:
        return norm_schemes.sublayer_units(config.norm_scheme)
    except ValueError as error:
        raise UnsupportedModelError(f"sub-layer removal: {error}") from None


def _post_norm(adapter: ModelAdapter, kind: str) -> str:
    """The norm that follows branch `kind` in a Post-LN layer."""
    units = _scheme_units(adapter)
    if units is None:
        return OPT_POST_LN_NORMS[kind]
    norms = units[kind]["norms"]
    if len(norms) != 1:  # the removal passes the stream through the one norm after the branch
        raise UnsupportedModelError(
            f"sub-layer removal: a Post-LN {kind} unit needs exactly one norm (the one after "
            f"its branch); norm_schemes.SUBLAYER_UNITS declares {list(norms)}"
        )
    return norms[0]


def normalise_units(units: Iterable[Unit], num_layers: int) -> tuple[Unit, ...]:
    """Sorted unique (layer, kind) units, every layer in 0..L-1 and kind attn or mlp."""
    result = set()
    for unit in units:
        layer, kind = unit
        if kind not in KINDS or not isinstance(layer, int) or not 0 <= layer < num_layers:
            raise PruningError(
                f"sub-layer unit {unit!r}: expected (layer in 0..{num_layers - 1}, kind in {KINDS})"
            )
        result.add((int(layer), kind))
    return tuple(sorted(result))


def units_label(units: Iterable[Unit]) -> str:
    """Units as text for tables: "3.attn-5.mlp" ("" for none), in (layer, kind) order."""
    return "-".join(f"{layer}.{kind}" for layer, kind in sorted(units))


def _zero_output(module, args, output):
    return with_first_output(output, torch.zeros_like(first_output(output)))


def _pass_norm(scale: float):
    """A post-norm hook returning the norm's input divided by the residual factor s: with the
    branch zeroed its input is s x, so the layer passes x."""

    def hook(module, args, kwargs, output):
        hidden = args[0] if args else next(iter(kwargs.values()))
        return with_first_output(output, hidden / scale if scale != 1.0 else hidden)

    return hook


@contextlib.contextmanager
def removed_sublayers(model: nn.Module, units: Iterable[Unit]):
    """Within the block, `model` runs with the units removed (see the module docstring): forward
    hooks, removed on exit. Yields the model."""
    adapter = adapt(model)
    _check_family(adapter)
    units = normalise_units(units, adapter.num_layers)
    handles = []
    try:
        for layer, kind in units:
            branch = (adapter.attention if kind == "attn" else adapter.mlp)[layer]
            handles.append(branch.register_forward_hook(_zero_output))
            if adapter.post_ln_layers[layer]:
                block = adapter.layers[layer]
                norm = getattr(block, _post_norm(adapter, kind))
                scale = float(getattr(block, "residual_scale", 1.0))
                handles.append(norm.register_forward_hook(_pass_norm(scale), with_kwargs=True))
        yield model
    finally:
        for handle in handles:
            handle.remove()


# --------------------------------------------------------------------------- parameters


def _part_kind(adapter: ModelAdapter, name: str) -> str | None:
    units = _scheme_units(adapter)
    if units is not None:
        for kind, unit in units.items():
            if name == unit["branch"] or name in unit["norms"]:
                return kind
        return None
    if name == "post_attention_layernorm":
        # the attention's post-norm in OLMo-2 / Gemma-3; elsewhere the MLP's pre-norm
        return "attn" if adapter.family == "olmo2" else "mlp"
    if name in ATTENTION_PARTS:
        return "attn"
    if name in MLP_PARTS:
        return "mlp"
    return None


def _count(parameters: Iterable[nn.Parameter]) -> int:
    return sum(p.numel() for p in {id(p): p for p in parameters}.values())


def unit_params(model: nn.Module, layer: int, kind: str) -> int:
    """Parameters of one unit: the layer's submodules that serve only that branch (projections,
    the branch's norms). UnsupportedModelError when a submodule with parameters is in neither
    unit."""
    adapter = adapt(model)
    _check_family(adapter)
    ((layer, kind),) = normalise_units([(layer, kind)], adapter.num_layers)
    block = adapter.layers[layer]
    own = list(block.named_parameters(recurse=False))
    if own:
        raise UnsupportedModelError(
            f"layer {layer} holds parameters of its own ({own[0][0]}): in neither unit"
        )
    chosen = []
    for name, child in block.named_children():
        parameters = list(child.parameters())
        part = _part_kind(adapter, name)
        if parameters and part is None:
            raise UnsupportedModelError(
                f"{type(block).__name__}.{name}: parameters in neither the attention nor the "
                f"MLP unit"
            )
        if part == kind:
            chosen.extend(parameters)
    return _count(chosen)


def layer_params(model: nn.Module, layer: int) -> int:
    """Parameters of decoder layer `layer` (what removing the whole layer removes)."""
    adapter = adapt(model)
    if not 0 <= layer < adapter.num_layers:
        raise PruningError(f"layer {layer} is outside 0..{adapter.num_layers - 1}")
    return _count(adapter.layers[layer].parameters())


def decoder_params(model: nn.Module) -> int:
    """Parameters of every decoder layer (embeddings, final norm and head excluded)."""
    return _count(p for block in adapt(model).layers for p in block.parameters())


def units_params(model: nn.Module, units: Iterable[Unit]) -> int:
    return sum(unit_params(model, layer, kind) for layer, kind in units)


# --------------------------------------------------------------------------- search


def units_loss(
    model: nn.Module,
    units: Iterable[Unit],
    windows: Sequence[torch.Tensor],
    loss_tokens: int | None = None,
    chunk_elements: int = LOSS_CHUNK_ELEMENTS,
) -> float:
    """Validation loss (layer_removal.model_loss) of the model with the units removed."""
    with removed_sublayers(model, units):
        return model_loss(model, windows, chunk_elements, loss_tokens)


def _layer_inputs(adapter: ModelAdapter, inputs: torch.Tensor) -> tuple[list, list]:
    """(input of every layer, (extra args, kwargs) every layer was called with) of one pass of
    the backbone (the current units removed by the caller's hooks)."""
    states, calls = [None] * adapter.num_layers, [None] * adapter.num_layers
    handles = []
    for index, layer in enumerate(adapter.layers):

        def pre(module, args, kwargs, index=index):
            kwargs = dict(kwargs)
            states[index] = args[0] if args else kwargs.pop("hidden_states")
            calls[index] = (tuple(args[1:]), kwargs)

        handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
    try:
        adapter.backbone(input_ids=inputs, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return states, calls


@torch.inference_mode()
def candidate_losses(
    model: nn.Module,
    removed: Sequence[Unit],
    candidates: Sequence[Unit],
    windows: Sequence[torch.Tensor],
    loss_tokens: int | None = None,
    chunk_elements: int = LOSS_CHUNK_ELEMENTS,
) -> dict[Unit, float]:
    """{unit: units_loss(removed + unit)} for every candidate, with the prefix shared: one pass
    per batch with `removed` stores every layer's input and call arguments; a candidate of
    layer l reruns layers l..L-1 from there (layers below l compute the same with or without
    it), then the head. Equal to units_loss per candidate, about half the layer calls."""
    adapter = adapt(model)
    totals = dict.fromkeys(candidates, 0.0)
    count = 0
    for window in windows:
        window = window.to(adapter.input_device)
        targets = window[:, 1:]
        with removed_sublayers(model, removed):
            states, calls = _layer_inputs(adapter, window[:, :-1])
        count += targets.shape[0] * scored_positions(targets.shape[-1], loss_tokens)
        for unit in candidates:
            hidden = states[unit[0]]
            with removed_sublayers(model, (*removed, unit)):
                for index in range(unit[0], adapter.num_layers):
                    args, kwargs = calls[index]
                    hidden = first_output(adapter.layers[index](hidden, *args, **kwargs))
            totals[unit] += head_losses(adapter, hidden, targets, chunk_elements, loss_tokens)[0]
    return {unit: total / count for unit, total in totals.items()}


def max_units(num_layers: int) -> int:
    """The most units a search may remove: every unit but one (2L - 1)."""
    return 2 * num_layers - 1


def sublayer_path(
    model: nn.Module,
    windows: Sequence[torch.Tensor],
    steps: int,
    loss_tokens: int | None = None,
    log=None,
    loss_of=None,
    score_windows: Sequence[torch.Tensor] | None = None,
) -> list[dict]:
    """Iterative sub-layer removal: `steps` times remove, on top of the current set, the unit
    whose removal gives the lowest loss on `windows` (ties: the smallest (layer, kind)). One
    record per step: step, layer, kind, removed (sorted units), loss (on `windows`), val_loss,
    removed_params (cumulative), removed_fraction (of decoder_params), seconds (the step's wall
    time), candidates ({unit: loss}). The candidates of a step share their prefix
    (candidate_losses); `loss_of(units) -> loss` scores each set by itself instead (tests).

    `score_windows`: held-out windows on which each step's set is scored (val_loss, with
    `loss_tokens`) when the search ranks on others (calibration windows of the train split, all
    positions scored, as the block criteria rank); None: the search's own windows are the
    validation windows and val_loss is the search's loss."""
    adapter = adapt(model)
    _check_family(adapter)
    num_layers = adapter.num_layers
    if not isinstance(steps, int) or not 1 <= steps <= max_units(num_layers):
        raise PruningError(
            f"sub-layer steps {steps!r}: outside 1..{max_units(num_layers)} (2L - 1 units)"
        )
    sizes = {
        (layer, kind): unit_params(model, layer, kind)
        for layer in range(num_layers)
        for kind in KINDS
    }
    total = decoder_params(model)
    removed: tuple[Unit, ...] = ()
    path = []
    for step in range(1, steps + 1):
        started = time.perf_counter()
        candidates = [unit for unit in sorted(sizes) if unit not in removed]
        if loss_of is None:
            search_tokens = None if score_windows is not None else loss_tokens
            losses = candidate_losses(model, removed, candidates, windows, search_tokens)
        else:
            losses = {unit: float(loss_of(tuple(sorted(removed + (unit,))))) for unit in candidates}
        best = min(candidates, key=lambda unit: (losses[unit], unit))
        removed = tuple(sorted(removed + (best,)))
        params = sum(sizes[unit] for unit in removed)
        val_loss = (
            losses[best]
            if score_windows is None
            else units_loss(model, removed, score_windows, loss_tokens)
        )
        path.append(
            {
                "step": step,
                "layer": best[0],
                "kind": best[1],
                "removed": removed,
                "loss": losses[best],
                "val_loss": val_loss,
                "removed_params": params,
                "removed_fraction": params / total,
                "seconds": time.perf_counter() - started,
                "candidates": losses,
            }
        )
        if log:
            log(
                f"sub-layer step {step}: drop {best[0]}.{best[1]} -> search loss "
                f"{losses[best]:.4f}, val loss {val_loss:.4f}, "
                f"{params} parameters ({params / total:.1%} of the decoder)"
            )
    return path


def sublayer_table(path: list[dict]):
    """sublayer_path.csv: step, layer, kind, removed, search_loss (the loss the step ranked
    by), val_loss, removed_params, removed_fraction, seconds."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "step": r["step"],
                "layer": r["layer"],
                "kind": r["kind"],
                "removed": units_label(r["removed"]),
                "search_loss": r["loss"],
                "val_loss": r["val_loss"],
                "removed_params": r["removed_params"],
                "removed_fraction": r["removed_fraction"],
                "seconds": round(r["seconds"], 3),
            }
            for r in path
        ],
        columns=[
            "step",
            "layer",
            "kind",
            "removed",
            "search_loss",
            "val_loss",
            "removed_params",
            "removed_fraction",
            "seconds",
        ],
    )
