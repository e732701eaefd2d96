"""Block-ranking criteria of the depth-pruning literature, beside the strategies of
depthlab.stages.pruning.strategies (angular, deepest, greedy, block_influence):

  ppl             Shortened LLaMA (Kim et al. 2024, "Shortened LLaMA: Depth Pruning for LLMs",
                  arXiv 2402.02834): the calibration loss with that one block removed (the
                  paper's PPL criterion: exp of the mean next-token loss, same order); the n
                  blocks whose single removal gives the lowest loss are removed (one shot)
  taylor          Shortened LLaMA's Taylor criterion: block score = sum over the block's weight
                  parameters (every parameter whose name contains "weight": the projections and
                  the norms' gains, biases excluded) of sum_elements |w * G|, G the gradient of
                  the calibration loss summed over the calibration batches (the mean loss of a
                  batch, one backward pass each). Their code (Nota-NetsPresso/shortened-llm,
                  src/anal_block_sensitivity_taylor.py) adds w * g of every batch and takes the
                  absolute value of the sum, with norm power 1 and "sum" reductions per weight
                  and per block: the same number. The n lowest scores are removed.
  magnitude       the same aggregation of |w| (src/anal_block_sensitivity_magnitude.py: norm
                  power 1, summed per weight and per block); no calibration data
  taylor_plus,    the same rankings with Shortened LLaMA's "+" heuristic: the first 4 and the
  magnitude_plus  last 2 blocks are never removed (src/block_prune.py, keep_block_info =
                  [0, 1, 2, 3, L-2, L-1]; depthlab.settings.pruning.protected_layers). That
                  script applies the heuristic unless --no_plus_heuristic, to its PPL runs too;
                  the paper reports PPL without it, as `ppl` here.
  random_blocks   a baseline: blocks in the order of a permutation drawn from the job's seed
  sleb            SLEB (Song et al. 2024, "SLEB: Streamlining LLMs through Redundancy
                  Verification and Elimination of Transformer Blocks"; jiwonsong-dev/SLEB,
                  sleb.py): n times, remove the block whose removal (given the blocks removed
                  so far) gives the lowest calibration loss (their metric: the summed NLL of the
                  calibration text, the same order as the mean; ties: the first, i.e. the
                  smallest layer), the first and the last block never removed (early_barrier =
                  latter_barrier = 1), here at most L // 2 blocks. The greedy strategy's loop
                  (strategies.greedy_path) with those two layers protected.

ppl, taylor*, sleb read the calibration windows (pruning.calibration: evenly spaced windows of
the train split, every position scored); every set they choose is then scored on the validation
windows by prune_model's sweep, like every other strategy's. Scores are float64 (Taylor's
gradient sums are accumulated in float64). ppl and sleb share one LossSweep on the calibration
windows (prefix reuse; sleb's first step is ppl's single-block removals, memoised).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from depthlab.core.errors import PruningError
from depthlab.models.architectures import adapt, first_output
from depthlab.settings.block_criteria import CRITERIA as DECLARED
from depthlab.settings.pruning import (
    CALIBRATED_STRATEGIES,
    protected_layers,
    strategy_max_n,
)
from depthlab.stages.pruning.blocks import angular_removal, deepest_removal
from depthlab.stages.pruning.strategies import (
    LossSweep,
    block_influence_removal,
    greedy_path,
    greedy_steps,
)

# what rank_blocks runs before the validation sweep (depthlab.settings.block_criteria's `reads`); the
# strategies reading the analysis tables or the validation sweep run in the stage after it
BEFORE_VALIDATION = ("calibration", "weights", "seed")
CRITERIA = tuple(name for name, c in DECLARED.items() if c.reads in BEFORE_VALIDATION)
CRITERIA_COLUMNS = ["criterion", "layer", "score", "calibration_loss", "rank", "protected"]


# --------------------------------------------------------------------------- scores


def _block_weights(layer: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """A block's parameters the Shortened LLaMA criteria score: those whose name contains
    "weight" (projections and norm gains; biases are left out, as in their code)."""
    return [(name, p) for name, p in layer.named_parameters() if "weight" in name]


def magnitude_scores(model: nn.Module) -> np.ndarray:
    """Per block: the sum of |w| over the block's weights (float64)."""
    return np.array(
        [
            sum(float(p.detach().double().abs().sum()) for _, p in _block_weights(layer))
            for layer in adapt(model).layers
        ],
        dtype=np.float64,
    )


