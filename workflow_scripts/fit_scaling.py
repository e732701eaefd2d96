#!/usr/bin/env python
"""Fit a scaling law (decomposed width/depth/data law or the reference form) to a points CSV,
with bootstrap intervals and held-out validation; writes a fit JSON and the bootstrap samples.

Spec (`fit_scaling` job, one per entry of `scaling.fits`): name, points (CSV), fit (the
`scaling.fit` defaults merged with the entry: law, objective, drop_highest, ties, depth_offset,
start_grid, bootstrap, validation, columns, ...), seed, out_json, out_samples.

By hand: python workflow_scripts/fit_scaling.py --config config/default.yaml --job chinchilla_liu
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "fit_scaling")

    from depthlab.core.atomic_files import write_dataframe, write_json
    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.stages.scaling.fits import load_points, run_fit

    name, fit = spec["name"], spec["fit"]
    provenance = Provenance("scaling.fit", config=spec, inputs=[spec["points"]], seed=spec["seed"])
    points = load_points(spec["points"], fit.get("columns"))
    record, samples = run_fit(points, fit, seed=spec["seed"], source=name)
    record["name"] = name
    record["points_file"] = spec["points"]
    write_dataframe(spec["out_samples"], samples)
    write_json(spec["out_json"], record)
    provenance.write(sidecar_path(spec["out_json"]), sidecar_path(spec["out_samples"]))
    est = record["estimates"]
    summary = ", ".join(
        f"{k} = {est[k]:.4g} [{record['intervals'][k]['low']:.4g}, "
        f"{record['intervals'][k]['high']:.4g}]"
        for k in est
        if not k.startswith("log_") and k in record["intervals"]
    )
    print(f"{name}: {record['equation']} on {record['n_points_used']} points: {summary}")
    if record["parameters_at_bounds"] or record["negligible_terms"]:
        print(
            f"{name}: not identified by these points: at bounds "
            f"{record['parameters_at_bounds']}, negligible terms {record['negligible_terms']}"
        )


if __name__ == "__main__":
    main_guard(main)
