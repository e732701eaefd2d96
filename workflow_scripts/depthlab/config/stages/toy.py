"""The toy model: one train_toy job per teacher kind and temperature, and the fit."""

from __future__ import annotations

from depthlab.config.resolved import Resolved
from depthlab.settings.toy import checked_protocol, exponent_bounds, temperature_grid

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


def resolve_toy(resolved: Resolved) -> None:
    toy = resolved.config.get("toy")
    if not toy:
        return
    paths, config = resolved.paths, resolved.config
    temperatures = temperature_grid(toy["temperatures"])
    lo, hi = exponent_bounds(toy)
    protocol = checked_protocol(toy)
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
