"""Choosing the decoder layers to remove: strategies, the loss sweep that scores them, auto depth
and the export of its choices (both read back from prune_model's tables by their own jobs).

Removing a layer set itself (the view, copies, exports, the loss of one model) is
depthlab.stages.pruning.layer_removal; the prune_model stage that runs strategies, lm-eval, healing and speed
together is depthlab.stages.pruning.stage. Strategies for removing n layers (Gromov et al. 2024, "The
Unreasonable Ineffectiveness of the Deeper Layers"; block_influence from Men et al. 2024,
"ShortGPT: Layers in Large Language Models are More Redundant Than You Expect"):

  angular          the block [l*, l*+n) with l* = argmin_l d(x^l, x^{l+n}), d from the analysis
                   stage's (L+1) x (L+1) matrix `angular_distance_last.csv` (ties: the smallest l;
                   depthlab.stages.pruning.blocks, torch-free, as the claims read it)
  deepest          the n deepest layers except the last: [L-1-n, L-1) (the paper's baseline;
                   depthlab.stages.pruning.blocks)
  greedy           non-contiguous: n times, remove the layer whose removal raises the validation
                   loss least (ties: the smallest index); the path grows to the grid's largest
                   n, or stops at pruning.greedy_max_n (no greedy set beyond it)
  block_influence  non-contiguous (ShortGPT): the n layers with the lowest Block Influence
                   BI_l = 1 - E[cos(x_l, x_{l+1})], x_l the input of layer l, the mean over every
                   non-pad token of the analysis text set (the analysis stage's per-layer measure
                   `cos_adjacent` in measures.csv); ties: the lower layer first, so the set of n
                   is the set of n - 1 plus one layer

`LossSweep` evaluates the validation loss of many removal sets with the work shared: one full
pass per batch stores the full model's states h_0..h_L and the arguments every layer was called
with; a removal set is then a path in the trie of keep/drop decisions over layers 0..L-1, walked
depth first, so a layer runs once per distinct prefix of decisions, and every set branches from
the cached state of the deepest layer before its first removal.

Size (~590 lines): the strategies, the loss sweep that scores their sets and the choices made on
its table share one vocabulary (strategy, n, removed set) and are read together; LossSweep is
about a quarter of it.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from depthlab.core.errors import PruningError, UnsupportedModelError
from depthlab.models.architectures import (
    ModelAdapter,
    adapt,
    first_output,
    resolve_model_path,
)
from depthlab.plan.engine_budgets import SWEEP_CACHE_MIB
from depthlab.stages.pruning.layer_removal import (
    LOSS_CHUNK_ELEMENTS,
    export_pruned,
    head_losses,
    normalise_removal,
    scored_positions,
)

# --------------------------------------------------------------------------- block sizes


def check_prunable(
    adapter: ModelAdapter, name: str = "model", where: str = "pruning.models"
) -> None:
    """A model can be pruned and scored only with an LM head (a bare encoder such as the MiniLM
    contrast cannot be scored by validation loss or lm-eval)."""
    if not adapter.has_lm_head:
        raise PruningError(
            f"{where}: model '{name}' has no LM head (a bare encoder); layer "
            f"removal is scored by validation loss and lm-eval, which need one"
        )


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


def read_cos_adjacent(path: str | Path, num_layers: int) -> np.ndarray:
    """cos(h_{l+1}, h_l) of layers l = 0..L-1 from the analysis stage's measures.csv (tidy rows
    measure, layer, n, value: the rows with measure == "cos_adjacent")."""
    import pandas as pd

    frame = pd.read_csv(path)
    missing = {"measure", "layer", "value"} - set(frame.columns)
    if missing:
        raise PruningError(f"{path}: no column(s) {sorted(missing)} (not a measures.csv)")
    rows = frame[frame["measure"] == "cos_adjacent"].sort_values("layer")
    layers = [int(l) for l in rows["layer"]]
    if layers != list(range(num_layers)):
        raise PruningError(
            f"{path}: cos_adjacent rows for layers {layers}, expected 0..{num_layers - 1} "
            f"(a model of {num_layers} layers)"
        )
    values = rows["value"].to_numpy(dtype=np.float64)
    if not np.isfinite(values).all():
        raise PruningError(f"{path}: cos_adjacent has non-finite values")
    return values


def block_influence_order(cos_adjacent: np.ndarray) -> np.ndarray:
    """Layers by increasing Block Influence 1 - cos_adjacent (ties: the lower layer first)."""
    influence = 1.0 - np.asarray(cos_adjacent, dtype=np.float64)
    return np.argsort(influence, kind="stable")  # stable: equal values keep index order


def block_influence_removal(cos_adjacent: np.ndarray, n: int) -> tuple[int, ...]:
    """The n layers with the lowest Block Influence, sorted."""
    num_layers = len(cos_adjacent)
    if not 1 <= n < num_layers:
        raise PruningError(f"block size {n} is outside 1..{num_layers - 1}")
    return tuple(sorted(int(l) for l in block_influence_order(cos_adjacent)[:n]))


def block_influence_table(cos_adjacent: np.ndarray):
    """One row per layer: cos_adjacent, block_influence and rank (1 = removed first)."""
    import pandas as pd

    cos = np.asarray(cos_adjacent, dtype=np.float64)
    rank = np.empty(len(cos), dtype=np.int64)
    rank[block_influence_order(cos)] = np.arange(1, len(cos) + 1)
    return pd.DataFrame(
        {
            "layer": np.arange(len(cos)),
            "cos_adjacent": cos,
            "block_influence": 1.0 - cos,
            "rank": rank,
        }
    )


def greedy_path(
    loss_of,
    num_layers: int,
    n_max: int,
    log=None,
    protected: Sequence[int] = (),
    label: str = "greedy",
) -> list[dict]:
    """Greedy non-contiguous removal: step k removes, from the set of step k-1, the layer whose
    removal gives the lowest loss (`loss_of(list of sets) -> list of losses`; ties: the smallest
    layer). Returns one record per step n = 1..n_max: n, removed set, loss, the candidates'
    losses. Step k scores L - k + 1 candidate sets, so the path to n_max scores
    sum_{k=1..n_max} (L - k + 1) sets (memoised ones included): stopping early
    (pruning.greedy_max_n, `greedy_steps`) is where the greedy strategy's cost goes down.
    `protected` layers are never candidates (SLEB's first and last block, with the loss on
    calibration windows: depthlab.stages.pruning.criteria); `label` names the path in the log."""
    if n_max > num_layers - len(set(protected)):
        raise PruningError(
            f"{label}: {n_max} steps, but only {num_layers - len(set(protected))} of "
            f"{num_layers} layers may be removed"
        )
    removed: tuple[int, ...] = ()
    path = []
    for n in range(1, n_max + 1):
        candidates = [l for l in range(num_layers) if l not in removed and l not in protected]
        sets = [tuple(sorted(removed + (l,))) for l in candidates]
        losses = loss_of(sets)
        best = min(range(len(candidates)), key=lambda i: (losses[i], candidates[i]))
        removed = sets[best]
        path.append(
            {
                "n": n,
                "removed": removed,
                "layer": candidates[best],
                "loss": float(losses[best]),
                "candidates": {c: float(v) for c, v in zip(candidates, losses)},
            }
        )
        if log:
            log(
                f"{label} n={n}: drop layer {candidates[best]} -> {removed}, loss {losses[best]:.4f}"
            )
    return path


def greedy_steps(n_values: Sequence[int], greedy_max_n: int | None) -> int:
    """How far the greedy path grows: the largest block size of the grid, capped at
    pruning.greedy_max_n (null: no cap). Greedy sets exist for the grid's n up to this."""
    largest = max(n_values)
    return largest if greedy_max_n is None else min(largest, int(greedy_max_n))


