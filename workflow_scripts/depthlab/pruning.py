"""Removing decoder layers: an in-memory view, an exported HF folder, strategies, loss sweeps.

Removing a set D of layers from a model of L layers keeps the layers l not in D in their order;
the kept layer that was number l computes exactly what it computed in the full model (its
weights, its LNS scale, its attention type), only its input changes: the pruned model equals the
full model run with the layers of D replaced by the identity. For every family the adapter
supports (depthlab.adapter) removal

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

Strategies for removing n layers (Gromov et al. 2024, "The Unreasonable Ineffectiveness of the
Deeper Layers"):

  angular  the block [l*, l*+n) with l* = argmin_l d(x^l, x^{l+n}), d from the analysis stage's
           (L+1) x (L+1) matrix `angular_distance_last.csv` (ties: the smallest l)
  deepest  the n deepest layers except the last: [L-1-n, L-1) (the paper's baseline)
  greedy   non-contiguous: n times, remove the layer whose removal raises the validation loss
           least (ties: the smallest index)

`LossSweep` evaluates the validation loss of many removal sets with the work shared: one full
pass per batch stores the full model's states h_0..h_L and the arguments every layer was called
with; a removal set is then a path in the trie of keep/drop decisions over layers 0..L-1, walked
depth first, so a layer runs once per distinct prefix of decisions, and every set branches from
the cached state of the deepest layer before its first removal.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .adapter import ModelAdapter, adapt
from .errors import PruningError, UnsupportedModelError

STRATEGIES = ("angular", "deepest", "greedy")


# Config lists with one entry per layer (sliced on removal) and config ints that count the
# first layers with some property (recounted over the kept layers).
PER_LAYER_LISTS = ("layer_types", "no_rope_layers", "sliding_window_pattern_list")
LEADING_COUNTS = ("max_window_layers", "mix_ln_post_layers")
# Config lists of layer *indices* (remapped to the kept layers' new indices).
LAYER_INDEX_LISTS = ("mlp_only_layers",)


# --------------------------------------------------------------------------- validation


def normalise_removal(removed: Iterable[int], num_layers: int) -> tuple[int, ...]:
    """Sorted, unique layer indices; every index in 0..L-1 and at least one layer kept."""
    removed = tuple(sorted({int(l) for l in removed}))
    bad = [l for l in removed if not 0 <= l < num_layers]
    if bad:
        raise PruningError(f"layers {bad} are outside 0..{num_layers - 1}")
    if len(removed) >= num_layers:
        raise PruningError(f"removing {len(removed)} of {num_layers} layers leaves none")
    return removed


def _check_grid(values, num_layers: int, key: str) -> None:
    if values is None:
        return
    if not isinstance(values, (list, tuple)) or not values:
        raise PruningError(f"{key}: a non-empty list of block sizes, or null for 1..L-1")
    for n in values:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise PruningError(f"{key}: block size {n!r} must be an integer >= 1")
        if n >= num_layers:
            raise PruningError(f"{key}: block size {n} >= the model's {num_layers} layers "
                             f"(at most {num_layers - 1} can be removed)")


def _positive_ints(section: dict, keys: Sequence[str], where: str) -> None:
    for key in keys:
        value = section.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PruningError(f"{where}.{key}: must be an integer >= 1 (got {value!r})")


def validate_pruning_settings(settings: dict, num_layers: int, where: str = "pruning") -> None:
    """Config-time check of a pruning section (the settings part of a prune_model spec) against
    a model of `num_layers` layers; raises ValueError naming the key. Checks the strategies, every
    block-size grid (1 <= n < L), validation windows, lm-eval, healing, auto-depth, export and
    speed keys."""
    if num_layers < 2:
        raise PruningError(f"{where}: a model of {num_layers} layer(s) has no layer to remove")
    strategies = settings.get("strategies")
    if not strategies:
        raise PruningError(f"{where}.strategies: name at least one ({', '.join(STRATEGIES)})")
    for strategy in strategies:
        if strategy not in STRATEGIES:
            raise PruningError(f"{where}.strategies: unknown strategy '{strategy}' "
                             f"(known: {', '.join(STRATEGIES)})")
    _check_grid(settings.get("n_grid"), num_layers, f"{where}.n_grid")
    _positive_ints(settings.get("val") or {}, ("windows", "seq_len", "batch_size"),
                   f"{where}.val")
    lm_eval = settings.get("lm_eval") or {}
    if lm_eval.get("enabled", True):
        _check_grid(lm_eval.get("n_grid"), num_layers, f"{where}.lm_eval.n_grid")
        _positive_ints(lm_eval, ("batch_size",), f"{where}.lm_eval")
        if lm_eval.get("metric", "acc") not in ("acc", "acc_norm", "score"):
            raise PruningError(f"{where}.lm_eval.metric: acc, acc_norm or score "
                             f"(got {lm_eval.get('metric')!r})")
    healing = settings.get("healing") or {}
    if healing.get("enabled", False):
        from .healing import validate_healing_settings

        for strategy in healing.get("strategies") or []:
            if strategy not in strategies:
                raise PruningError(f"{where}.healing.strategies: '{strategy}' is not one of "
                                 f"{where}.strategies ({', '.join(strategies)})")
        _check_grid(healing.get("n_grid"), num_layers, f"{where}.healing.n_grid")
        validate_healing_settings(healing, f"{where}.healing")
    auto = settings.get("auto_depth") or {}
    for metric, tolerance in (auto.get("tolerances") or {}).items():
        if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) \
                or tolerance < 0:
            raise PruningError(f"{where}.auto_depth.tolerances.{metric}: must be a number >= 0")
    for index, item in enumerate(settings.get("export") or []):
        if item.get("strategy") not in strategies:
            raise PruningError(f"{where}.export[{index}].strategy: '{item.get('strategy')}' is "
                             f"not one of {where}.strategies")
        if item.get("metric") not in (auto.get("tolerances") or {}):
            raise PruningError(f"{where}.export[{index}].metric: '{item.get('metric')}' has no "
                             f"tolerance in {where}.auto_depth.tolerances")
    speed = settings.get("speed") or {}
    if speed.get("enabled", False):
        if speed.get("strategy") not in strategies:
            raise PruningError(f"{where}.speed.strategy: '{speed.get('strategy')}' is not one of "
                             f"{where}.strategies")
        _check_grid(speed.get("n_grid"), num_layers, f"{where}.speed.n_grid")
        _positive_ints(speed, ("batch_size", "prompt_length", "new_tokens", "repeats"),
                       f"{where}.speed")


def check_prunable(model_config: dict | None = None, *, has_lm_head: bool | None = None,
                   name: str = "model", where: str = "pruning.models") -> None:
    """Config-time check that a model can be pruned and scored: it needs an LM head (a bare
    encoder such as the MiniLM contrast cannot be scored by validation loss or lm-eval)."""
    if has_lm_head is None and model_config is not None:
        architectures = model_config.get("architectures") or []
        has_lm_head = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures)
    if not has_lm_head:
        raise PruningError(f"{where}: model '{name}' has no LM head (a bare encoder); layer "
                         f"removal is scored by validation loss and lm-eval, which need one")


def grid(n_grid: Sequence[int] | None, num_layers: int, key: str = "pruning.n_grid") -> list[int]:
    """The configured block sizes (null: every n from 1 to L-1), checked against L."""
    if n_grid is None:
        return list(range(1, num_layers))
    values = sorted({int(n) for n in n_grid})
    for n in values:
        if not 1 <= n < num_layers:
            raise PruningError(f"{key}: block size {n} is outside 1..{num_layers - 1} for a "
                             f"model of {num_layers} layers")
    return values


# --------------------------------------------------------------------------- the view


def _layer_container(adapter: ModelAdapter) -> tuple[nn.Module, str]:
    """(parent module, attribute) of the ModuleList that holds the decoder layers."""
    first = adapter.layers[0]
    for parent in adapter.backbone.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.ModuleList) and len(child) == adapter.num_layers \
                    and child[0] is first:
                return parent, name
    raise UnsupportedModelError(f"{type(adapter.model).__name__}: decoder ModuleList not found")


def _layer_count(config) -> int:
    count = getattr(config, "num_hidden_layers", None)
    if count is None:
        raise UnsupportedModelError(f"{type(config).__name__} has no num_hidden_layers")
    return int(count)


def config_updates(config, kept: Sequence[int], num_layers: int) -> dict:
    """The config attributes that change when only `kept` (old indices) remain."""
    updates = {"num_hidden_layers": len(kept)}
    values = config.to_dict() if hasattr(config, "to_dict") else vars(config)
    for key, value in values.items():
        if key in LAYER_INDEX_LISTS and isinstance(value, (list, tuple)):
            updates[key] = [kept.index(i) for i in value if i in kept]
        elif isinstance(value, (list, tuple)) and len(value) == num_layers and (
                key in PER_LAYER_LISTS or "layer" in key):
            updates[key] = type(value)(value[i] for i in kept)
        elif key in LEADING_COUNTS and isinstance(value, int) and not isinstance(value, bool):
            updates[key] = sum(1 for i in kept if i < value)
    return updates


def _set_config(config, updates: dict) -> dict:
    """Apply updates, returning the previous values (strict configs validate on assignment,
    so the layer count goes last when it shrinks and first when it grows)."""
    previous = {key: getattr(config, key) for key in updates}
    order = sorted(updates, key=lambda k: (k == "num_hidden_layers") ==
                   (updates["num_hidden_layers"] < previous["num_hidden_layers"]))
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
    from .models import residual_scale

    alpha_new = residual_scale(model.config)
    state = dict(model.state_dict())
    for idx, layer in enumerate(model.model.layers):
        factor = alpha_new / layer.residual_scale
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            key = f"model.layers.{idx}.{name}"
            state[key] = state[key] * factor
    return state


def export_pruned(model: nn.Module, removed: Iterable[int], out_dir: str | Path,
                  tokenizer=None, metadata: dict | None = None) -> dict:
    """Write the model without `removed` as an ordinary HF folder (plus the tokenizer and
    `pruning.json` naming the removed layers); returns that record."""
    from .models import PLAIN_LLAMA_SCHEMES

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
    record = {"removed_layers": list(removed), "original_num_layers": num_layers,
              "num_layers": num_layers - len(removed), "exported_as": exported_as,
              **(metadata or {})}
    (out_dir / "pruning.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


# --------------------------------------------------------------------------- strategies


def read_distance_matrix(path: str | Path) -> np.ndarray:
    """The analysis stage's angular_distance_last.csv: columns layer,0..L; (L+1) x (L+1)."""
    import pandas as pd

    frame = pd.read_csv(path)
    if "layer" not in frame.columns:
        raise PruningError(f"{path}: no 'layer' column (not an angular_distance_last.csv)")
    matrix = frame.drop(columns="layer").to_numpy(dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 2:
        raise PruningError(f"{path}: expected a square (L+1) x (L+1) matrix, got {matrix.shape}")
    return matrix


def angular_block_choice(distance: np.ndarray, n: int) -> tuple[int, float]:
    """(l*, d): the block [l*, l*+n) minimising d(x^l, x^{l+n}) (the smallest l on ties)."""
    num_layers = distance.shape[0] - 1
    if not 1 <= n < num_layers:
        raise PruningError(f"block size {n} is outside 1..{num_layers - 1}")
    candidates = [distance[l, l + n] for l in range(num_layers - n + 1)]
    best = int(np.argmin(candidates))  # the first minimum
    return best, float(candidates[best])


def block_choice_table(distance: np.ndarray, n_values: Sequence[int]):
    """The paper's "optimal block" curve: one row (n, l*, d) per block size."""
    import pandas as pd

    rows = [(n, *angular_block_choice(distance, n)) for n in n_values]
    return pd.DataFrame(rows, columns=["n", "l_star", "distance"])


def angular_removal(distance: np.ndarray, n: int) -> tuple[int, ...]:
    start, _ = angular_block_choice(distance, n)
    return tuple(range(start, start + n))


def deepest_removal(num_layers: int, n: int) -> tuple[int, ...]:
    """The n deepest layers except the last one: [L-1-n, L-1)."""
    if not 1 <= n < num_layers:
        raise PruningError(f"block size {n} is outside 1..{num_layers - 1}")
    return tuple(range(num_layers - 1 - n, num_layers - 1))


def greedy_path(loss_of, num_layers: int, n_max: int, log=None) -> list[dict]:
    """Greedy non-contiguous removal: step k removes, from the set of step k-1, the layer whose
    removal gives the lowest loss (`loss_of(list of sets) -> list of losses`; ties: the smallest
    layer). Returns one record per step: n, removed set, loss, the candidates' losses."""
    removed: tuple[int, ...] = ()
    path = []
    for n in range(1, n_max + 1):
        candidates = [l for l in range(num_layers) if l not in removed]
        sets = [tuple(sorted(removed + (l,))) for l in candidates]
        losses = loss_of(sets)
        best = min(range(len(candidates)), key=lambda i: (losses[i], candidates[i]))
        removed = sets[best]
        path.append({"n": n, "removed": removed, "layer": candidates[best],
                     "loss": float(losses[best]),
                     "candidates": {c: float(v) for c, v in zip(candidates, losses)}})
        if log:
            log(f"greedy n={n}: drop layer {candidates[best]} -> {removed}, "
                f"loss {losses[best]:.4f}")
    return path


def auto_depth(table, metric: str, tolerance: float, higher_is_better: bool,
               baseline: float | None = None) -> dict:
    """The largest n whose drop stays within `tolerance` (absolute), i.e. every evaluated n' <= n
    has drop(n') <= tolerance, where drop = baseline - value when higher is better, else
    value - baseline. `table` has columns n and `metric`; the baseline is the row with n = 0
    unless given. Returns {n, value, baseline, drop, tolerance}; n = 0 when even the smallest
    n exceeds the tolerance."""
    rows = table.dropna(subset=[metric]).sort_values("n")
    if baseline is None:
        base = rows[rows["n"] == 0]
        if base.empty:
            raise PruningError(f"auto depth of {metric}: no unpruned (n = 0) row for the baseline")
        baseline = float(base[metric].iloc[0])
    chosen = {"n": 0, "value": baseline, "drop": 0.0}
    for n, value in zip(rows["n"], rows[metric]):
        if n == 0:
            continue
        drop = (baseline - value) if higher_is_better else (value - baseline)
        if drop > tolerance + 1e-12:  # inclusive, and not flipped by float rounding
            break
        chosen = {"n": int(n), "value": float(value), "drop": float(drop)}
    return {**chosen, "baseline": baseline, "tolerance": tolerance, "metric": metric,
            "higher_is_better": higher_is_better}


# --------------------------------------------------------------------------- losses


def validation_windows(tokens: np.ndarray, windows: int, seq_len: int,
                       batch_size: int) -> list[torch.Tensor]:
    """`windows` evenly spaced (seq_len + 1)-token windows of a flat token array, in batches
    (the pretraining stage's validation windows, depthlab.training.validation_batches)."""
    width = seq_len + 1
    if len(tokens) < width:
        raise PruningError(f"val split has {len(tokens)} tokens, fewer than seq_len + 1 = {width}")
    starts = np.linspace(0, len(tokens) - width, windows).astype(np.int64)
    stacked = np.stack([np.asarray(tokens[s:s + width]) for s in starts]).astype(np.int64)
    return list(torch.from_numpy(stacked).split(batch_size))


def token_loss_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy (float32 logits)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction="sum")


