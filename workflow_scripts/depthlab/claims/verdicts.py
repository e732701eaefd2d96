"""Estimates, intervals and verdicts of the claims table (depthlab.claims): a measured value with
its interval, t-intervals over seeds, OLS slopes, differences, and the verdict rules (an effect
above a threshold, decided symmetrically about it; no difference within a margin; a parameter
within the paper's band, an equivalence test; a size inside the paper's band). Pure functions of
numbers: no tables, no files."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

CONFIDENCE = 0.95
MIN_SEEDS = 3
REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_TESTABLE = "not testable at this scale"
# the same verdict about published data points (a fit of someone else's numbers): no scale of
# this run is involved, so the words say what limits it
NOT_TESTABLE_DATA = "not testable on these data"
# the reason a rule gives when the interval is merely too wide for its threshold or band: the
# size verdict can still be decided then (verdict_size), unlike a blocked row
TOO_WIDE = "too wide to decide"
# the reason of a row about a model trained here whose untrained twin already shows the effect
INIT_SHOWS_IT = "the initialisation already shows it"
# the same about a fail: the twins already lie on the failing side and training did not move them
INIT_CONTRADICTS_IT = "the initialisation already contradicts it"
# the reason of a row decided from a per-layer profile that one left-out layer flips
ONE_LAYER_DECIDES = "one layer decides it"
INDICATIVE = "one seed: indicative"
SIZE_REPRODUCED = "size reproduced"
SIZE_NOT_REPRODUCED = "size not reproduced"
NO_SIZE = "no size stated"
DECIDED = (REPRODUCED, NOT_REPRODUCED)

# ---------------------------------------------------------------------------------------------
# Estimates and intervals


@dataclass(frozen=True)
class Estimate:
    """A measured value with an optional interval [low, high] and how it was made."""

    value: float
    low: float = math.nan
    high: float = math.nan
    method: str = ""
    n: int = 1  # seeds the value averages over (decides when >= MIN_SEEDS)
    se: float = math.nan  # standard error, where the method has one

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def _t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, df))


def _z_quantile(confidence: float = CONFIDENCE) -> float:
    from scipy import stats

    return float(stats.norm.ppf(0.5 + confidence / 2))


def t_interval(values, what: str, confidence: float = CONFIDENCE) -> Estimate:
    """Mean of `values` with a t-interval (no interval for fewer than 2 finite values)."""
    values = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    if values.size == 0:
        return Estimate(math.nan, method=f"no finite {what}")
    mean = float(values.mean())
    if values.size < 2:
        return Estimate(mean, method=f"one {what}: no interval")
    se = float(values.std(ddof=1) / math.sqrt(values.size))
    half = _t_quantile(values.size - 1, confidence) * se
    return Estimate(
        mean,
        mean - half,
        mean + half,
        f"{confidence:.0%} t-interval over {values.size} {what}",
        1,
        se,
    )


def over_seeds(
    estimates: list[Estimate],
    confidence: float = CONFIDENCE,
    sample_se: list[float] | None = None,
) -> Estimate:
    """The per-seed estimates of one claim as one. >= MIN_SEEDS seeds: their mean with a
    t-interval over seeds (n - 1 df); one seed: its own (within-model) estimate; two: their mean
    without an interval. `n` is the number of seeds either way.

    `sample_se`: each seed's standard error from the finite sample every seed was scored on (the
    same task items). The seeds' spread cannot show that sample's error (the items are shared), so
    their variance is added to the seeds' (se^2 = s^2 / n + mean(sample_se^2)): three seeds that
    differ by the same one item of 64 are not a zero-width interval."""
    n = len(estimates)
    if n == 1:
        e = estimates[0]
        return replace(
            e,
            n=1,
            method=f"{e.method}, within one model (no seed-to-seed variance)"
            if e.method
            else "one model",
        )
    values = [e.value for e in estimates]
    if n < MIN_SEEDS:
        return Estimate(
            float(np.mean(values)),
            method=f"mean of {n} seeds: no between-seed interval (needs {MIN_SEEDS})",
            n=n,
        )
    e = t_interval(values, "seeds", confidence)
    if sample_se is not None and e.has_interval:
        if len(sample_se) != n or not all(math.isfinite(v) for v in sample_se):
            return Estimate(
                e.value, method=f"{n} seeds; no standard error of the shared items", n=n
            )
        se = math.sqrt(e.se**2 + float(np.mean(np.square(sample_se))))
        half = _t_quantile(n - 1, confidence) * se
        return Estimate(
            e.value,
            e.value - half,
            e.value + half,
            f"{e.method}, widened by the items' standard error (the same items for every seed)",
            n,
            se,
        )
    return replace(e, n=n)


def ols_slope(x, y, confidence: float = CONFIDENCE, what: str = "layers") -> Estimate:
    """Least-squares slope of y on x with its t-interval (df = n - 2)."""
    from scipy import stats

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 3:
        return Estimate(math.nan, method="fewer than 3 points")
    fit = stats.linregress(x, y)
    half = _t_quantile(x.size - 2, confidence) * fit.stderr
    return Estimate(
        float(fit.slope),
        fit.slope - half,
        fit.slope + half,
        f"{confidence:.0%} OLS interval over {x.size} {what}",
        1,
        float(fit.stderr),
    )


def difference(
    a: Estimate, b: Estimate, confidence: float = CONFIDENCE, df: int | None = None
) -> Estimate:
    """a - b; the interval combines the two standard errors, when both have one: a normal
    quantile, or the t quantile of `df` degrees of freedom where the errors come from small
    fits (a slope fitted to 4 points has 2 df: its error is itself uncertain)."""
    value = a.value - b.value
    if not (math.isfinite(a.se) and math.isfinite(b.se)):
        return Estimate(value, method="no interval")
    se = math.hypot(a.se, b.se)
    if df is not None and df < 1:
        return Estimate(value, method=f"no interval: fits with {df} degrees of freedom")
    quantile = _z_quantile(confidence) if df is None else _t_quantile(df, confidence)
    what = "normal" if df is None else f"t ({df} df)"
    half = quantile * se
    return Estimate(
        value,
        value - half,
        value + half,
        f"{confidence:.0%} {what} interval from the two standard errors",
        1,
        se,
    )


# ---------------------------------------------------------------------------------------------
# Verdicts


def _interval_text(e: Estimate) -> str:
    return f"[{e.low:.4g}, {e.high:.4g}]"


def verdict_positive(e: Estimate, blockers=(), threshold: float = 0.0) -> tuple[str, str]:
    """The claim: the effect exceeds `threshold` (the size below which it is not the paper's
    effect; 0 for a bare sign). Decided symmetrically about the threshold, so that "not
    reproduced" is as reachable as "reproduced": reproduced when the whole interval lies above
    it, not reproduced when the whole interval lies below it, not testable when the interval
    straddles it (too wide to decide). Every reason names the threshold."""
    if blockers:
        return NOT_TESTABLE, "; ".join(blockers)
    if not math.isfinite(e.value):
        return NOT_TESTABLE, e.method or "no value"
    if not e.has_interval:
        return NOT_TESTABLE, f"{e.method or 'no interval'} (add seeds)"
    if e.low > threshold:
        return REPRODUCED, f"interval {_interval_text(e)} above the threshold {threshold:g}"
    if e.high < threshold:
        return NOT_REPRODUCED, f"interval {_interval_text(e)} below the threshold {threshold:g}"
    return NOT_TESTABLE, (
        f"interval {_interval_text(e)} straddles the threshold {threshold:g}: {TOO_WIDE}"
    )


def verdict_equivalent(estimates: dict, margin: float, blockers=()) -> tuple[str, str]:
    """The claim: no difference. `estimates`: {label: Estimate} (e.g. every level - the easiest
    level). Reproduced when every interval lies inside [-margin, margin]; not reproduced when one
    lies wholly outside it; not testable otherwise (an interval too wide, or none)."""
    if blockers:
        return NOT_TESTABLE, "; ".join(blockers)
    if not estimates:
        return NOT_TESTABLE, "nothing to compare"
    missing = [k for k, e in estimates.items() if not e.has_interval]
    if missing:
        return NOT_TESTABLE, f"no interval for {', '.join(map(str, missing))} (add seeds)"
    shown = "; ".join(f"{k}: {e.value:.3g} {_interval_text(e)}" for k, e in estimates.items())
    outside = [k for k, e in estimates.items() if e.low > margin or e.high < -margin]
    if outside:
        return NOT_REPRODUCED, (f"{', '.join(map(str, outside))} outside ±{margin:g} ({shown})")
    if all(-margin <= e.low and e.high <= margin for e in estimates.values()):
        return REPRODUCED, f"all inside ±{margin:g} ({shown})"
    return NOT_TESTABLE, f"an interval crosses ±{margin:g}: {TOO_WIDE} ({shown})"


def verdict_within(e: Estimate, band, blockers=(), band_source: str = "") -> tuple[str, str]:
    """The claim: the parameter has the paper's value, within `band` = (low, high): the paper's
    stated uncertainty, or a tolerance stated beside the value where the paper gives none
    (`band_source` says which). An equivalence test, so that a less precise fit is not more
    likely to reproduce: reproduced when the whole interval lies inside the band, not reproduced
    when it lies wholly outside, not testable when it crosses a band edge (too wide, or
    straddling one edge) — an interval containing the paper's value decides nothing alone."""
    if blockers:
        return NOT_TESTABLE, "; ".join(blockers)
    if not e.has_interval:
        return NOT_TESTABLE, e.method or "no interval"
    lo, hi = band
    shown = f"band {band_text(band)}" + (f" ({band_source})" if band_source else "")
    if lo <= e.low and e.high <= hi:
        return REPRODUCED, f"interval {_interval_text(e)} inside the {shown}"
    if e.low > hi or e.high < lo:
        return NOT_REPRODUCED, f"interval {_interval_text(e)} wholly outside the {shown}"
    return NOT_TESTABLE, (
        f"interval {_interval_text(e)} crosses an edge of the {shown}: {TOO_WIDE}"
    )