def calibration_loss(adapter, window: torch.Tensor) -> torch.Tensor:
    """The mean next-token cross-entropy of one batch of (B, T+1) windows over every position,
    differentiable (the backbone, the last layer's output read by the head as the sweep reads
    it, a config's final-logit softcap applied)."""
    captured = {}
    handle = adapter.layers[-1].register_forward_hook(
        lambda module, args, output: captured.__setitem__("h", first_output(output))
    )
    try:
        adapter.backbone(input_ids=window[:, :-1], use_cache=False)
    finally:
        handle.remove()
    logits = adapter.logits(captured["h"]).float()
    cap = getattr(adapter.model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    targets = window[:, 1:].to(logits.device)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def taylor_scores(model: nn.Module, windows: Sequence[torch.Tensor]) -> tuple[np.ndarray, float]:
    """(per block sum_weights sum_elements |w * G|, the calibration loss of the full model), G
    the gradient of each batch's mean loss summed over the batches in float64; one forward and
    one backward pass per batch. Only the blocks' weights require a gradient meanwhile (restored
    after)."""
    adapter = adapt(model)
    weights = [_block_weights(layer) for layer in adapter.layers]
    flat = [p for block in weights for _, p in block]
    before = {id(p): p.requires_grad for p in model.parameters()}
    sums = {id(p): torch.zeros(p.shape, dtype=torch.float64, device=p.device) for p in flat}
    device = adapter.input_device
    total, count = 0.0, 0
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        for p in flat:
            p.requires_grad_(True)
        for window in windows:
            window = window.to(device)
            with torch.enable_grad():
                loss = calibration_loss(adapter, window)
                grads = torch.autograd.grad(loss, flat, allow_unused=True)
            for p, g in zip(flat, grads):
                if g is not None:  # a weight the loss does not reach has no gradient
                    sums[id(p)] += g.double()
            targets = window[:, 1:].numel()
            total += float(loss.detach()) * targets
            count += targets
    finally:
        for p in model.parameters():
            p.requires_grad_(before[id(p)])
    scores = np.array(
        [
            sum(float((p.detach().double() * sums[id(p)]).abs().sum()) for _, p in block)
            for block in weights
        ],
        dtype=np.float64,
    )
    return scores, total / count


def ranked_removal(scores: np.ndarray, n: int, protected: Sequence[int] = ()) -> tuple[int, ...]:
    """The n unprotected layers with the lowest scores (ties: the lower layer first), sorted."""
    order = [int(l) for l in np.argsort(scores, kind="stable") if int(l) not in set(protected)]
    if not 1 <= n <= len(order):
        raise PruningError(f"block size {n} is outside 1..{len(order)} (unprotected layers)")
    return tuple(sorted(order[:n]))


# --------------------------------------------------------------------------- the stage's part


@dataclass
class CriteriaResult:
    """What the criteria chose and measured: removal sets per (criterion, n), criteria.csv's
    rows, the SLEB path (greedy_path records), the cost per criterion."""

    removals: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    sleb_records: list[dict] = field(default_factory=list)
    greedy_records: list[dict] = field(default_factory=list)  # the validation-loss greedy path
    cost: dict[str, dict] = field(default_factory=dict)
    calibration_loss: float | None = None  # the full model's, on the calibration windows

    def table(self):
        import pandas as pd

        return pd.DataFrame(self.rows, columns=CRITERIA_COLUMNS)


def _score_rows(criterion: str, scores: np.ndarray, L: int, losses=None) -> list[dict]:
    protected = set(protected_layers(criterion, L))
    rank = np.empty(L, dtype=np.int64)
    rank[np.argsort(scores, kind="stable")] = np.arange(1, L + 1)
    return [
        {
            "criterion": criterion,
            "layer": layer,
            "score": float(scores[layer]),
            "calibration_loss": float(losses[layer]) if losses is not None else np.nan,
            "rank": int(rank[layer]),
            "protected": layer in protected,
        }
        for layer in range(L)
    ]


class _Meter:
    """Cost of one criterion: calibration forward / backward passes, layer calls, seconds."""

    def __init__(self, sweep: LossSweep | None):
        self.sweep, self.start = sweep, time.perf_counter()
        self.calls = sweep.layer_calls if sweep is not None else 0

    def record(self, forward: int, backward: int, layer_calls: int | None = None) -> dict:
        if layer_calls is None:
            layer_calls = self.sweep.layer_calls - self.calls if self.sweep is not None else 0
        return {
            "calibration_forward_passes": int(forward),
            "backward_passes": int(backward),
            "layer_calls": int(layer_calls),
            "seconds": round(time.perf_counter() - self.start, 3),
        }


@dataclass
class Ranking:
    """What a ranking function (RANKING_FUNCTIONS: `rank(ranking, name)`) reads, by the
    criterion's `reads` (depthlab.settings.block_criteria), and the result it adds its removal
    sets, rows and cost to."""

    model: nn.Module
    num_layers: int
    n_values: Sequence[int]
    seed: int = 0
    windows: Sequence[torch.Tensor] | None = None  # calibration batches
    distance: np.ndarray | None = None  # analysis: the angular-distance matrix
    cos_adjacent: np.ndarray | None = None  # analysis: measures.csv's cos_adjacent per layer
    sweep: LossSweep | None = None  # the validation loss sweep
    greedy_max_n: int | None = None
    log: Callable[[str], None] | None = None
    result: CriteriaResult = field(default_factory=CriteriaResult)
    scores: dict[str, np.ndarray] = field(default_factory=dict)  # shared by a criterion's variants
    calibration_sweep: LossSweep | None = None
    meter: _Meter | None = None  # the cost of the criterion being ranked

    @property
    def batches(self) -> int:
        return len(self.windows) if self.windows else 0

    def add_ranked(self, name: str, scores: np.ndarray) -> None:
        """The sets of `name` for every n up to its largest: the n lowest unprotected scores."""
        protected = protected_layers(name, self.num_layers)
        for n in self.n_values:
            if n <= strategy_max_n(name, self.num_layers):
                self.result.removals[(name, n)] = ranked_removal(scores, n, protected)


def rank_angular(ranking: Ranking, name: str) -> None:
    for n in ranking.n_values:
        ranking.result.removals[(name, n)] = angular_removal(ranking.distance, n)


def rank_deepest(ranking: Ranking, name: str) -> None:
    for n in ranking.n_values:
        ranking.result.removals[(name, n)] = deepest_removal(ranking.num_layers, n)


def rank_block_influence(ranking: Ranking, name: str) -> None:
    for n in ranking.n_values:
        ranking.result.removals[(name, n)] = block_influence_removal(ranking.cos_adjacent, n)


def rank_greedy(ranking: Ranking, name: str) -> None:
    """Greedy grows one layer at a time up to the largest n (or pruning.greedy_max_n): no
    greedy set beyond."""
    steps = greedy_steps(ranking.n_values, ranking.greedy_max_n)
    records = greedy_path(ranking.sweep.losses, ranking.num_layers, steps, log=ranking.log)
    ranking.result.greedy_records = records
    for record in records:
        if record["n"] in ranking.n_values:
            ranking.result.removals[(name, record["n"])] = record["removed"]


def rank_ppl(ranking: Ranking, name: str) -> None:
    L = ranking.num_layers
    losses = np.array(ranking.calibration_sweep.losses([(l,) for l in range(L)]), dtype=np.float64)
    ranking.scores["ppl"] = losses
    ranking.result.rows += _score_rows(name, losses, L, losses)
    ranking.result.cost[name] = ranking.meter.record(L * ranking.batches, 0)
    ranking.add_ranked(name, losses)


def rank_taylor(ranking: Ranking, name: str) -> None:
    """taylor and taylor_plus: one set of scores (the second asks for no new pass)."""
    result, batches, L = ranking.result, ranking.batches, ranking.num_layers
    if "taylor" not in ranking.scores:
        ranking.scores["taylor"], full = taylor_scores(ranking.model, ranking.windows)
        result.calibration_loss = result.calibration_loss or full
        result.cost[name] = ranking.meter.record(batches, batches, L * batches)
    else:
        result.cost[name] = ranking.meter.record(0, 0, 0)
    result.rows += _score_rows(name, ranking.scores["taylor"], L)
    ranking.add_ranked(name, ranking.scores["taylor"])


def rank_magnitude(ranking: Ranking, name: str) -> None:
    """magnitude and magnitude_plus: one set of scores, no data."""
    scores = ranking.scores.setdefault("magnitude", magnitude_scores(ranking.model))
    ranking.result.rows += _score_rows(name, scores, ranking.num_layers)
    ranking.result.cost[name] = ranking.meter.record(0, 0, 0)
    ranking.add_ranked(name, scores)


def rank_sleb(ranking: Ranking, name: str) -> None:
    result = ranking.result
    result.sleb_records, asked = sleb_path(
        ranking.calibration_sweep, ranking.num_layers, ranking.n_values, ranking.log
    )
    result.cost[name] = ranking.meter.record(asked * ranking.batches, 0)
    for record in result.sleb_records:
        if record["n"] in ranking.n_values:
            result.removals[(name, record["n"])] = record["removed"]


def rank_random(ranking: Ranking, name: str) -> None:
    """A baseline any criterion should beat: the blocks in a random order drawn from the job's
    seed (numpy's default_rng(seed).permutation(L)); the set of n is the first n drawn, so the
    set of n holds the set of n - 1. A block's score is its place in the draw (0: first)."""
    order = np.random.default_rng(ranking.seed).permutation(ranking.num_layers)
    scores = np.argsort(order).astype(np.float64)
    ranking.result.rows += _score_rows(name, scores, ranking.num_layers)
    ranking.result.cost[name] = ranking.meter.record(0, 0, 0)
    ranking.add_ranked(name, scores)


# Every criterion of depthlab.settings.block_criteria and the function that ranks its blocks:
# imported, so the layer contract and the code fingerprint see them (the settings layer, below
# the stages, declares the names; a test checks both tables name the same criteria).
RANKING_FUNCTIONS: dict[str, Callable[[Ranking, str], None]] = {
    "angular": rank_angular,
    "deepest": rank_deepest,
    "greedy": rank_greedy,
    "block_influence": rank_block_influence,
    "ppl": rank_ppl,
    "taylor": rank_taylor,
    "taylor_plus": rank_taylor,
    "magnitude": rank_magnitude,
    "magnitude_plus": rank_magnitude,
    "sleb": rank_sleb,
    "random_blocks": rank_random,
}


def ranking_function(name: str) -> Callable[[Ranking, str], None]:
    """The function that ranks the blocks for strategy `name`."""
    return RANKING_FUNCTIONS[name]


def rank_blocks(
    model: nn.Module,
    strategies: Sequence[str],
    n_values: Sequence[int],
    windows: Sequence[torch.Tensor] | None,
    log=None,
    seed: int = 0,
) -> CriteriaResult:
    """The removal sets of the criteria among `strategies` that run before the validation sweep
    (BEFORE_VALIDATION) for every n of `n_values` up to strategy_max_n (no set beyond), their
    per-block scores and costs. `windows`: the calibration batches (PruningError naming
    pruning.calibration when a criterion needs them and there are none); `seed`: the job's, for
    a criterion that draws. `calibration_forward_passes` counts the (set, batch) passes asked
    for (what running each set's model would cost); `layer_calls` the decoder-layer calls
    actually run (the shared sweep reuses prefixes and memoises sets across ppl and sleb)."""
    wanted = [s for s in strategies if s in CRITERIA]
    ranking = Ranking(model, 0, n_values, seed=seed, windows=windows, log=log)
    if not wanted:
        return ranking.result
    needing = [s for s in wanted if s in CALIBRATED_STRATEGIES]
    if needing and not windows:
        raise PruningError(
            f"pruning.calibration: required by the strategies {', '.join(needing)} "
            f"(calibration windows of the train split)"
        )
    ranking.num_layers = adapt(model).num_layers
    if any(DECLARED[s].calibration_sets for s in wanted):  # a loss sweep on calibration windows
        meter = _Meter(None)
        ranking.calibration_sweep = sweep = LossSweep(model, windows)
        ranking.result.calibration_loss = sweep.losses([()])[0]
        ranking.result.cost["calibration_full_pass"] = meter.record(
            ranking.batches, 0, sweep.layer_calls
        )
    for name in wanted:
        ranking.meter = _Meter(ranking.calibration_sweep)
        ranking_function(name)(ranking, name)
    return ranking.result


def sleb_path(sweep: LossSweep, L: int, n_values: Sequence[int], log=None) -> tuple[list, int]:
    """(SLEB's greedy_path records on the calibration sweep up to the grid's largest n or
    strategy_max_n, the number of removal sets its steps asked for)."""
    asked = [0]

    def losses_of(sets):
        asked[0] += len(sets)
        return sweep.losses(sets)

    steps = min(max(n_values), strategy_max_n("sleb", L))
    records = greedy_path(
        losses_of, L, steps, log=log, protected=protected_layers("sleb", L), label="sleb"
    )
    return records, asked[0]


def layer_parameters(model: nn.Module) -> list[int]:
    """The number of parameters of each decoder layer (removed_params of a set is their sum)."""
    return [sum(p.numel() for p in layer.parameters()) for layer in adapt(model).layers]
