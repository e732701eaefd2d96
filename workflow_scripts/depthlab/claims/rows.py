"""The claims table's columns and the helpers every builder shares: one row, the seed gate, the
scale text, window bootstraps of a pruned model."""

from __future__ import annotations

import math

from depthlab.claims.measures import (
    window_bootstrap,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    Estimate,
    verdict_size,
    with_seeds,
)
from depthlab.core.paper_values import PAPER_VALUES

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
        "size_verdict": verdict_size(size_e, band, verdict[0]),
    }


def decide(e: Estimate, rule: tuple[str, str], trained_here: bool, blockers) -> tuple[str, str]:
    return with_seeds(e, rule, trained_here, blockers)
