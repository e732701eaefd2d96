"""Liu et al. and Besiroglu et al. rows: fitted exponents against the paper's band, and the toy's
tied vs independent teachers."""

from __future__ import annotations

import math
from dataclasses import replace

from depthlab.claims.measures import (
    fit_parameter,
    toy_exponent_gaps,
)
from depthlab.claims.rows import (
    claim_row,
    decide,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    MIN_SEEDS,
    band_text,
    over_seeds,
    verdict_positive,
    verdict_within,
)
from depthlab.core import paper_values as pv
from depthlab.core.paper_values import LIU, PAPER_VALUES

VALUE_BANDS = {
    "liu_a_l": (pv.LIU_A_L_BAND, pv.LIU_A_L_BAND_SOURCE),
    "liu_a_m": (pv.LIU_A_M_BAND, pv.LIU_A_M_BAND_SOURCE),
    "besiroglu_alpha": (pv.BESIROGLU_ALPHA_BAND, pv.BESIROGLU_ALPHA_BAND_SOURCE),
}
# the bands that are sizes the paper states (Besiroglu's is a tolerance of ours: no size row)
SIZE_BANDS = {"liu_a_l": pv.LIU_A_L_BAND, "liu_a_m": pv.LIU_A_M_BAND}


def _fit_seed_blockers(fit: dict, seeds: int) -> list[str]:
    """Why a fit of the project's own sweep cannot decide even over enough seeds: a bootstrap
    over points treats the points of one training curve (strongly correlated) and the seeds of
    one architecture as independent, so its interval does not carry the seed-to-seed
    variance; resampling architectures (each with all its seeds and points) does."""
    unit = fit.get("bootstrap", {}).get("unit", "points")
    if seeds >= MIN_SEEDS and unit != "architectures":
        return [
            f"a sweep fit over {seeds} seeds needs a bootstrap over architectures (each with "
            f"its seeds), not over {unit}: set scaling.fits.<name>.bootstrap.unit: architectures"
        ]
    return []


def liu_claims(data: RunData) -> list[dict]:
    rows = []
    for name, (fit, bounds) in data.fits.items():
        # the project's own sweep is trained here: seeds gate it; published points are not
        trained = name in data.fit_seeds
        seeds = data.fit_seeds.get(name, 1)
        scale = f"{fit.get('n_points_used', '?')} points ({name})" + (
            f"; sweep trained here, {seeds} seed{'s' if seeds > 1 else ''}" if trained else ""
        )
        checks = (
            [("a_l", "liu_a_l"), ("a_m", "liu_a_m")]
            if fit.get("law") == "decomposed"
            else [("alpha", "besiroglu_alpha")]
        )
        for parameter, key in checks:
            if parameter not in fit.get("estimates", {}):
                continue
            e, at_bound = fit_parameter(fit, parameter, bounds)
            e = replace(e, n=seeds)
            blockers = (
                [f"{parameter} at bound: estimate or interval touches {list(bounds)}"]
                if at_bound
                else []
            )
            # another parameter at its bound means the fitted law degenerated
            others = [p for p in fit.get("parameters_at_bounds", []) if p != parameter]
            if others:
                blockers.append(f"the fit is degenerate: {', '.join(others)} at a bound")
            if trained:
                blockers += _fit_seed_blockers(fit, seeds)
            paper = PAPER_VALUES[key]
            band, band_source = VALUE_BANDS[key]
            size_band = SIZE_BANDS.get(key)
            rows.append(
                claim_row(
                    f"{key}:{name}",
                    paper.paper,
                    f"fitted {parameter} matches the paper's {paper.value:g}: the whole "
                    f"interval inside {band_text(band)} ({band_source})",
                    key,
                    e,
                    scale,
                    decide(e, verdict_within(e, band, blockers, band_source), trained, blockers),
                    size=(size_band, band_text(size_band), e),
                )
            )
    if data.toy_fit is not None:
        depths = sorted({r["student_depth"] for r in data.toy_fit.get("losses", [])})
        negligible, band = pv.LIU_TOY_GAP_NEGLIGIBLE, pv.LIU_TOY_RATIO_BAND
        for temperature, (gaps, ratios, blockers) in toy_exponent_gaps(
            data.toy_fit, data.toy_bounds
        ).items():
            gap = over_seeds(gaps)
            ratio = over_seeds(ratios) if all(math.isfinite(r.value) for r in ratios) else None
            rows.append(
                claim_row(
                    f"liu_toy_tied_exceeds:T={temperature:g}",
                    LIU,
                    f"toy students at T={temperature:g}: the tied-teacher depth exponent "
                    f"exceeds the independent one (a_tied - a_indep > {negligible:g}); "
                    f"size: a_tied / a_indep",
                    "liu_toy_tied",
                    gap,
                    f"student depths {depths}",
                    decide(gap, verdict_positive(gap, blockers, negligible), True, blockers),
                    f"a_l ≈ {PAPER_VALUES['liu_toy_tied'].value:g} tied vs ≈ "
                    f"{PAPER_VALUES['liu_toy_independent'].describe()} independent "
                    f"(ratio ≈ 3)",
                    size=(band, band_text(band, " (ratio)"), ratio),
                )
            )
    return rows