def auto_depth(
    table, metric: str, tolerance: float, higher_is_better: bool, baseline: float | None = None
) -> dict:
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
    return {
        **chosen,
        "baseline": baseline,
        "tolerance": tolerance,
        "metric": metric,
        "higher_is_better": higher_is_better,
    }


def auto_depth_choices(sweep, tolerances: dict, metric_name: str) -> list[dict]:
    """Auto depth for every (strategy, healed, metric): metric `val_loss` (an increase is the
    drop), `mean_acc` (the mean over tasks of `metric_name`) or a task name (its
    `metric_name`). Healed curves are measured against the unhealed full model (n = 0)."""
    import pandas as pd

    choices = []
    per_variant = sweep.groupby(["strategy", "n", "healed"], as_index=False).agg(
        val_loss=("val_loss", "first")
    )
    tasks = sorted(t for t in sweep["task"].dropna().unique() if t)
    scored = sweep[sweep["task"].isin(tasks)]
    if tasks:
        mean = scored.groupby(["strategy", "n", "healed"], as_index=False)[metric_name].mean()
        per_variant = per_variant.merge(mean.rename(columns={metric_name: "mean_acc"}), how="left")
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
                choice = auto_depth(
                    table[["n", metric]],
                    metric,
                    float(tolerance),
                    higher_is_better=metric != "val_loss",
                    baseline=baseline,
                )
                choices.append({"strategy": strategy, "healed": bool(healed), **choice})
    return choices


