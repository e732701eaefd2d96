#!/usr/bin/env python
"""Figures of the depth-use stage (Csordás et al. 2025 layout), from skip_interventions.py and
linear_maps.py output folders: <out_dir>/{skip_effects, output_effect, depth_score,
linear_maps}.<format>, each with a .provenance.json sidecar. See depthlab/stages/depth_use/plots.py.

Spec keys (all required):
  skip          list of skip_interventions output folders (results/<run>/depth_use/skip/<model>)
  linear_maps   list of linear_maps output folders (may be empty)
  out_dir       figure folder (results/<run>/figures/depth_use)
  format        png | pdf | svg

Example: --spec '{"skip": ["results/default/depth_use/skip/depth_problems",
  "results/default/depth_use/skip/depth_width_l16_m96"],
  "linear_maps": ["results/default/depth_use/linear_maps/l4_to_l16_m96"],
  "out_dir": "results/default/figures/depth_use", "format": "png"}'
"""

from pathlib import Path

from depthlab.cli import UserError, main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "plot_depth_use")
    for key in ("skip", "linear_maps", "out_dir", "format"):
        if key not in spec:
            raise UserError(f"spec.{key}: required (see --help)")
    if spec["format"] not in ("png", "pdf", "svg"):
        raise UserError(f"spec.format: png, pdf or svg (got {spec['format']!r})")
    from depthlab.core.atomic_files import save_figure
    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.stages.depth_use.plots import FIGURES, plot_all

    # every file plot_all reads (accuracy and depth scores when present: provenance records the
    # files that exist)
    inputs = [
        f"{folder}/{name}"
        for folder in spec["skip"]
        for name in ("effects.csv", "summary.json", "accuracy.csv", "depth_score.csv")
    ] + [
        f"{folder}/{name}"
        for folder in spec["linear_maps"]
        for name in ("relative_error.csv", "summary.json")
    ]
    provenance = Provenance("figures.depth_use", config=spec, inputs=inputs)
    figures = plot_all(spec["skip"], spec["linear_maps"])
    paths = [Path(spec["out_dir"]) / f"{name}.{spec['format']}" for name in FIGURES]
    for name, path in zip(FIGURES, paths):
        save_figure(path, figures[name])
    provenance.write(*(sidecar_path(path) for path in paths))
    print(" ".join(str(p) for p in paths))


if __name__ == "__main__":
    main_guard(main)
