#!/usr/bin/env python
"""Gather the validation losses of a depth x width sweep into one CSV of scaling-fit points.

One row per (model, evaluated token count): model, width (hidden_size), depth
(num_hidden_layers), params (non-embedding), step, tokens (D), loss (val).

Spec (`collect_sweep` job): models (sweep model folders: config.json + train_log.csv),
min_tokens (skip val rows before this many tokens: log D needs D > 0), out (points CSV).
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "collect_sweep")

    from depthlab.core.atomic_files import write_dataframe
    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.stages.scaling.fits import collect_sweep_points

    models = spec["models"]
    inputs = [f"{m}/{f}" for m in models for f in ("config.json", "train_log.csv")]
    provenance = Provenance("scaling.collect_sweep", config=spec, inputs=inputs)
    points = collect_sweep_points(models, spec["min_tokens"])
    write_dataframe(spec["out"], points)
    provenance.extra["n_points"] = len(points)
    provenance.write(sidecar_path(spec["out"]))
    print(f"{len(points)} points from {len(models)} models -> {spec['out']}")


if __name__ == "__main__":
    main_guard(main)