# The post-hoc choices (the choose_depth and export_pruned jobs) read the prune_model job's
# tables back, so changing a tolerance or an export reruns them alone, never the measurements.


def read_measurements(folder: str | Path):
    """(sweep.csv, summary.json) of a prune_model output folder, as the stage wrote them:
    `removed` as text ("" for the full model), every float exactly as written. A missing file
    is a PruningError naming it."""
    import pandas as pd

    folder = Path(folder)
    for name in ("sweep.csv", "summary.json"):
        if not (folder / name).is_file():
            raise PruningError(
                f"pruning: {folder / name} does not exist (run prune_model on this model first)"
            )
    # pandas >= 3.1 parses every float back to the value written (tests/workflow/test_posthoc_rules.py)
    sweep = pd.read_csv(folder / "sweep.csv", dtype={"removed": str})
    sweep["removed"] = sweep["removed"].fillna("")
    return sweep, json.loads((folder / "summary.json").read_text())


def removal_sets(sweep) -> dict[tuple[str, int], tuple[int, ...]]:
    """(strategy, n) -> the removed layers of every unhealed set (n > 0) of a sweep table."""
    rows = sweep[(sweep["n"] > 0) & ~sweep["healed"]].drop_duplicates(["strategy", "n"])
    return {
        (strategy, int(n)): tuple(int(layer) for layer in str(removed).split("-"))
        for strategy, n, removed in zip(rows["strategy"], rows["n"], rows["removed"])
    }


def mark_greedy_cap(choices: list[dict], sweep, greedy_max_n: int | None) -> list[dict]:
    """With pruning.greedy_max_n, each greedy auto-depth choice records where the greedy curve
    of `sweep` ends (`curve_end_n`, its largest n) and whether the choice is that end
    (`at_curve_end`: the loss was still within the tolerance there, so a longer path might
    allow more)."""
    ends = [n for (strategy, n) in removal_sets(sweep) if strategy == "greedy"]
    if greedy_max_n is None or not ends:
        return choices
    return [
        {**c, "curve_end_n": max(ends), "at_curve_end": c["n"] == max(ends)}
        if c["strategy"] == "greedy"
        else c
        for c in choices
    ]


def auto_depth_record(sweep, summary: dict, tolerances: dict, metric_name: str) -> dict:
    """auto_depth.json of one model: the auto-depth choice of every (strategy, healed, metric
    with a tolerance) on its sweep table (`auto_depth_choices`, greedy curves marked where
    pruning.greedy_max_n cut them), with the model's name and layer count from its summary."""
    choices = auto_depth_choices(sweep, tolerances, metric_name)
    return {
        "model": summary["model"],
        "num_layers": summary["num_layers"],
        "tolerances": tolerances,
        "choices": mark_greedy_cap(choices, sweep, summary["greedy_max_n"]),
    }


def read_auto_depth(folder: str | Path) -> dict:
    """auto_depth.json of a choose_depth output folder (a PruningError names a missing file)."""
    path = Path(folder) / "auto_depth.json"
    if not path.is_file():
        raise PruningError(
            f"auto_depth: {path} does not exist (run choose_depth on this model first)"
        )
    return json.loads(path.read_text())


