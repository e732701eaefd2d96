#!/usr/bin/env python
"""Fit the depth exponent of the toy models' loss vs student depth, per teacher kind and
temperature (all replicates together, each replicate, and a t interval over replicates), and plot
the curves (Liu et al. 2026, teacher-student toy model).

Spec (`fit_toy` job): runs (train_toy output folders: losses.csv + teacher.json), form (power:
L = c/l^a, log-log least squares | power_offset: L = c/l^a + L0), exponent_bounds (for
power_offset), protocol (the training protocol's name and main settings, recorded in fit.json
and on the figure), out_json, figure (.png, .pdf or .svg).
"""

import json
from pathlib import Path

from depthlab.cli import UserError, main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "fit_toy")

    import pandas as pd
    from depthlab.core.atomic_files import save_figure, write_json
    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.stages.toy.fit import fit_toy_exponents
    from depthlab.stages.toy.plots import plot_toy

    runs = spec["runs"]
    inputs = [str(Path(r) / f) for r in runs for f in ("losses.csv", "teacher.json")]
    missing = [path for path in inputs if not Path(path).is_file()]
    if missing:
        raise UserError(f"toy run output missing: {missing[0]}")
    provenance = Provenance("toy.fit", config=spec, inputs=inputs)
    losses = pd.concat([pd.read_csv(Path(r) / "losses.csv") for r in runs], ignore_index=True)
    angles = {}
    for run in runs:
        record = json.loads((Path(run) / "teacher.json").read_text())
        angles[record["teacher_kind"]] = record
    fits = fit_toy_exponents(losses, spec["form"], spec["exponent_bounds"])
    for fit in fits:  # name each replicate's teacher by its seed
        seeds = {r["replicate"]: r["seed"] for r in angles[fit["teacher_kind"]]["replicates"]}
        for replicate in fit["replicates"]:
            replicate["teacher_seed"] = seeds.get(replicate["replicate"])
    protocol = spec.get("protocol") or {}
    write_json(
        spec["out_json"],
        {
            "form": spec["form"],
            "protocol": protocol,
            "fits": fits,
            "teacher_angles_deg": {k: v["mean_angle_deg"] for k, v in angles.items()},
            "losses": losses.to_dict(orient="records"),
        },
    )
    save_figure(spec["figure"], plot_toy(losses, fits, angles, protocol=protocol or None))
    provenance.write(sidecar_path(spec["out_json"]), sidecar_path(spec["figure"]))
    for fit in fits:
        per_replicate = ", ".join(f"{r['a']:.3f}" for r in fit["replicates"])
        print(
            f"{fit['teacher_kind']:>11} T={fit['temperature']:.4g}: a = {fit['a']:.3f} "
            f"+- {fit['a_se']:.3f} (replicates: {per_replicate})"
        )


if __name__ == "__main__":
    main_guard(main)
