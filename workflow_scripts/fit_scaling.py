#!/usr/bin/env python
"""Fit a scaling law (decomposed width/depth/data law or the reference form) to a points CSV,
with bootstrap intervals and held-out validation; writes a fit JSON and the bootstrap samples.

The fit spec is the config's `scaling.fit` defaults overridden by one entry of `scaling.fits`
(law, objective, drop_highest, ties, depth_offset, start_grid, bootstrap, validation, ...).
"""

import argparse
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", required=True, help="CSV of fit points")
    parser.add_argument("--name", required=True, help="fit name (recorded in the outputs)")
    parser.add_argument("--defaults", default="{}", help="JSON: scaling.fit defaults")
    parser.add_argument("--fit", default="{}",
                        help='JSON: this fit\'s overrides, e.g. {"law": "reference", '
                             '"objective": "huber", "drop_highest": 5, "columns": {...}}')
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out-json", required=True, help="fit record (JSON)")
    parser.add_argument("--out-samples", required=True, help="bootstrap samples (CSV)")
    args = parser.parse_args()
    # BLAS threads are fixed when numpy loads, so set them before importing the library.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    from depthlab.io import write_dataframe, write_json
    from depthlab.provenance import Provenance, sidecar_path
    from depthlab.scaling import load_points, merge_fit_spec, run_fit

    spec = merge_fit_spec(json.loads(args.defaults), json.loads(args.fit))
    provenance = Provenance("scaling.fit", config={"name": args.name, "spec": spec},
                            inputs=[args.points], seed=args.seed)
    points = load_points(args.points, spec.get("columns"))
    record, samples = run_fit(points, spec, seed=args.seed, source=args.name)
    record["name"] = args.name
    record["points_file"] = args.points
    write_dataframe(args.out_samples, samples)
    write_json(args.out_json, record)
    provenance.write(sidecar_path(args.out_json), sidecar_path(args.out_samples))
    est = record["estimates"]
    summary = ", ".join(f"{k} = {est[k]:.4g} [{record['intervals'][k]['low']:.4g}, "
                        f"{record['intervals'][k]['high']:.4g}]"
                        for k in est if not k.startswith("log_") and k in record["intervals"])
    print(f"{args.name}: {record['equation']} on {record['n_points_used']} points: {summary}")
    if record["parameters_at_bounds"] or record["negligible_terms"]:
        print(f"{args.name}: not identified by these points: at bounds "
              f"{record['parameters_at_bounds']}, negligible terms {record['negligible_terms']}")


if __name__ == "__main__":
    main()