def export_choices(
    model: nn.Module,
    tokenizer,
    record: dict,
    removals: dict[tuple[str, int], tuple[int, ...]],
    items: list[dict],
    out: Path,
    source_model: str,
    revision: str | None = None,
) -> list[dict]:
    """Export the unhealed auto-depth choice (`record`: auto_depth.json) of each `items` entry
    {strategy, metric} as an HF folder `out/<strategy>_<metric>_n<k>/` (with pruning.json and
    mergekit.yaml, the passthrough config that rebuilds it from `source_model`); `removals`:
    removal_sets of the sweep the choices were made on. Returns one record per item (folder
    None when no layer can be removed within the tolerance, or when the metric has no choice;
    an exported one's `mergekit` says whether the passthrough config rebuilds it, or why not)."""
    num_layers = adapt(model).num_layers
    if num_layers != record["num_layers"]:
        raise PruningError(
            f"model: {source_model} has {num_layers} layers, the auto-depth choices were made "
            f"on {record['num_layers']} (rerun prune_model and choose_depth on it)"
        )
    exports = []
    for item in items:
        choice = next(
            (
                c
                for c in record["choices"]
                if c["strategy"] == item["strategy"]
                and c["metric"] == item["metric"]
                and not c["healed"]
            ),
            None,
        )
        if choice is None or choice["n"] == 0:
            note = (
                "no auto-depth choice for this metric (its measurements are missing, e.g. "
                "lm-eval is off)"
                if choice is None
                else "no layer can be removed within the tolerance"
            )
            exports.append({**item, "n": 0, "folder": None, "note": note})
            continue
        removed = removals[(item["strategy"], choice["n"])]
        folder = f"{item['strategy']}_{item['metric']}_n{choice['n']}"
        written = export_pruned(
            model,
            removed,
            out / folder,
            tokenizer,
            metadata={
                "strategy": item["strategy"],
                "metric": item["metric"],
                "n": choice["n"],
                "source_model": source_model,
            },
            # a pkg: path is this workflow's notation: mergekit needs the folder it names
            mergekit_source=resolve_model_path(source_model),
            revision=revision,
        )
        exports.append(
            {
                **item,
                "n": choice["n"],
                "removed": list(removed),
                "folder": folder,
                "mergekit": written["mergekit"],
            }
        )
    return exports


# --------------------------------------------------------------------------- losses


def window_starts(num_tokens: int, windows: int, seq_len: int) -> np.ndarray:
    """The first token of each of `windows` evenly spaced (seq_len + 1)-token windows of a flat
    array of `num_tokens` ids (neighbours overlap when the windows outnumber the room)."""
    width = seq_len + 1
    if num_tokens < width:
        raise PruningError(f"val split has {num_tokens} tokens, fewer than seq_len + 1 = {width}")
    return np.linspace(0, num_tokens - width, windows).astype(np.int64)


def validation_windows(
    tokens: np.ndarray, windows: int, seq_len: int, batch_size: int
) -> list[torch.Tensor]:
    """`windows` evenly spaced (seq_len + 1)-token windows of a flat token array, in batches
    (the pretraining stage's validation windows, depthlab.stages.pretrain.training.validation_batches)."""
    width = seq_len + 1
    starts = window_starts(len(tokens), windows, seq_len)
    stacked = np.stack([np.asarray(tokens[s : s + width]) for s in starts]).astype(np.int64)
    return list(torch.from_numpy(stacked).split(batch_size))


@dataclass
class _BatchCache:
    targets: torch.Tensor
    calls: list  # per layer: (extra positional args, kwargs) it was called with
    start: torch.Tensor  # h_0, the input of layer 0


