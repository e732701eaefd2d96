"""The toy model: one train_toy job per teacher kind and temperature, and the fit."""

from __future__ import annotations

from depthlab.config.resolved import Resolved
from depthlab.core.errors import ConfigError
from depthlab.settings.defaults import default

TOY_TRAIN_KEYS = (
    "width",
    "hidden",
    "input_size",
    "output_size",
    "teacher_layers",
    "student_depths",
    "steps",
    "batch_size",
    "lr",
    "eval_batches",
    "replicates",
    "angle_samples",
    "device",
    "protocol",
)


def temperature_grid(spec, key: str = "toy.temperatures") -> list[float]:
    """A list of temperatures, or {min, max, count}: `count` values log-spaced in [min, max]."""
    if isinstance(spec, dict):
        if spec["min"] > spec["max"]:  # both > 0: the schema
            raise ConfigError(f"{key}: min {spec['min']} must not exceed max {spec['max']}")
        if spec["count"] > 1 and spec["min"] == spec["max"]:
            raise ConfigError(f"{key}: {spec['count']} temperatures between equal bounds")
        import numpy as np

        return [float(t) for t in np.geomspace(spec["min"], spec["max"], spec["count"])]
    return [float(t) for t in spec]


def resolve_toy(resolved: Resolved) -> None:
    toy = resolved.config.get("toy")
    if not toy:
        return
    paths, config = resolved.paths, resolved.config
    temperatures = temperature_grid(toy["temperatures"])
    lo, hi = toy.get("exponent_bounds", default("toy", "exponent_bounds"))
    if not lo < hi:
        raise ConfigError(f"toy.exponent_bounds: {[lo, hi]} is not an interval (low < high)")
    if toy["fit_form"] == "power_offset" and len(toy["student_depths"]) < 3:
        raise ConfigError("toy.student_depths: the power_offset form needs at least 3 depths")
    protocol = toy.get("protocol", default("toy", "protocol"))
    if protocol != "embedding" and toy.get("input_size") not in (None, toy["width"]):
        raise ConfigError(
            f"toy.input_size: {toy['input_size']} must equal toy.width "
            f"({toy['width']}) or be null in the {protocol} protocol (the inputs "
            f"are rmsnorm-ed Gaussians of dimension width)"
        )
    settings = {key: toy[key] for key in TOY_TRAIN_KEYS if key in toy}
    runs = []
    for kind in toy["teacher_kinds"]:
        for index in range(len(temperatures)):
            out = paths.toy_run(kind, index)
            runs.append(out)
            resolved.add(
                "train_toy",
                f"{kind}/T{index}",
                {
                    "teacher_kind": kind,
                    "temperature_index": index,
                    "settings": {**settings, "temperatures": temperatures},
                    "seed": config["seed"],
                    "out": out,
                },
                outputs=[out],
                wildcards={"kind": kind, "index": index},
            )
    figure = paths.figure("toy_loss_vs_depth", config["figures"]["format"])
    resolved.add(
        "fit_toy",
        "toy",
        {
            "runs": runs,
            "form": toy["fit_form"],
            "exponent_bounds": [lo, hi],
            "protocol": {
                "name": protocol,
                **{
                    key: toy[key]
                    for key in ("steps", "lr", "batch_size", "teacher_layers", "replicates")
                },
            },
            "out_json": paths.toy_fit,
            "figure": figure,
        },
        outputs=[paths.toy_fit, figure],
    )
