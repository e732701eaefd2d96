#!/usr/bin/env python
"""Fit the depth exponent of the toy models' loss vs student depth, per teacher kind and
temperature, and plot the curves (Liu et al. 2026, teacher-student toy model)."""

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", nargs="+", required=True,
                        help="train_toy.py output folders (losses.csv + teacher.json)")
    parser.add_argument("--form", default="power", choices=["power", "power_offset"],
                        help="power: L = c/l^a (log-log least squares); "
                             "power_offset: L = c/l^a + L0")
    parser.add_argument("--exponent-bounds", nargs=2, type=float, default=[0.0, 10.0],
                        help="bounds on a for power_offset")
    parser.add_argument("--out-json", required=True)
    parser.add_argument("--figure", required=True, help="figure path (.png, .pdf or .svg)")
    args = parser.parse_args()

    import pandas as pd

    from depthlab.io import save_figure, write_json
    from depthlab.provenance import Provenance, sidecar_path
    from depthlab.toy import fit_toy_exponents, plot_toy

    inputs = [str(Path(r) / f) for r in args.runs for f in ("losses.csv", "teacher.json")]
    provenance = Provenance("toy.fit", config={"form": args.form,
                                               "exponent_bounds": args.exponent_bounds},
                            inputs=inputs)
    for path in inputs:
        if not Path(path).is_file():
            raise FileNotFoundError(f"toy run output missing: {path}")
    losses = pd.concat([pd.read_csv(Path(r) / "losses.csv") for r in args.runs],
                       ignore_index=True)
    angles = {}
    for run in args.runs:
        record = json.loads((Path(run) / "teacher.json").read_text())
        angles[record["teacher_kind"]] = record
    fits = fit_toy_exponents(losses, args.form, args.exponent_bounds)
    write_json(args.out_json, {
        "form": args.form, "fits": fits,
        "teacher_angles_deg": {k: v["mean_angle_deg"] for k, v in angles.items()},
        "losses": losses.to_dict(orient="records")})
    save_figure(args.figure, plot_toy(losses, fits, angles))
    provenance.write(sidecar_path(args.out_json), sidecar_path(args.figure))
    for fit in fits:
        print(f"{fit['teacher_kind']:>11} T={fit['temperature']:.4g}: a = {fit['a']:.3f} "
              f"+- {fit['a_se']:.3f}")


if __name__ == "__main__":
    main()