class LossSweep:
    """Validation loss of many removal sets with shared work (see the module docstring).

    `windows`: batches of (B, T+1) token windows (inputs [:, :-1], targets [:, 1:]). Losses are
    the mean next-token cross-entropy over the scored target positions, the last `loss_tokens`
    of each window (null: all T), the head read in chunks of at most `chunk_elements` logits
    (depthlab.stages.pruning.layer_removal.head_losses, as model_loss reads a pruned copy). Beside each set's
    mean, `window_losses` gives its loss per window (the mean over that window's scored
    positions; windows numbered in batch order), for intervals over the sampled windows.

    States are cached by trie node, i.e. by (batch, layer p, the removed layers below p): the
    full model's states h_0..h_L always, every other computed state while the cache holds at
    most `cache_mib` MiB (least recently used evicted first). A later call (a greedy step)
    starts from the states an earlier call left."""

    def __init__(
        self,
        model: nn.Module,
        windows: Sequence[torch.Tensor],
        cache_mib: float = SWEEP_CACHE_MIB,
        chunk_elements: int = LOSS_CHUNK_ELEMENTS,
        loss_tokens: int | None = None,
    ):
        self.model = model
        self.chunk_elements = chunk_elements
        self.loss_tokens = loss_tokens
        self.adapter = adapt(model)
        if not self.adapter.has_lm_head:
            raise UnsupportedModelError(f"{type(model).__name__} has no LM head: no loss")
        self.num_layers = self.adapter.num_layers
        self.device = next(model.parameters()).device
        self.memo: dict[tuple, float] = {}
        self.window_memo: dict[tuple, np.ndarray] = {}  # set -> loss per window
        self.layer_calls = 0
        self.tokens = 0  # target positions run through the model
        self.scored_tokens = 0  # of which scored by the loss (the last loss_tokens per window)
        self.windows = 0
        self.cache_bytes = int(cache_mib * 2**20)
        self._states: OrderedDict = OrderedDict()  # (batch, layer, removed below) -> state
        self._pinned: dict = {}  # the full model's states
        self._bytes = 0
        self._progress = None  # a losses() call's ProgressLog, stepped at the walk's leaves
        self._batches = [self._prepare(index, w.to(self.device)) for index, w in enumerate(windows)]

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
        handles.append(
            self.adapter.layers[-1].register_forward_hook(
                lambda module, args, output: states.__setitem__(
                    self.num_layers, first_output(output)
                )
            )
        )
        try:
            self.adapter.backbone(input_ids=inputs, use_cache=False)
        finally:
            for handle in handles:
                handle.remove()
        self.tokens += targets.numel()
        self.scored_tokens += targets.shape[0] * scored_positions(
            targets.shape[-1], self.loss_tokens
        )
        self.windows += targets.shape[0]
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
        state = first_output(self.adapter.layers[layer - 1](previous, *args, **kwargs))
        size = state.numel() * state.element_size()
        if size <= self.cache_bytes:
            self._states[key] = state
            self._bytes += size
            while self._bytes > self.cache_bytes:
                _, evicted = self._states.popitem(last=False)
                self._bytes -= evicted.numel() * evicted.element_size()
        return state

    @torch.inference_mode()
    def losses(self, removal_sets: Sequence[Sequence[int]], log=None) -> list[float]:
        """Mean validation loss of each removal set (memoised by set); `log`: where a long
        sweep's progress lines go (depthlab.core.tracking: every ~10 s, with its ETA)."""
        from depthlab.core.tracking import ProgressLog

        keys = [normalise_removal(s, self.num_layers) for s in removal_sets]
        todo = sorted({k for k in keys if k not in self.memo})
        # counted in sets scored on a batch: the walk finishes several at each leaf
        self._progress = (
            ProgressLog("loss sweep", len(todo) * len(self._batches), log, unit="set-batches")
            if log is not None and todo
            else None
        )
        if todo:
            sums = dict.fromkeys(todo, 0.0)
            per_window = {key: [] for key in todo}
            for index, batch in enumerate(self._batches):
                self._walk(
                    index, 0, batch.start, (), [set(k) for k in todo], todo, sums, per_window
                )
            per_window_scored = self.scored_tokens // self.windows
            for key in todo:
                self.memo[key] = sums[key] / self.scored_tokens
                self.window_memo[key] = np.concatenate(per_window[key]) / per_window_scored
        return [self.memo[k] for k in keys]

    def window_losses(self, removal_sets: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Each set's loss per validation window: the mean over the window's scored positions
        (all windows score as many, so their mean is the set's `losses` value)."""
        keys = [normalise_removal(s, self.num_layers) for s in removal_sets]
        self.losses(keys)
        return [self.window_memo[k] for k in keys]

    def _walk(self, index, layer, hidden, below, removed_sets, keys, sums, per_window):
        """Depth-first over the decisions for layers layer..L-1 shared by `keys`; `hidden` is
        the input of `layer` with the layers `below` removed."""
        if layer == self.num_layers:
            total, windows = head_losses(
                self.adapter,
                hidden,
                self._batches[index].targets,
                self.chunk_elements,
                self.loss_tokens,
            )
            for key in keys:
                sums[key] += total
                per_window[key].append(windows)
            if self._progress is not None:
                self._progress.step(len(keys))
            return
        keep = [i for i, s in enumerate(removed_sets) if layer not in s]
        drop = [i for i, s in enumerate(removed_sets) if layer in s]
        if keep:
            following = self._state(index, layer + 1, below, hidden)
            self._walk(
                index,
                layer + 1,
                following,
                below,
                [removed_sets[i] for i in keep],
                [keys[i] for i in keep],
                sums,
                per_window,
            )
        if drop:
            self._walk(
                index,
                layer + 1,
                hidden,
                below + (layer,),
                [removed_sets[i] for i in drop],
                [keys[i] for i in drop],
                sums,
                per_window,
            )