def _first(value):
    return value[0] if isinstance(value, (tuple, list)) else value


@dataclass
class _BatchCache:
    targets: torch.Tensor
    calls: list          # per layer: (extra positional args, kwargs) it was called with
    start: torch.Tensor  # h_0, the input of layer 0


class LossSweep:
    """Validation loss of many removal sets with shared work (see the module docstring).

    `windows`: batches of (B, T+1) token windows (inputs [:, :-1], targets [:, 1:]). Losses are
    the mean next-token cross-entropy over every target token, identical (same kernels, same
    order of operations) to running the pruned model itself.

    States are cached by trie node, i.e. by (batch, layer p, the removed layers below p): the
    full model's states h_0..h_L always, every other computed state while the cache holds at
    most `cache_mib` MiB (least recently used evicted first). A later call (a greedy step)
    starts from the states an earlier call left."""

    def __init__(self, model: nn.Module, windows: Sequence[torch.Tensor],
                 cache_mib: float = 512.0):
        self.model = model
        self.adapter = adapt(model)
        if not self.adapter.has_lm_head:
            raise UnsupportedModelError(f"{type(model).__name__} has no LM head: no loss")
        self.num_layers = self.adapter.num_layers
        self.device = next(model.parameters()).device
        self.memo: dict[tuple, float] = {}
        self.layer_calls = 0
        self.tokens = 0
        self.cache_bytes = int(cache_mib * 2**20)
        self._states: OrderedDict = OrderedDict()   # (batch, layer, removed below) -> state
        self._pinned: dict = {}                     # the full model's states
        self._bytes = 0
        self._batches = [self._prepare(index, w.to(self.device))
                         for index, w in enumerate(windows)]

    @torch.inference_mode()
    def _prepare(self, index: int, window: torch.Tensor) -> _BatchCache:
        inputs, targets = window[:, :-1], window[:, 1:]
        calls, states = [None] * self.num_layers, [None] * (self.num_layers + 1)
        handles = []
        for layer_index, layer in enumerate(self.adapter.layers):
            def pre(module, args, kwargs, layer_index=layer_index):
                kwargs = dict(kwargs)
                states[layer_index] = args[0] if args else kwargs.pop("hidden_states")
                calls[layer_index] = (tuple(args[1:]), kwargs)

            handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(self.adapter.layers[-1].register_forward_hook(
            lambda module, args, output: states.__setitem__(self.num_layers, _first(output))))
        try:
            self.adapter.backbone(input_ids=inputs, use_cache=False)
        finally:
            for handle in handles:
                handle.remove()
        self.tokens += targets.numel()
        self.layer_calls += self.num_layers  # the full pass
        for layer, state in enumerate(states):
            self._pinned[(index, layer, ())] = state
        return _BatchCache(targets=targets, calls=calls, start=states[0])

    def _state(self, batch_index: int, layer: int, below: tuple, previous: torch.Tensor):
        """The input of `layer` when the layers `below` are removed (previous: the input of
        layer - 1 under the same removals, which runs layer - 1 when not cached)."""
        key = (batch_index, layer, below)
        state = self._pinned.get(key)
        if state is not None:
            return state
        state = self._states.get(key)
        if state is not None:
            self._states.move_to_end(key)
            return state
        args, kwargs = self._batches[batch_index].calls[layer - 1]
        self.layer_calls += 1
        state = _first(self.adapter.layers[layer - 1](previous, *args, **kwargs))
        size = state.numel() * state.element_size()
        if size <= self.cache_bytes:
            self._states[key] = state
            self._bytes += size
            while self._bytes > self.cache_bytes:
                _, evicted = self._states.popitem(last=False)
                self._bytes -= evicted.numel() * evicted.element_size()
        return state

    @torch.inference_mode()
    def losses(self, removal_sets: Sequence[Sequence[int]]) -> list[float]:
        """Mean validation loss of each removal set (memoised by set)."""
        keys = [normalise_removal(s, self.num_layers) for s in removal_sets]
        todo = sorted({k for k in keys if k not in self.memo})
        if todo:
            sums = dict.fromkeys(todo, 0.0)
            for index, batch in enumerate(self._batches):
                self._walk(index, 0, batch.start, (), [set(k) for k in todo], todo, sums)
            for key in todo:
                self.memo[key] = sums[key] / self.tokens
        return [self.memo[k] for k in keys]

    def _walk(self, index, layer, hidden, below, removed_sets, keys, sums):
        """Depth-first over the decisions for layers layer..L-1 shared by `keys`; `hidden` is
        the input of `layer` with the layers `below` removed."""
        if layer == self.num_layers:
            logits = self.adapter.logits(hidden)
            total = float(token_loss_sum(logits, self._batches[index].targets))
            for key in keys:
                sums[key] += total
            return
        keep = [i for i, s in enumerate(removed_sets) if layer not in s]
        drop = [i for i, s in enumerate(removed_sets) if layer in s]
        if keep:
            following = self._state(index, layer + 1, below, hidden)
            self._walk(index, layer + 1, following, below, [removed_sets[i] for i in keep],
                       [keys[i] for i in keep], sums)
        if drop:
            self._walk(index, layer + 1, hidden, below + (layer,),
                       [removed_sets[i] for i in drop], [keys[i] for i in drop], sums)


