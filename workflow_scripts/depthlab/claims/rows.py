"""The claims table's columns, the declaration of a claim (`Claim`) and the helpers every builder
shares: one row, the seed gate, the scale text, window bootstraps of a pruned model."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from depthlab.claims.measures import (
    window_bootstrap,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    DECIDED,
    INIT_CONTRADICTS_IT,
    INIT_SHOWS_IT,
    MIN_SEEDS,
    ONE_LAYER_DECIDES,
    Estimate,
    over_seeds,
    t_interval,
    verdict_positive,
    verdict_size,
    with_seeds,
)
from depthlab.core import paper_values as pv
from depthlab.core.paper_values import PAPER_VALUES, PaperValue

COLUMNS = (
    "claim_id",
    "paper",
    "claim",
    "paper_value",
    "measured",
    "low",
    "high",
    "interval",
    "seeds",
    "scale",
    "verdict",
    "reason",
    "size_band",
    "size_measured",
    "size_low",
    "size_high",
    "size_verdict",
    "kind",
    "untrained",
    "training_effect",
    "training_effect_low",
    "training_effect_high",
    "training_moved",
    "layer_check",
)

# What a claim is about, which decides how its untrained twin counts (Claim.kind; the docs'
# table of claims shows it):
# TRAINING: what training produces ("deep layers become identity-like"): a twin that already lies
#   on the trained verdict's side of the threshold, unmoved by training, blocks the row (a pass
#   or a fail that the initialisation already gives says nothing about training);
# ARCHITECTURE: the architecture itself, "regardless of training progress" (Pre-LN's variance
#   growth, LNS's smaller growth): decided on the trained model; a twin that already shows it
#   is a note, never a blocker.
TRAINING = "training"
ARCHITECTURE = "architecture"
KINDS = (TRAINING, ARCHITECTURE)
# training_moved: where trained - untrained lies (its paired interval against 0)
MOVED_TOWARDS = "towards the claim"
MOVED_AWAY = "away from the claim"
MOVED_NOT = "no"


@dataclass(frozen=True)
class Claim:
    """One claim the table can test, declared once beside the function that writes its rows
    (each paper's module holds its claims in a `CLAIMS` tuple; depthlab.claims.table lists the
    modules): the docs' table of every claim (docs/claims.md, generated when the site is built)
    and the table's check that no row goes undeclared read these declarations.

    id: the rows' claim_id, a placeholder after ':' where one row is written per model, group or
    fit (`gromov_block_choice:<group>`); paper_value: the paper's statement (paper, section and
    value); measure: what the row's value is; replicate: what its interval is over; rule: how
    it is decided, written from the named thresholds (depthlab.core.paper_values*); fair:
    whether the default suite's rows are a fair test, and why not; rows: the function that
    writes the rows (RunData -> [claim_row dicts]), shared by the claims it writes together;
    kind: TRAINING (a claim about what training produces) or ARCHITECTURE (about the
    architecture itself), which decides how the untrained twin counts (against_initialisation)."""

    id: str
    paper_value: PaperValue
    measure: str
    replicate: str
    rule: str
    fair: str
    rows: Callable[[RunData], list[dict]]
    kind: str = TRAINING

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id}: kind {self.kind!r} is none of {KINDS}")

    @property
    def base(self) -> str:
        """The claim_id up to its first ':' (the part every row of the claim starts with)."""
        return self.id.split(":", 1)[0]


def over_windows(data: RunData, name: str, statistic) -> Estimate:
    """statistic on a pruned model's window losses, bootstrapped over its validation windows
    (the run's bootstrap resamples and seed)."""
    return window_bootstrap(
        data.window_losses[name],
        statistic,
        data.bootstrap["resamples"],
        data.bootstrap["seed"],
    )


def has_single_windows(data: RunData, name: str) -> bool:
    """Whether a pruned model's window losses hold its single-layer removals."""
    windows = data.window_losses.get(name)
    return windows is not None and bool((windows["strategy"] == "single").any())


def _seed_groups(data: RunData, members) -> dict:
    """{group: its members among `members`}: the seed groups the run declares (norm schemes,
    Pre-LN / LNS pairs, pruned, scored and lens groups); a member of none is its own group."""
    declared = {g: list(m) for g, m, _ in data.schemes}
    for base, base_members, treat, treat_members in data.cod_pairs:
        declared[base], declared[treat] = list(base_members), list(treat_members)
    for table in (data.pruning_groups, data.depth_groups, data.lens_groups):
        declared.update({g: list(m) for g, m in table.items()})
    groups, seen = {}, set()
    for group, group_members in declared.items():
        inside = [m for m in members if m in group_members and m not in seen]
        if inside:
            groups[group] = inside
            seen.update(inside)
    groups.update({m: [m] for m in members if m not in seen})
    return groups


def not_learned(data: RunData, members) -> list[str]:
    """Reasons a model's measurements say nothing about the paper: no better than unigram. A
    seed group of >= MIN_SEEDS seeds is judged on the t-interval over its seeds of unigram loss -
    validation loss, which must lie above 0 (a gate on an interval, so that rounding on another
    CPU cannot flip it); a group of fewer seeds (an indicative row anyway) per model."""
    reasons = []
    for group, group_members in _seed_groups(data, members).items():
        known = [m for m in group_members if m in data.val_loss and m in data.unigram]
        gaps = [data.unigram[m] - data.val_loss[m] for m in known]
        if len(known) >= MIN_SEEDS:
            e = t_interval(gaps, "seeds")
            if not e.low > 0:
                reasons.append(
                    f"{group}: unigram loss - val loss {e.value:.3f} [{e.low:.3f}, "
                    f"{e.high:.3f}] over {len(known)} seeds is not above 0 (did not learn)"
                )
            continue
        for name, gap in zip(known, gaps):
            if not gap > 0:
                reasons.append(
                    f"{name} val loss {data.val_loss[name]:.3f} is not below the unigram loss "
                    f"{data.unigram[name]:.3f} (did not learn)"
                )
    return reasons


def learned_gap(data: RunData, members) -> float:
    """Mean over `members` of unigram loss - final validation loss: what the models learned
    beyond token frequencies (NaN when unknown)."""
    gaps = [
        data.unigram[m] - data.val_loss[m]
        for m in members
        if m in data.unigram and m in data.val_loss
    ]
    return float(np.mean(gaps)) if gaps else math.nan


def learned_threshold(data: RunData, members, published: float) -> tuple[float, str]:
    """(threshold, its words) of a loss difference: LEARNED_SHARE_NEGLIGIBLE of what models
    trained here learned (learned_gap), so the threshold scales with the model; `published`
    nats for a model not trained here or one whose learned gap is unknown or not positive (a
    model that did not learn is blocked by not_learned anyway)."""
    gap = learned_gap(data, members)
    if not any(m in data.trained for m in members) or not math.isfinite(gap) or gap <= 0:
        return published, f"{published:g} nats"
    threshold = pv.LEARNED_SHARE_NEGLIGIBLE * gap
    return threshold, (
        f"{threshold:.3g} nats ({pv.LEARNED_SHARE_NEGLIGIBLE:.0%} of the {gap:.3g} nats the "
        f"models learned below the unigram loss)"
    )


@dataclass(frozen=True)
class AgainstInit:
    """A claim about models trained here measured beside their untrained twins (the same seed's
    initial weights, depthlab.claims.initial). `trained`: the trained models over seeds (the
    row's value: the claim is the paper's statement about the trained model); `initial`: the
    twins over seeds (None without twins); `delta`: trained - untrained, paired seed by seed,
    over seeds; `moved`: where delta's interval lies against 0, in the claim's direction
    (MOVED_TOWARDS / MOVED_AWAY / MOVED_NOT; "" without twins or without an interval);
    `blockers`: [the initialisation already shows (or contradicts) it] or []; `notes`: what
    the twins say of an ARCHITECTURE claim; `text`: the two sides in words."""

    delta: Estimate
    trained: Estimate
    initial: Estimate | None
    blockers: list
    text: str
    moved: str = ""
    notes: tuple = ()

    def columns(self) -> dict:
        """The claims table's twin columns (claim_row's `against`)."""
        if self.initial is None:
            return {}
        return {
            "untrained": self.initial.value,
            "training_effect": self.delta.value,
            "training_effect_low": self.delta.low,
            "training_effect_high": self.delta.high,
            "training_moved": self.moved,
        }


def _side(e: Estimate, threshold: float) -> int:
    """+1 when e lies above the threshold (its interval wholly, where it has one), -1 below, 0
    when its interval straddles it."""
    low, high = (e.low, e.high) if e.has_interval else (e.value, e.value)
    if low > threshold:
        return 1
    if high < threshold:
        return -1
    return 0


def training_moved(delta: Estimate, direction: int = 1) -> str:
    """Where trained - untrained lies, in the claim's direction (+1: the claim says larger is
    its side): towards the claim, away from it, or no (the paired interval contains 0); "" with
    no interval (fewer than MIN_SEEDS seeds of two: nothing to say)."""
    if not delta.has_interval:
        return ""
    # a difference of two sums of the same numbers in another order is not a move
    tolerance = 1e-9 * max(1.0, abs(delta.low), abs(delta.high))
    side = (1 if delta.low > tolerance else -1 if delta.high < -tolerance else 0) * direction
    return {1: MOVED_TOWARDS, -1: MOVED_AWAY, 0: MOVED_NOT}[side]


def against_initialisation(
    trained: list,
    initial: list,
    threshold: float,
    kind: str = TRAINING,
    direction: int = 1,
    contradiction: float | None = None,
) -> AgainstInit:
    """Per seed: the trained Estimate and its untrained twin's value (None: no twin measured).
    The row's value is the trained one, over seeds; trained - untrained (paired seed by seed; a
    twin's value is exact: its weights are a function of the seed) is shown beside it with
    where training moved it. `direction`: +1 when the claim is "effect > threshold", -1 when
    it is "effect < threshold"; `contradiction`: where the opposite effect begins (by default
    the threshold mirrored about 0, -threshold; the threshold itself when it is 0).

    The initialisation blocks a row only for a TRAINING claim, and symmetrically: a pass when
    the twins already show the effect (past the threshold on the claim's side), a fail when they
    already show the opposite (past `contradiction`), each only when training did not move the
    value (the paired interval of trained - untrained contains 0): the verdict is then the
    initialisation's, not training's (the twins decide over seeds on their interval). Twins
    without either effect, or a value training moved, leave the trained verdict standing: a
    precise null on a null twin is a fail. An ARCHITECTURE claim is decided on the trained
    model; twins already on the claim's side are a note."""
    trained_e = over_seeds(trained)
    if not trained or any(v is None or not math.isfinite(v) for v in initial):
        return AgainstInit(
            trained_e, trained_e, None, [], "no untrained twin measured: the trained value alone"
        )
    initial_e = over_seeds([Estimate(float(v), method="twin") for v in initial])
    deltas = [
        replace(t, value=t.value - v, low=t.low - v, high=t.high - v)
        for t, v in zip(trained, initial)
    ]
    delta = over_seeds(deltas)
    moved = training_moved(delta, direction)
    text = (
        f"trained {trained_e.value:.4g}, untrained {initial_e.value:.4g}: trained - untrained "
        f"{delta.value:.4g}"
        + (f" [{delta.low:.4g}, {delta.high:.4g}]" if delta.has_interval else "")
        + (f" (training moved it {moved})" if moved and moved != MOVED_NOT else "")
        + (" (training did not move it)" if moved == MOVED_NOT else "")
    )
    trained_side = _side(trained_e, threshold) * direction
    if contradiction is None:
        contradiction = -threshold if threshold * direction > 0 else threshold
    twin_side = (
        1
        if _side(initial_e, threshold) * direction > 0
        else -1
        if _side(initial_e, contradiction) * direction < 0
        else 0
    )
    blockers, notes = [], []
    if kind == TRAINING:
        if trained_side != 0 and twin_side == trained_side and moved == MOVED_NOT:
            shows = "shows" if twin_side > 0 else "contradicts"
            blockers.append(
                f"{INIT_SHOWS_IT if twin_side > 0 else INIT_CONTRADICTS_IT}: the untrained "
                f"twins' {initial_e.value:.4g} already {shows} it (past "
                f"{threshold if twin_side > 0 else contradiction:g}, on the trained verdict's "
                f"side) and training did not move it "
                f"(trained - untrained {delta.value:.4g} [{delta.low:.4g}, {delta.high:.4g}] "
                f"contains 0): the verdict would be the initialisation's"
            )
    elif twin_side > 0:
        notes.append(
            f"the untrained twins already show it ({initial_e.value:.4g}): a property of the "
            f"architecture" + (f"; training moved it {moved}" if moved else "")
        )
    return AgainstInit(delta, trained_e, initial_e, blockers, text, moved, tuple(notes))


def twin(data: RunData, name: str):
    """A model's untrained twin statistics, or None."""
    return data.initial.get(name)


def scale_of(data: RunData, members) -> str:
    return data.scale.get(members[0]) or data.pretrained_scale.get(members[0], members[0])


def seed_pairs(base: list, treat: list) -> list[tuple[str, str]]:
    """Baseline and treatment members paired in order (seed i with seed i)."""
    return list(zip(base, treat))


def claim_row(
    claim_id,
    paper,
    claim,
    paper_key,
    e: Estimate,
    scale,
    verdict,
    paper_value: str | None = None,
    size: tuple | None = None,
    against: AgainstInit | None = None,
    layer_check: str = "",
) -> dict:
    """One table row. size: (band, band text, size Estimate or None) where the paper states a
    size; the size verdict follows the main verdict's seeds and blockers. against: the twins'
    comparison (against_initialisation) whose trained - untrained fills the twin columns;
    layer_check: what leaving out one layer did (LayerCheck.text). The `kind` column is the
    declaration's (depthlab.claims.table.build_claims)."""
    band, band_text, size_e = size or (None, "", None)
    size_e = size_e if size_e is not None else Estimate(math.nan)
    twin_columns = {
        "untrained": math.nan,
        "training_effect": math.nan,
        "training_effect_low": math.nan,
        "training_effect_high": math.nan,
        "training_moved": "",
        **(against.columns() if against is not None else {}),
    }
    return {
        "claim_id": claim_id,
        "paper": paper,
        "claim": claim,
        "paper_value": paper_value or PAPER_VALUES[paper_key].describe(),
        "measured": e.value,
        "low": e.low,
        "high": e.high,
        "interval": e.method,
        "seeds": e.n,
        "scale": scale,
        "verdict": verdict[0],
        "reason": verdict[1],
        "size_band": band_text,
        "size_measured": size_e.value,
        "size_low": size_e.low,
        "size_high": size_e.high,
        "size_verdict": verdict_size(size_e, band, verdict[0], verdict[1]),
        "kind": "",
        **twin_columns,
        "layer_check": layer_check,
    }


def decide(e: Estimate, rule: tuple[str, str], trained_here: bool, blockers) -> tuple[str, str]:
    return with_seeds(e, rule, trained_here, blockers)


@dataclass(frozen=True)
class LayerCheck:
    """What leaving out one layer at a time did to a verdict decided from a per-layer profile:
    `flips` the layers whose removal flips it (the verdict changes, or the estimate crosses the
    threshold), `text` the words of the table's layer_check column, `blockers` the reason that
    makes the row not decided when a layer flips it."""

    flips: tuple
    text: str
    blockers: list


def layer_check(estimate, layers, verdict, threshold: float, on_side=None) -> LayerCheck:
    """Recompute a row with each layer left out in turn. `estimate(None)` is the row's Estimate
    on every layer, `estimate(k)` the same without layer k; `verdict(e)` the row's rule, (verdict,
    reason); `on_side(e)` which side of the rule's threshold an estimate lies on (default: above
    `threshold`; an equivalence test passes its band). A decided verdict that one left-out layer
    flips (a different verdict, or an estimate on the threshold's other side) is no verdict: no
    single layer may decide a row."""
    if on_side is None:

        def on_side(e):
            return e.value > threshold

    layers = list(layers)
    full = estimate(None)
    decided = verdict(full)[0]
    if decided not in DECIDED or not layers:
        return LayerCheck((), "", [])
    side = on_side(full)
    flips = []
    for k in layers:
        e = estimate(k)
        if not math.isfinite(e.value):
            continue
        without = verdict(e)[0]
        if without in DECIDED and without != decided or on_side(e) != side:
            flips.append((k, e))
    if not flips:
        return LayerCheck((), f"holds without any one of {len(layers)} layers", [])
    shown = "; ".join(f"without layer {k}: {e.value:.4g}" for k, e in flips[:3])
    more = f" and {len(flips) - 3} more" if len(flips) > 3 else ""
    names = ", ".join(str(k) for k, _ in flips[:3]) + more
    return LayerCheck(
        tuple(k for k, _ in flips),
        f"flips without layer {names}",
        [
            f"{ONE_LAYER_DECIDES}: leaving out layer {names} flips the verdict ({shown}{more}; "
            f"all layers: {full.value:.4g})"
        ],
    )


def positive_without_each_layer(e_of, layers, threshold: float, blockers=(), trained=False):
    """(the row's Estimate, its verdict, layer_check words) of an "effect > threshold" row read
    off a per-layer profile: `e_of(k)` the Estimate with layer k left out (None: every layer),
    decided by verdict_positive behind `blockers` and the seed gate (`trained`); a layer whose
    removal flips the verdict makes the row not decided (layer_check)."""

    def rule(e, more=()):
        both = [*blockers, *more]
        return decide(e, verdict_positive(e, both, threshold), trained, both)

    e = e_of(None)
    check = layer_check(e_of, layers, rule, threshold)
    return e, rule(e, check.blockers), check.text
