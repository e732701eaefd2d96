"""Scaling fits: the sweep's points, one fit_scaling and plot_scaling job per fit."""

from __future__ import annotations

import csv
from pathlib import Path

from depthlab.config.models import local_file
from depthlab.config.resolved import Resolved
from depthlab.core.errors import ConfigError
from depthlab.settings.scaling import merge_fit_spec, set_by

LAW_COLUMNS = {
    "decomposed": ("width", "depth", "tokens", "loss"),
    "reference": ("params", "tokens", "loss"),
}


def _check_points_csv(path: str, columns: dict, law: str, key: str, own: dict) -> None:
    """`own`: the fit's own columns (the others come from scaling.fit.columns or are the
    canonical names)."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{key}: cannot read '{path}' ({error})") from None
    for canonical in LAW_COLUMNS[law]:
        column = (columns or {}).get(canonical, canonical)
        if column not in header:
            inherited = canonical not in own and canonical in (columns or {})
            raise ConfigError(
                f"scaling.fits.{key.split('.')[2]}.columns.{canonical}: column "
                f"'{column}' is not in {path} (columns: {', '.join(header)})"
                + (f" (set by scaling.fit.columns.{canonical})" if inherited else "")
            )


def resolve_scaling(resolved: Resolved, base_dir: Path) -> None:
    scaling = resolved.config.get("scaling")
    if not scaling:
        return
    paths, config = resolved.paths, resolved.config
    sweep = scaling.get("sweep")
    if sweep is not None and sweep not in (config.get("sweeps") or {}):
        declared = ", ".join(config.get("sweeps") or {}) or "none"
        raise ConfigError(f"scaling.sweep: '{sweep}' is not a declared sweep (sweeps: {declared})")
    sweep_models = [
        name for name, m in resolved.models.items() if sweep is not None and m.get("sweep") == sweep
    ]
    fmt = config["figures"]["format"]
    if sweep_models:
        resolved.add(
            "collect_sweep",
            "sweep_points",
            {
                "models": [paths.model(name) for name in sweep_models],
                "min_tokens": 1,
                "out": paths.sweep_points,
            },
            outputs=[paths.sweep_points],
        )
    for name, fit in scaling["fits"].items():
        spec = merge_fit_spec(scaling.get("fit") or {}, fit, name)
        if spec["source"] == "sweep":
            if not sweep_models:
                raise ConfigError(
                    f"scaling.fits.{name}.source: 'sweep' needs scaling.sweep to "
                    f"name a declared sweep with models" + set_by(fit, "source")
                )
            points = paths.sweep_points
        else:
            key = f"scaling.fits.{name}.source"
            try:
                points = local_file(spec["source"], base_dir, key)
            except ConfigError as error:
                raise ConfigError(f"{error}{set_by(fit, 'source')}") from None
            _check_points_csv(
                points, spec.get("columns"), spec["law"], key, fit.get("columns") or {}
            )
        outputs = [paths.fit(name), paths.fit_samples(name)]
        resolved.add(
            "fit_scaling",
            name,
            {
                "name": name,
                "points": points,
                "fit": spec,
                "seed": config["seed"],
                "out_json": outputs[0],
                "out_samples": outputs[1],
            },
            outputs=outputs,
        )
        figure = paths.figure(f"scaling/{name}", fmt)
        resolved.add(
            "plot_scaling",
            name,
            {"fit": outputs[0], "samples": outputs[1], "out": figure},
            outputs=[figure],
        )