def rebuild_loss(model: nn.Module, removed: Sequence[int], windows: Sequence[torch.Tensor]
                 ) -> float:
    """Reference without reuse: copy the pruned model, run it on every window (the benchmark's
    baseline and the sweep's test oracle)."""
    pruned = prune_copy(model, removed)
    device = next(pruned.parameters()).device
    total, count = 0.0, 0
    with torch.inference_mode():
        for window in windows:
            window = window.to(device)
            logits = pruned(input_ids=window[:, :-1], use_cache=False).logits
            total += float(token_loss_sum(logits, window[:, 1:]))
            count += window[:, 1:].numel()
    return total / count


def perplexity(loss: float) -> float:
    return float(math.exp(loss)) if loss < 700 else float("inf")


# --------------------------------------------------------------------------- the stage

SWEEP_COLUMNS = ["model", "strategy", "n", "fraction", "removed", "healed", "val_loss",
                 "val_ppl", "delta_loss", "task", "acc", "acc_stderr", "acc_norm",
                 "acc_norm_stderr", "score", "score_stderr", "score_metric", "samples"]


def removed_label(removed: Sequence[int]) -> str:
    """Removed layers as text for tables: "3-4-5" ("" for none)."""
    return "-".join(str(l) for l in removed)


def parse_removed(label) -> tuple[int, ...]:
    if label is None or (isinstance(label, float) and math.isnan(label)) or label == "":
        return ()
    return tuple(int(x) for x in str(label).split("-"))


