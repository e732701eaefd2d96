"""The scaling stage: Liu et al.'s decomposed width/depth/data law and the Chinchilla reference
form on fit points (a CSV, or the validation losses of the project's own depth x width sweep).

Liu et al. (2026), "Inverse Depth Scaling From Most Layers Being Similar", fit

    L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0          (m width, l depth, D tokens)

and Hoffmann et al. (2022) / Besiroglu et al. (2024) fit the reference form

    L = E + A/N^alpha + B/D^beta.

Both are sums of power-law terms plus a floor, fitted by the generic fitter of `power_law_fitter.py`
(LSE form on log loss, multi-start, bootstrap refits from the start grid or warm-started). This
module holds what is specific to the scaling stage: the two laws, reading and cutting the points,
the resampling units (points or width-depth architectures), collecting the sweep's points, and
one configured fit end to end (`run_fit`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from depthlab.core.atomic_files import json_safe
from depthlab.data.pretrain_runs import read_run
from depthlab.stages import power_law_fitter
from depthlab.stages.power_law_fitter import FitResult, FitSettings, Law

# ---------------------------------------------------------------------------------------------
# Laws


LAWS = {
    "decomposed": Law(
        "decomposed",
        "L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0",
        ("width", "depth", "tokens"),
        ("c_m", "c_l", "c_D"),
        ("a_m", "a_l", "a_D"),
        "L0",
    ),
    "reference": Law(
        "reference",
        "L = E + A/N^alpha + B/D^beta",
        ("params", "tokens"),
        ("A", "B"),
        ("alpha", "beta"),
        "E",
    ),
}

POINT_COLUMNS = ("width", "depth", "tokens", "loss", "params")
RESAMPLING_UNITS = ("points", "architectures")


# ---------------------------------------------------------------------------------------------
# Points


def load_points(path: str | Path, columns: dict | None = None) -> pd.DataFrame:
    """Read a CSV of fit points; `columns` maps canonical names (width, depth, tokens, loss,
    params) to the file's column names. Returns canonical columns plus `row` (file order)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"scaling points file not found: {path}")
    raw = pd.read_csv(path)
    explicit = dict(columns or {})
    unknown = sorted(set(explicit) - set(POINT_COLUMNS))
    if unknown:
        raise ValueError(f"columns.{unknown[0]}: not one of {', '.join(POINT_COLUMNS)}")
    columns = {name: name for name in POINT_COLUMNS} | explicit
    frame = pd.DataFrame({"row": np.arange(len(raw))})
    for name, source in columns.items():
        if source in raw.columns:
            frame[name] = pd.to_numeric(raw[source], errors="coerce").to_numpy(float)
        elif name in explicit or name in ("loss", "tokens"):
            # a column the user named (or one every law needs) must exist; width/depth/params
            # left at their default names are optional (each law checks what it needs)
            raise ValueError(
                f"{path}: no column '{source}' for {name} (has: {', '.join(map(str, raw.columns))})"
            )
    return frame


def drop_highest_losses(frame: pd.DataFrame, k: int, ties: str = "exact") -> pd.DataFrame:
    """Drop the k highest-loss points (the papers' outlier cut).

    ties="exact": exactly k points go; among points tied with the k-th highest loss, the ones
        earlier in the input go first (a stable descending sort).
    ties="inclusive": every point whose loss is >= the k-th highest loss goes, so more than k
        may go when that value is tied. This is what Liu et al.'s released code does
        (`loss < sorted(loss)[-k]`); on the quantised Chinchilla losses k=40 drops 42 points.
    """
    if k < 0:
        raise ValueError(f"drop_highest: {k} must be >= 0")
    if k == 0:
        return frame.copy()
    if k >= len(frame):
        raise ValueError(f"drop_highest: {k} would drop all {len(frame)} points")
    loss = frame["loss"].to_numpy(float)
    if ties == "exact":
        order = np.argsort(-loss, kind="stable")
        keep = np.ones(len(frame), bool)
        keep[order[:k]] = False
    elif ties == "inclusive":
        threshold = np.sort(loss)[::-1][k - 1]
        keep = loss < threshold
    else:
        raise ValueError(f"ties: '{ties}' is not exact or inclusive")
    return frame.loc[keep].copy()


def architecture_ids(frame: pd.DataFrame) -> np.ndarray:
    """Integer id per point of its architecture: the (width, depth) pair, else the model size."""
    if {"width", "depth"} <= set(frame.columns) and frame[["width", "depth"]].notna().all().all():
        keys = list(zip(frame["width"], frame["depth"]))
    elif "params" in frame.columns:
        keys = list(frame["params"])
    else:
        raise ValueError("architecture resampling needs width and depth (or params) columns")
    _, ids = np.unique(
        np.array(keys, dtype=float).reshape(len(keys), -1), axis=0, return_inverse=True
    )
    return ids.reshape(-1)