def with_seeds(
    e: Estimate, verdict: tuple[str, str], trained_here: bool = True, blockers=()
) -> tuple[str, str]:
    """A verdict on a model trained here stands only over >= MIN_SEEDS seeds; with fewer it is
    `one seed: indicative`, with what the rule says on this run's interval as the reason."""
    if blockers or not trained_here or e.n >= MIN_SEEDS:
        return verdict
    return INDICATIVE, (
        f"{e.n} seed{'s' if e.n > 1 else ''} (a verdict needs {MIN_SEEDS}): on "
        f"this run's interval {verdict[0]}: {verdict[1]}"
    )


def verdict_size(e: Estimate | None, band, verdict: str, reason: str = "") -> str:
    """The size verdict: size reproduced when the interval lies inside the paper's band, size not
    reproduced when it lies wholly outside; not testable otherwise. Decided whenever the size is
    decidable: with a decided main verdict, and also when the main verdict is not testable only
    because its interval straddles the claim's threshold (`TOO_WIDE` in `reason`: the size may
    still lie wholly inside or outside the band). Follows an indicative main verdict (too few
    seeds) and a blocked one (a model that did not learn, a fit at its bound, the
    initialisation already showing the effect)."""
    if band is None:
        return NO_SIZE
    if verdict == INDICATIVE:
        return INDICATIVE
    undecided = NOT_TESTABLE_DATA if verdict == NOT_TESTABLE_DATA else NOT_TESTABLE
    decidable = verdict in DECIDED or TOO_WIDE in reason
    if e is None or not e.has_interval or not decidable:
        return undecided
    lo, hi = band
    if lo <= e.low and e.high <= hi:
        return SIZE_REPRODUCED
    if e.low > hi or e.high < lo:
        return SIZE_NOT_REPRODUCED
    return undecided


def band_text(band, unit: str = "") -> str:
    return "" if band is None else f"[{band[0]:.3g}, {band[1]:.3g}]{unit}"