def _task_rows(base: dict, task_rows: list[dict] | None) -> list[dict]:
    if not task_rows:
        return [{**base, "task": "", "acc": np.nan, "acc_stderr": np.nan, "acc_norm": np.nan,
                 "acc_norm_stderr": np.nan, "score": np.nan, "score_stderr": np.nan,
                 "score_metric": "", "samples": 0}]
    return [{**base, **row} for row in task_rows]


def auto_depth_choices(sweep, tolerances: dict, metric_name: str = "acc") -> list[dict]:
    """Auto depth for every (strategy, healed, metric): metric `val_loss` (an increase is the
    drop), `mean_acc` (the mean over tasks of `metric_name`) or a task name (its
    `metric_name`). Healed curves are measured against the unhealed full model (n = 0)."""
    import pandas as pd

    choices = []
    per_variant = sweep.groupby(["strategy", "n", "healed"], as_index=False).agg(
        val_loss=("val_loss", "first"))
    tasks = sorted(t for t in sweep["task"].dropna().unique() if t)
    scored = sweep[sweep["task"].isin(tasks)]
    if tasks:
        mean = scored.groupby(["strategy", "n", "healed"], as_index=False)[metric_name].mean()
        per_variant = per_variant.merge(mean.rename(columns={metric_name: "mean_acc"}),
                                        how="left")
        for task in tasks:
            one = scored[scored["task"] == task][["strategy", "n", "healed", metric_name]]
            per_variant = per_variant.merge(one.rename(columns={metric_name: task}), how="left")
    for strategy in sorted(per_variant["strategy"].unique()):
        rows = per_variant[per_variant["strategy"] == strategy]
        base = rows[(rows["n"] == 0) & (~rows["healed"])]
        for healed in sorted(rows["healed"].unique()):
            table = rows[rows["healed"] == healed]
            for metric, tolerance in tolerances.items():
                if metric not in table.columns or base.empty or pd.isna(base[metric].iloc[0]):
                    continue
                baseline = float(base[metric].iloc[0])
                choice = auto_depth(table[["n", metric]], metric, float(tolerance),
                                    higher_is_better=metric != "val_loss", baseline=baseline)
                choices.append({"strategy": strategy, "healed": bool(healed), **choice})
    return choices


