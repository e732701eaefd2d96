"""Depth exponents of the toy models (Liu et al. 2026): loss against student depth, per teacher
kind and temperature, fitted as L = c/l^a (closed-form log-log least squares) or L = c/l^a + L0
(the generic power-law fitter of `power_law_fitter.py`), on all replicates' losses together and per
replicate (teacher seed), with a t interval over the replicates' exponents.

Kept apart from `toy.py` (models and training) so that changing a fit never touches training.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from depthlab.stages import power_law_fitter

FIT_FORMS = ("power", "power_offset")
# The power_offset form as a law for the generic power-law fitter.
POWER_OFFSET_LAW = power_law_fitter.Law(
    "power_offset", "L = c/l^a + L0", ("depth",), ("c",), ("a",), "L0"
)


def _with_interval(fit: dict, confidence: float, n_parameters: int) -> dict:
    """a_low / a_high: a -+ t quantile x standard error (nan when the error is unknown)."""
    dof = fit["n"] - n_parameters
    se = fit["a_se"]
    half = (
        float(stats.t.ppf((1 + confidence) / 2, dof)) * se
        if dof > 0 and se is not None and np.isfinite(se)
        else float("nan")
    )
    return {**fit, "a_low": fit["a"] - half, "a_high": fit["a"] + half}


def fit_depth_exponent(
    depths, losses, form: str = "power", exponent_bounds=(0.0, 10.0), confidence: float = 0.95
) -> dict:
    """Depth exponent a of one loss-vs-student-depth curve, with a `confidence` interval
    (a_low, a_high) from its standard error and a t quantile.

    form="power": L = c / l^a, ordinary least squares of log L on log l in closed form (a may
        come out negative when deeper students are further from converged, so it is not bounded
        like the generic fitter's exponents); standard error from OLS.
    form="power_offset": L = c / l^a + L0 with the generic power-law fitter (power_law_fitter.fit_law,
        least squares on log L); needs at least 3 points; standard error from the Jacobian.
    """
    depths = np.asarray(depths, float)
    losses = np.asarray(losses, float)
    if (losses <= 0).any() or (depths <= 0).any():
        raise ValueError("fit_depth_exponent: depths and losses must be positive")
    if len(np.unique(depths)) < 2:
        raise ValueError("fit_depth_exponent: needs at least two distinct student depths")
    x, y = np.log(depths), np.log(losses)
    if form == "power":
        design = np.stack([np.ones_like(x), -x], axis=1)
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        resid = y - design @ coef
        dof = len(y) - 2
        se = (
            float(np.sqrt(resid @ resid / dof * np.linalg.inv(design.T @ design)[1, 1]))
            if dof > 0
            else float("nan")
        )
        return _with_interval(
            {
                "form": form,
                "a": float(coef[1]),
                "a_se": se,
                "c": float(np.exp(coef[0])),
                "L0": 0.0,
                "rmse_log": float(np.sqrt(np.mean(resid**2))),
                "n": len(y),
            },
            confidence,
            2,
        )
    if form == "power_offset":
        result = power_law_fitter.fit_law(
            pd.DataFrame({"depth": depths, "loss": losses}),
            POWER_OFFSET_LAW,
            power_law_fitter.FitSettings(
                exponent_bounds=tuple(exponent_bounds), start_exponents=(0.5, 1.0, 2.0, 3.0)
            ),
            source="toy losses",
        )
        est = result.estimates
        se = result.jacobian_standard_errors().get("a")
        return _with_interval(
            {
                "form": form,
                "a": est["a"],
                "a_se": float("nan") if se is None else se,
                "c": est["c"],
                "L0": est["L0"],
                "rmse_log": float(np.sqrt(np.mean(result.residuals**2))),
                "n": len(y),
            },
            confidence,
            3,
        )
    raise ValueError(f"toy.fit_form: '{form}' is not one of {', '.join(FIT_FORMS)}")


def replicate_interval(exponents, confidence: float = 0.95) -> dict:
    """Mean of the replicates' exponents with a t interval, mean -+ t_(n-1) s/sqrt(n); with one
    replicate the interval is undefined (nan) and that replicate's own interval stands."""
    values = np.asarray(exponents, float)
    n = len(values)
    mean = float(values.mean())
    if n < 2:
        return {
            "n": n,
            "mean": mean,
            "std": float("nan"),
            "low": float("nan"),
            "high": float("nan"),
            "confidence": confidence,
        }
    std = float(values.std(ddof=1))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * std / np.sqrt(n)
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "low": mean - half,
        "high": mean + half,
        "confidence": confidence,
    }


def fit_toy_exponents(
    losses: pd.DataFrame, form: str = "power", exponent_bounds=(0.0, 10.0), confidence: float = 0.95
) -> list[dict]:
    """Per (teacher kind, temperature): one depth-exponent fit on all replicates' test losses
    (a, a_se, a_low, a_high, ...), one per replicate (`replicates`: replicate, a, a_se, a_low,
    a_high) and the t interval over the replicates' exponents (`replicate_interval`)."""
    fits = []
    losses = losses if "replicate" in losses else losses.assign(replicate=0)
    for (kind, temperature), group in losses.groupby(["teacher_kind", "temperature"], sort=True):
        fit = fit_depth_exponent(
            group["student_depth"], group["test_loss"], form, exponent_bounds, confidence
        )
        replicates = []
        for replicate, members in group.groupby("replicate", sort=True):
            one = fit_depth_exponent(
                members["student_depth"], members["test_loss"], form, exponent_bounds, confidence
            )
            replicates.append(
                {
                    "replicate": int(replicate),
                    **{k: one[k] for k in ("a", "a_se", "a_low", "a_high")},
                }
            )
        fits.append(
            {
                "teacher_kind": kind,
                "temperature": float(temperature),
                **fit,
                "replicates": replicates,
                "replicate_interval": replicate_interval([r["a"] for r in replicates], confidence),
            }
        )
    return fits
