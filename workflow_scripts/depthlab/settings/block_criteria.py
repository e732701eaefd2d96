"""The block-ranking criteria of the pruning stage, declared once each: what a criterion reads,
the layers it never removes, its largest n, its calibration cost for the resource plan and its
colour in the figures. The function that ranks its blocks is the stage's, in the stage's table
{name: function} (depthlab.stages.pruning.criteria.RANKING_FUNCTIONS: this layer is below the
stages and cannot import them; tests/unit/settings/test_block_criteria.py checks that both tables
name the same criteria).

The settings checks (`pruning.strategies`), the schema's enum (depthlab.config.load), the
planner (depthlab.plan.job_costs), the stage (depthlab.stages.pruning.stage and .criteria),
prune_model.py's help and the pruning figures all read this table; adding a criterion is an
entry here, its ranking function and its test. Torch-free: the planner and the config checks
import it.

`reads` says what a ranking function needs and so when the stage runs it:

  analysis      the analysis stage's tables of the model (angular distances, measures.csv)
  validation    the validation loss sweep (the sets are chosen on the windows they are scored on)
  calibration   pruning.calibration's windows of the train split (run before the validation
                sweep is built, so its cache is freed first)
  weights       the weights alone (no data)
  seed          nothing but the job's seed (a baseline)

A ranking function `rank(ranking, name)` (depthlab.stages.pruning.criteria.Ranking) adds the
removal sets of `name` for each n of the grid up to `max_n` to the ranking's result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

READS = ("analysis", "validation", "calibration", "weights", "seed")
# Shortened LLaMA's "+" rule: the first 4 and the last 2 blocks are never removed
PLUS_KEEP_FIRST, PLUS_KEEP_LAST = 4, 2


def _plus_protected(num_layers: int) -> tuple[int, ...]:
    kept = set(range(min(PLUS_KEEP_FIRST, num_layers)))
    kept |= set(range(max(0, num_layers - PLUS_KEEP_LAST), num_layers))
    return tuple(sorted(kept))


def _ends_protected(num_layers: int) -> tuple[int, ...]:
    return (0, num_layers - 1) if num_layers > 1 else (0,)


def _single_blocks(num_layers: int, n_values: Sequence[int]) -> int:
    return num_layers


def _sleb_path_sets(num_layers: int, n_values: Sequence[int]) -> int:
    steps = min(max(n_values), max_n("sleb", num_layers))
    return sum(num_layers - 2 - k + 1 for k in range(1, steps + 1))


@dataclass(frozen=True)
class Criterion:
    name: str
    reads: str  # one of READS
    colour: str  # matplotlib colour of its lines in the pruning figures
    summary: str  # one line for prune_model.py's help
    protected: Callable[[int], tuple[int, ...]] | None = None  # L -> layers never removed
    max_fraction: float | None = None  # at most this fraction of the layers (SLEB: 1/2)
    # the cost model (depthlab.plan.job_costs): loss-sweep sets on the calibration windows
    # (L, grid) -> count, and whether it takes one forward and backward pass per batch
    calibration_sets: Callable[[int, Sequence[int]], int] | None = None
    gradient_pass: bool = False


CRITERIA: dict[str, Criterion] = {
    c.name: c
    for c in (
        Criterion("angular", "analysis", "tab:blue",
                  "the contiguous block [l*, l*+n) of least angular distance (Gromov et al.)"),
        Criterion("deepest", "analysis", "tab:orange",
                  "the n deepest layers but the last (Gromov et al.'s baseline)"),
        Criterion("greedy", "validation", "tab:green",
                  "n times the layer whose removal raises the validation loss least"),
        Criterion("block_influence", "analysis", "tab:red",
                  "the n layers of lowest Block Influence 1 - cos(x_l, x_l+1) (ShortGPT)"),
        Criterion("ppl", "calibration", "tab:purple",
                  "one shot: the n blocks whose single removal gives the lowest calibration "
                  "loss (Shortened LLaMA)", calibration_sets=_single_blocks),
        Criterion("taylor", "calibration", "tab:brown",
                  "the n blocks of lowest sum |w * G| (Shortened LLaMA's Taylor)",
                  gradient_pass=True),
        Criterion("taylor_plus", "calibration", "tab:pink",
                  "taylor, the first 4 and last 2 blocks kept", protected=_plus_protected,
                  gradient_pass=True),
        Criterion("magnitude", "weights", "tab:gray",
                  "the n blocks of lowest sum |w| (Shortened LLaMA)"),
        Criterion("magnitude_plus", "weights", "tab:olive",
                  "magnitude, the first 4 and last 2 blocks kept", protected=_plus_protected),
        Criterion("sleb", "calibration", "tab:cyan",
                  "n times the block whose removal gives the lowest calibration loss, the "
                  "first and last kept, at most L/2 (SLEB)", protected=_ends_protected,
                  max_fraction=0.5, calibration_sets=_sleb_path_sets),
        Criterion("random_blocks", "seed", "black",
                  "n blocks drawn at random from the job's seed, nested over n (a baseline)"),
    )
}  # fmt: skip

STRATEGIES = tuple(CRITERIA)
# the criteria that read pruning.calibration's windows (the train split)
CALIBRATED_STRATEGIES = tuple(n for n, c in CRITERIA.items() if c.reads == "calibration")


def protected_layers(strategy: str, num_layers: int) -> tuple[int, ...]:
    """The layers a strategy never removes (its declaration's `protected`; none for most)."""
    criterion = CRITERIA.get(strategy)
    if criterion is None or criterion.protected is None:
        return ()
    return criterion.protected(num_layers)


def max_n(strategy: str, num_layers: int) -> int:
    """The largest n a strategy has a removal set for in a model of `num_layers` layers: L - 1,
    less its protected layers, at most its `max_fraction` of the layers (SLEB: L // 2). Larger n
    of a grid get no set of that strategy (0: none at all, e.g. a "+" criterion on a model of 6
    layers or less)."""
    free = num_layers - len(protected_layers(strategy, num_layers))
    largest = min(free, num_layers - 1)
    criterion = CRITERIA.get(strategy)
    if criterion is not None and criterion.max_fraction is not None:
        largest = min(largest, int(num_layers * criterion.max_fraction))
    return largest


def help_text() -> str:
    """The criteria as prune_model.py's help lists them."""
    width = max(len(name) for name in CRITERIA)
    lines = ["strategies (pruning.strategies; depthlab/settings/block_criteria.py declares them):"]
    for name, criterion in CRITERIA.items():
        lines.append(f"  {name:<{width}}  {criterion.summary} [reads: {criterion.reads}]")
    return "\n".join(lines)