def model_size(frame: pd.DataFrame) -> np.ndarray:
    """Size used to order architectures for extrapolation: params if known, else l * m^2."""
    if "params" in frame.columns and frame["params"].notna().all():
        return frame["params"].to_numpy(float)
    return frame["depth"].to_numpy(float) * frame["width"].to_numpy(float) ** 2


# ---------------------------------------------------------------------------------------------
# Sweep collection


def collect_sweep_points(model_dirs, min_tokens: int = 1) -> pd.DataFrame:
    """Validation losses of sweep models at every evaluated token count (one row per point).

    Each model dir needs config.json (hidden_size = m, num_hidden_layers = l) and train_log.csv
    (val rows; tokens = D). Rows with fewer than `min_tokens` tokens (e.g. a step-0 eval) are
    skipped because log D is undefined there; repeated token counts keep the last row.
    """
    frames = []
    for model_dir in model_dirs:
        run = read_run(model_dir)
        val = run.val_losses(min_tokens)
        if val.empty:
            raise ValueError(
                f"{run.path / 'train_log.csv'}: no val rows with tokens >= {min_tokens}"
            )
        frames.append(
            pd.DataFrame(
                {
                    "model": run.name,
                    "width": run.width,
                    "depth": run.depth,
                    "params": (
                        run.non_embedding_params if run.non_embedding_params is not None else np.nan
                    ),
                    "step": val["step"].to_numpy() if "step" in val else np.nan,
                    "tokens": val["tokens"].to_numpy(float),
                    "loss": val["loss"].to_numpy(float),
                }
            )
        )
    if not frames:
        raise ValueError("collect_sweep_points: no model directories given")
    points = pd.concat(frames, ignore_index=True)
    return points.sort_values(["depth", "width", "tokens"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Fits of the stage's laws


def _law(law: Law | str) -> Law:
    if isinstance(law, Law):
        return law
    if law not in LAWS:
        raise ValueError(f"law: '{law}' is not one of {', '.join(LAWS)}")
    return LAWS[law]


def _offsets(law: Law, depth_offset: float) -> dict:
    """The decomposed law's depth offset (depth enters as l - k) as power_law feature offsets."""
    if not depth_offset:
        return {}
    if "depth" not in law.features:
        raise ValueError(f"depth_offset only applies to a law with a depth term, not {law.name}")
    return {"depth": depth_offset}


def fit_law(
    frame: pd.DataFrame,
    law: Law | str,
    settings: FitSettings | None = None,
    source: str = "points",
    depth_offset: float = 0.0,
) -> FitResult:
    """One of the stage's laws (by name) fitted to points; depth enters as (l - depth_offset)."""
    law = _law(law)
    if depth_offset and "depth" in frame.columns and law.name == "decomposed":
        depths = frame["depth"].to_numpy(float)
        if (depths - depth_offset <= 0).any():
            raise ValueError(
                f"depth_offset: {depth_offset} is not below every depth "
                f"(smallest depth {depths.min():g})"
            )
    return power_law_fitter.fit_law(frame, law, settings, source, _offsets(law, depth_offset))


def fit_depth_law(
    frame: pd.DataFrame,
    settings: FitSettings | None = None,
    source: str = "points",
    depth_offset: float = 0.0,
) -> FitResult:
    """Liu et al.'s decomposed law L = c_m/m^a_m + c_l/(l-k)^a_l + c_D/D^a_D + L0."""
    return fit_law(frame, "decomposed", settings, source, depth_offset)


def fit_chinchilla_law(
    frame: pd.DataFrame, settings: FitSettings | None = None, source: str = "points"
) -> FitResult:
    """The reference form L = E + A/N^alpha + B/D^beta (Hoffmann et al.; Besiroglu et al.)."""
    return fit_law(frame, "reference", settings, source)


# ---------------------------------------------------------------------------------------------
# Bootstrap and held-out validation by points or by architectures


def _check_unit(unit: str, where: str) -> None:
    if unit not in RESAMPLING_UNITS:
        raise ValueError(f"{where}.unit: '{unit}' is not points or architectures")


def bootstrap(
    result: FitResult,
    resamples: int = 1000,
    unit: str = "points",
    confidence: float = 0.95,
    seed: int = 0,
    refit: str = "warm",
) -> dict:
    """Refit on resampled points (or whole width-depth architectures), from the start grid
    (refit="full") or warm-started from the full fit (refit="warm"); percentile intervals.
    Returns {"samples": DataFrame, "intervals": {...}, ...}."""
    _check_unit(unit, "bootstrap")
    if not 0 < confidence < 1:
        raise ValueError(f"bootstrap.confidence: {confidence} must be in (0, 1)")
    groups = architecture_ids(result.points) if unit == "architectures" else None
    boot = power_law_fitter.bootstrap(result, resamples, confidence, seed, groups, refit)
    return {**boot, "unit": unit}


def held_out_validation(
    frame: pd.DataFrame,
    law: Law | str,
    settings: FitSettings,
    random_splits: int = 5,
    test_fraction: float = 0.2,
    extrapolation_train_fraction: float = 0.7,
    unit: str = "points",
    seed: int = 0,
    depth_offset: float = 0.0,
) -> dict:
    """Fit on part of the points, score log-loss error on the rest.

    random: `random_splits` random test sets of `test_fraction` of the points (or of the
    architectures, unit="architectures"). extrapolation: train on the smallest
    `extrapolation_train_fraction` of architectures by size (params, else l m^2), test on the
    larger ones. Splits too small to fit are reported with an "error" entry instead.
    """
    _check_unit(unit, "validation")
    law = _law(law)
    frame = frame.reset_index(drop=True)
    arch = architecture_ids(frame)
    out = power_law_fitter.held_out_validation(
        frame,
        law,
        settings,
        random_groups=arch if unit == "architectures" else np.arange(len(frame)),
        extrapolation_groups=arch,
        sizes=model_size(frame),
        random_splits=random_splits,
        test_fraction=test_fraction,
        extrapolation_train_fraction=extrapolation_train_fraction,
        seed=seed,
        offsets=_offsets(law, depth_offset),
    )
    return {
        "random": out["random"],
        "extrapolation": out["extrapolation"],
        "unit": unit,
        "mean_rmse_log_test_random": out["mean_rmse_log_test_random"],
    }


# ---------------------------------------------------------------------------------------------
# One configured fit, end to end


def run_fit(frame: pd.DataFrame, spec: dict, seed: int = 0, source: str = "points") -> tuple:
    """Apply one config fit spec (law, drop_highest, ties, fit settings, bootstrap, validation)
    to points; returns (JSON-ready record, bootstrap samples frame)."""
    law = LAWS[spec["law"]]
    settings = FitSettings.from_config(spec)
    depth_offset = spec.get("depth_offset", 0.0)
    if law.name != "decomposed" and depth_offset:
        raise ValueError(f"{source}: depth_offset only applies to the decomposed law")
    n_input = len(frame)
    if spec.get("min_tokens"):
        frame = frame[frame["tokens"] >= spec["min_tokens"]]
    kept = drop_highest_losses(frame, int(spec.get("drop_highest", 0)), spec.get("ties", "exact"))
    result = fit_law(kept, law, settings, source, depth_offset)
    boot_spec = spec.get("bootstrap") or {}
    boot = bootstrap(
        result,
        boot_spec.get("resamples", 1000),
        boot_spec.get("unit", "points"),
        boot_spec.get("confidence", 0.95),
        seed,
        boot_spec.get("refit", "warm"),
    )
    val_spec = spec.get("validation") or {}
    validation = held_out_validation(
        kept,
        law,
        settings,
        val_spec.get("random_splits", 5),
        val_spec.get("test_fraction", 0.2),
        val_spec.get("extrapolation_train_fraction", 0.7),
        val_spec.get("unit", "points"),
        seed,
        depth_offset,
    )
    residuals = result.residuals
    points = result.points.copy()
    points["predicted"] = np.exp(result.y - residuals)
    points["residual_log"] = residuals
    record = {
        "law": law.name,
        "equation": law.equation,
        "source": source,
        "objective": settings.objective,
        "huber_delta": settings.huber_delta,
        "optimizer": settings.optimizer,
        "depth_offset": depth_offset,
        "n_points_input": n_input,
        "n_points_used": len(result.points),
        "n_dropped": n_input - len(result.points),
        "drop_highest": int(spec.get("drop_highest", 0)),
        "ties": spec.get("ties", "exact"),
        "estimates": result.estimates,
        "intervals": boot["intervals"],
        "bootstrap": {
            k: boot[k]
            for k in ("resamples", "failures", "unit", "confidence", "seed", "refit", "local_fits")
        },
        "jacobian_standard_errors": result.jacobian_standard_errors(),
        "parameters_at_bounds": result.parameters_at_bounds(),
        "negligible_terms": result.negligible_terms(),
        "objective_value": result.objective,
        "converged": result.converged,
        "n_starts": result.n_starts,
        "n_starts_at_best": result.n_starts_at_best,
        "rmse_log": float(np.sqrt(np.mean(residuals**2))),
        "feature_refs": dict(zip(law.features, np.exp(result.log_refs).tolist())),
        "validation": validation,
        "points": points.to_dict(orient="records"),
    }
    return json_safe(record), boot["samples"]
