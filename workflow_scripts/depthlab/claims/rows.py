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
    INIT_SHOWS_IT,
    Estimate,
    over_seeds,
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
)


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
    writes the rows (RunData -> [claim_row dicts]), shared by the claims it writes together."""

    id: str
    paper_value: PaperValue
    measure: str
    replicate: str
    rule: str
    fair: str
    rows: Callable[[RunData], list[dict]]

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


def not_learned(data: RunData, members) -> list[str]:
    """Reasons a model's measurements say nothing about the paper: no better than unigram."""
    reasons = []
    for name in members:
        loss, unigram = data.val_loss.get(name), data.unigram.get(name)
        if loss is not None and unigram is not None and not loss < unigram:
            reasons.append(
                f"{name} val loss {loss:.3f} is not below the unigram loss "
                f"{unigram:.3f} (did not learn)"
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
    """A claim about models trained here measured against their untrained twins (the same seed's
    initial weights, depthlab.claims.initial): `delta` the mean over seeds of trained - untrained
    (the row's value), `trained` and `initial` the two sides, `blockers` [the initialisation
    already shows the effect] or [], `text` the two sides in words."""

    delta: Estimate
    trained: Estimate
    initial: Estimate | None
    blockers: list
    text: str


def against_initialisation(trained: list, initial: list, threshold: float) -> AgainstInit:
    """Per seed: the trained Estimate and its untrained twin's value (None: no twin measured).
    The row's value is trained - untrained, over seeds (a twin's value is exact: its weights
    are a function of the seed, so each seed's interval only shifts). When the twins' mean
    effect is itself beyond the threshold and at least as large in size as the trained mean,
    on the same side of zero, the initialisation already shows it: the trained value is the
    prior (or what is left of it), and the row cannot say what training did. A trained value
    on the other side of zero is training's doing, and trained - untrained decides."""
    trained_e = over_seeds(trained)
    if not trained or any(v is None or not math.isfinite(v) for v in initial):
        return AgainstInit(
            trained_e, trained_e, None, [], "no untrained twin measured: the trained value alone"
        )
    initial_e = over_seeds([Estimate(float(v)) for v in initial])
    deltas = [
        replace(t, value=t.value - v, low=t.low - v, high=t.high - v)
        for t, v in zip(trained, initial)
    ]
    delta = over_seeds(deltas)
    text = f"trained {trained_e.value:.4g} - untrained {initial_e.value:.4g}"
    blockers = []
    as_large = abs(initial_e.value) >= abs(trained_e.value) or math.isclose(
        abs(initial_e.value), abs(trained_e.value), rel_tol=1e-9, abs_tol=1e-12
    )
    # the trained value on the twins' side and no larger: training has not left the prior
    same_side = initial_e.value * trained_e.value >= 0
    if abs(initial_e.value) > abs(threshold) and as_large and same_side:
        blockers.append(
            f"{INIT_SHOWS_IT}: the untrained twins' {initial_e.value:.4g} is as large as the "
            f"trained {trained_e.value:.4g}, on the same side (the trained value is the "
            f"initialisation's, not yet left by training)"
        )
    return AgainstInit(delta, trained_e, initial_e, blockers, text)


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
) -> dict:
    """One table row. size: (band, band text, size Estimate or None) where the paper states a
    size; the size verdict follows the main verdict's seeds and blockers."""
    band, band_text, size_e = size or (None, "", None)
    size_e = size_e if size_e is not None else Estimate(math.nan)
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
    }


def decide(e: Estimate, rule: tuple[str, str], trained_here: bool, blockers) -> tuple[str, str]:
    return with_seeds(e, rule, trained_here, blockers)
