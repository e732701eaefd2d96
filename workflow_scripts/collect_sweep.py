#!/usr/bin/env python
"""Gather the validation losses of a depth x width sweep into one CSV of scaling-fit points.

One row per (model, evaluated token count): model, width (hidden_size), depth
(num_hidden_layers), params (non-embedding), step, tokens (D), loss (val).
"""

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", required=True,
                        help="sweep model folders (config.json + train_log.csv)")
    parser.add_argument("--min-tokens", type=int, default=1,
                        help="skip val rows before this many tokens (log D needs D > 0)")
    parser.add_argument("--out", required=True, help="points CSV")
    args = parser.parse_args()

    from depthlab.io import write_dataframe
    from depthlab.provenance import Provenance, sidecar_path
    from depthlab.scaling import collect_sweep_points

    inputs = [f"{m}/{f}" for m in args.models for f in ("config.json", "train_log.csv")]
    provenance = Provenance("scaling.collect_sweep", config={"models": args.models,
                                                             "min_tokens": args.min_tokens},
                            inputs=inputs)
    points = collect_sweep_points(args.models, args.min_tokens)
    write_dataframe(args.out, points)
    provenance.extra["n_points"] = len(points)
    provenance.write(sidecar_path(args.out))
    print(f"{len(points)} points from {len(args.models)} models -> {args.out}")


if __name__ == "__main__":
    main()