def healing_events_folder(out: str | Path):
    """Where healing writes its TensorBoard curves while the job runs: a temporary folder beside
    the job's output (removed when the job fails), copied to `<out>/tensorboard/` with the rest
    of the output (one subfolder per healed variant, `<strategy>_n<n>`)."""
    import tempfile

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=f".{out.name}.tensorboard-", dir=out.parent)


def run_stage(spec: dict, device: str = "cpu", log=print) -> dict:
    """The prune_model job: every table of the spec's model into spec["out"] (see
    workflow_scripts/prune_model.py for the keys and outputs). Returns a summary."""
    import shutil
    import time

    import pandas as pd

    from . import data as data_lib
    from .adapter import load_model, load_tokenizer
    from .io import atomic_path, write_dataframe, write_json
    from .provenance import Provenance

    started = time.perf_counter()
    seconds: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name):
        now = time.perf_counter()
        seconds[name] = round(seconds.get(name, 0.0) + now - clock[0], 3)
        clock[0] = now

    name = spec["model_name"]
    distance_path = Path(spec["analysis"]) / "angular_distance_last.csv"
    if not distance_path.is_file():
        raise PruningError(f"analysis: {distance_path} does not exist (run the analysis stage "
                           f"on this model first)")
    lm_settings = spec.get("lm_eval") or {}
    if lm_settings.get("enabled", True) and spec.get("tasks") is not None:
        from .lm_tasks import check_task_folder

        check_task_folder(spec["tasks"], lm_settings.get("tasks"), "pruning.tasks")
    provenance = Provenance("pruning", config=spec, seed=spec["seed"],
                            inputs=[p for p in (spec["model"], distance_path, spec["data"],
                                                spec.get("tasks")) if p is not None])
    model = load_model(spec["model"], dtype=spec.get("dtype", "float32"), device=device,
                       revision=spec.get("revision"))
    tokenizer = load_tokenizer(spec["model"], revision=spec.get("revision"))
    adapter = adapt(model)
    check_prunable(has_lm_head=adapter.has_lm_head, name=name, where="pruning.models")
    L = adapter.num_layers
    validate_pruning_settings(spec, L)
    distance = read_distance_matrix(distance_path)
    if distance.shape[0] != L + 1:
        raise PruningError(f"{distance_path}: a {distance.shape[0]}x{distance.shape[0]} matrix "
                         f"for a model of {L} layers (expected {L + 1}x{L + 1})")
    n_values = grid(spec.get("n_grid"), L)
    val = spec["val"]
    windows = validation_windows(data_lib.load_tokens(spec["data"], "val"), val["windows"],
                                 val["seq_len"], val["batch_size"])
    sweep = LossSweep(model, windows)
    lap("load")

    # removal sets per strategy and n; greedy grows one layer at a time up to the largest n
    plans: dict[tuple[str, int], tuple[int, ...]] = {}
    for strategy in spec["strategies"]:
        for n in n_values:
            if strategy == "angular":
                plans[("angular", n)] = angular_removal(distance, n)
            elif strategy == "deepest":
                plans[("deepest", n)] = deepest_removal(L, n)
    greedy_records = []
    if "greedy" in spec["strategies"]:
        greedy_records = greedy_path(sweep.losses, L, max(n_values),
                                     log=lambda m: log(f"[{name}] {m}"))
        for record in greedy_records:
            if record["n"] in n_values:
                plans[("greedy", record["n"])] = record["removed"]
    singles = [(l,) for l in range(L)]
    losses = dict(zip([()] + singles + list(plans.values()),
                      sweep.losses([()] + singles + list(plans.values()))))
    base_loss = losses[()]
    lap("loss_sweep")
    log(f"[{name}] {L} layers, full-model val loss {base_loss:.4f}; {len(sweep.memo)} removal "
        f"sets, {sweep.layer_calls} layer calls over {len(windows)} batches")

    evaluator = None
    task_results: dict[tuple, list[dict]] = {}
    if lm_settings.get("enabled", True):
        from .lm_tasks import TaskEvaluator

        evaluator = TaskEvaluator(model, tokenizer, spec["tasks"], lm_settings.get("tasks"),
                                  batch_size=lm_settings["batch_size"],
                                  datasets_cache=spec["datasets_cache"],
                                  bootstrap_iters=lm_settings.get("bootstrap_iters", 1000),
                                  seed=spec["seed"],
                                  harness_tasks=lm_settings.get("harness_tasks"))
        task_n = set(grid(lm_settings.get("n_grid"), L, "pruning.lm_eval.n_grid")) \
            if lm_settings.get("n_grid") is not None else set(n_values)
        wanted = [()] + [r for (s, n), r in plans.items() if n in task_n]
        if lm_settings.get("single_layer", True):
            wanted += singles
        for removed in wanted:
            if removed not in task_results:
                task_results[removed] = evaluator.evaluate(removed)
        base_tasks = task_results[()]
        log(f"[{name}] lm-eval on {len(task_results)} variants: full model " + ", ".join(
            f"{r['task']} acc {r['acc']:.3f} ± {r['acc_stderr']:.3f}" for r in base_tasks))
    lap("lm_eval")

    rows = []
    for strategy in spec["strategies"]:
        for n, removed in [(0, ())] + [(n, plans[(strategy, n)]) for n in n_values
                                        if (strategy, n) in plans]:
            base = {"model": name, "strategy": strategy, "n": n, "fraction": n / L,
                    "removed": removed_label(removed), "healed": False,
                    "val_loss": losses[removed], "val_ppl": perplexity(losses[removed]),
                    "delta_loss": losses[removed] - base_loss}
            rows += _task_rows(base, task_results.get(removed))

    heal_records = []
    healing = spec.get("healing") or {}
    tracking = spec.get("tracking") or {}
    heal_events = None
    if healing.get("enabled", False):
        from .healing import HealSettings, heal, model_loss

        settings = HealSettings.from_dict(healing)
        train_tokens = data_lib.load_tokens(spec["data"], "train")
        heal_n = grid(healing.get("n_grid"), L, "pruning.healing.n_grid")
        if tracking.get("tensorboard"):
            heal_events = healing_events_folder(spec["out"])
        for strategy in healing.get("strategies") or spec["strategies"]:
            for n in heal_n:
                removed = plans.get((strategy, n))
                if removed is None:
                    continue
                variant = f"{strategy}_n{n}"
                merged, record = heal(
                    prune_copy(model, removed), train_tokens, settings, seed=spec["seed"],
                    device=device, log=lambda m: log(f"[{name}] {strategy} n={n}: {m}"),
                    tensorboard_dir=heal_events and Path(heal_events.name) / variant,
                    wandb=tracking.get("wandb"), run_name=f"{name}-heal-{variant}",
                    run_config={**spec, "variant": {"strategy": strategy, "n": n,
                                                    "removed": list(removed)}})
                loss = model_loss(merged, windows)
                tasks = evaluator.evaluate(model=merged) if evaluator is not None else None
                base = {"model": name, "strategy": strategy, "n": n, "fraction": n / L,
                        "removed": removed_label(removed), "healed": True, "val_loss": loss,
                        "val_ppl": perplexity(loss), "delta_loss": loss - base_loss}
                rows += _task_rows(base, tasks)
                heal_records.append({"strategy": strategy, "n": n,
                                     "removed": removed_label(removed),
                                     "val_loss_unhealed": losses[removed],
                                     "val_loss_healed": loss, **record})
                del merged
    lap("healing")
    table = pd.DataFrame(rows)[SWEEP_COLUMNS]

    single_rows = []
    base_by_task = {r["task"]: r for r in task_results.get((), [])}
    for (layer,) in singles:
        base = {"model": name, "layer": layer, "val_loss": losses[(layer,)],
                "delta_loss": losses[(layer,)] - base_loss}
        for row in task_results.get((layer,)) or [{}]:
            entry = dict(base)
            if row:
                full = base_by_task[row["task"]]
                entry.update({**row, **{f"delta_{m}": row[m] - full[m]
                                        for m in ("acc", "acc_norm", "score")}})
            single_rows.append(entry)
    singles_table = pd.DataFrame(single_rows)

    tolerances = (spec.get("auto_depth") or {}).get("tolerances") or {}
    choices = auto_depth_choices(table, tolerances, lm_settings.get("metric", "acc"))

    speed_table = None
    speed = spec.get("speed") or {}
    out = Path(spec["out"])
    with atomic_path(out, is_dir=True) as tmp:
        if speed.get("enabled", False):
            from .speed import measure_exports

            speed_n = grid(speed.get("n_grid"), L, "pruning.speed.n_grid")
            sets = {f"n{n}": plans[(speed["strategy"], n)] for n in speed_n
                    if (speed["strategy"], n) in plans}
            measured = measure_exports(model, spec["model"], sets, speed["batch_size"],
                                       speed["prompt_length"], speed["new_tokens"],
                                       speed["repeats"], seed=spec["seed"], device=device,
                                       work_dir=tmp)
            full = measured["full"]
            speed_rows = []
            for key, result in measured.items():
                n = 0 if key == "full" else int(key[1:])
                removed = () if key == "full" else sets[key]
                speed_rows.append({
                    "model": name, "strategy": speed["strategy"], "n": n, "fraction": n / L,
                    "removed": removed_label(removed), **result,
                    "prefill_speedup": result["prefill_tokens_per_s"]
                    / full["prefill_tokens_per_s"],
                    "generation_speedup": result["generation_tokens_per_s"]
                    / full["generation_tokens_per_s"]})
            speed_table = pd.DataFrame(speed_rows)
            write_dataframe(tmp / "speed.csv", speed_table)
        lap("speed")

        exports = []
        for item in spec.get("export") or []:
            choice = next((c for c in choices if c["strategy"] == item["strategy"]
                           and c["metric"] == item["metric"] and not c["healed"]), None)
            if choice is None or choice["n"] == 0:
                exports.append({**item, "n": 0, "folder": None,
                                "note": "no layer can be removed within the tolerance"})
                continue
            removed = plans[(item["strategy"], choice["n"])]
            folder = f"export/{item['strategy']}_{item['metric']}_n{choice['n']}"
            export_pruned(model, removed, tmp / folder, tokenizer,
                          metadata={"strategy": item["strategy"], "metric": item["metric"],
                                    "n": choice["n"], "source_model": spec["model"]})
            exports.append({**item, "n": choice["n"], "removed": list(removed),
                            "folder": folder})
        lap("export")

        write_dataframe(tmp / "block_choice.csv", block_choice_table(distance, n_values))
        write_dataframe(tmp / "single_layer.csv", singles_table)
        write_dataframe(tmp / "sweep.csv", table)
        if greedy_records:
            write_dataframe(tmp / "greedy_path.csv", pd.DataFrame(
                [{"n": r["n"], "layer": r["layer"], "removed": removed_label(r["removed"]),
                  "val_loss": r["loss"]} for r in greedy_records]))
        if heal_records:
            write_dataframe(tmp / "healing.csv", pd.DataFrame(heal_records))
        if heal_events is not None:
            shutil.copytree(heal_events.name, tmp / "tensorboard")
            heal_events.cleanup()
        summary = {
            "model": name, "num_layers": L, "val_loss": base_loss,
            "val_tokens": sweep.tokens, "removal_sets": len(sweep.memo),
            "layer_calls": sweep.layer_calls,
            "layer_calls_without_reuse": sum((L - len(k)) * len(windows) for k in sweep.memo),
            "lm_eval_variants": len(task_results),
            "tasks_full_model": task_results.get((), []),
            "healed_variants": len(heal_records), "exports": exports,
            "phase_seconds": seconds, "wall_s": round(time.perf_counter() - started, 3),
        }
        write_json(tmp / "auto_depth.json", {"model": name, "num_layers": L,
                                              "tolerances": tolerances, "choices": choices,
                                              "exports": exports})
        write_json(tmp / "summary.json", summary)
        provenance.extra["summary"] = summary
        provenance.write(tmp / "provenance.json")
    return summary
