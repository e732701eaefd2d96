"""Depth exponents of the toy models (Liu et al. 2026): loss against student depth, per teacher
kind and temperature, fitted as L = c/l^a (closed-form log-log least squares) or L = c/l^a + L0
(the generic power-law fitter of `power_law.py`).

Kept apart from `toy.py` (models and training) so that changing a fit never touches training.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import power_law

FIT_FORMS = ("power", "power_offset")
# The power_offset form as a law for the generic power-law fitter.
POWER_OFFSET_LAW = power_law.Law("power_offset", "L = c/l^a + L0", ("depth",), ("c",), ("a",),
                                 "L0")


def fit_depth_exponent(depths, losses, form: str = "power", exponent_bounds=(0.0, 10.0)) -> dict:
    """Depth exponent a of one loss-vs-student-depth curve.

    form="power": L = c / l^a, ordinary least squares of log L on log l in closed form (a may
        come out negative when deeper students are further from converged, so it is not bounded
        like the generic fitter's exponents); standard error from OLS.
    form="power_offset": L = c / l^a + L0 with the generic power-law fitter (power_law.fit_law,
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
        se = (float(np.sqrt(resid @ resid / dof * np.linalg.inv(design.T @ design)[1, 1]))
              if dof > 0 else float("nan"))
        return {"form": form, "a": float(coef[1]), "a_se": se, "c": float(np.exp(coef[0])),
                "L0": 0.0, "rmse_log": float(np.sqrt(np.mean(resid ** 2))), "n": len(y)}
    if form == "power_offset":
        result = power_law.fit_law(
            pd.DataFrame({"depth": depths, "loss": losses}), POWER_OFFSET_LAW,
            power_law.FitSettings(exponent_bounds=tuple(exponent_bounds),
                                  start_exponents=(0.5, 1.0, 2.0, 3.0)), source="toy losses")
        est = result.estimates
        return {"form": form, "a": est["a"],
                "a_se": result.jacobian_standard_errors().get("a", float("nan")),
                "c": est["c"], "L0": est["L0"],
                "rmse_log": float(np.sqrt(np.mean(result.residuals ** 2))), "n": len(y)}
    raise ValueError(f"toy.fit_form: '{form}' is not one of {', '.join(FIT_FORMS)}")


def fit_toy_exponents(losses: pd.DataFrame, form: str = "power",
                      exponent_bounds=(0.0, 10.0)) -> list[dict]:
    """One depth-exponent fit per (teacher kind, temperature), on all replicates' test losses."""
    fits = []
    for (kind, temperature), group in losses.groupby(["teacher_kind", "temperature"], sort=True):
        fit = fit_depth_exponent(group["student_depth"], group["test_loss"], form,
                                 exponent_bounds)
        fits.append({"teacher_kind": kind, "temperature": float(temperature), **fit})
    return fits
