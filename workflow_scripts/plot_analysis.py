#!/usr/bin/env python
"""Figures of the analysis stage across the models of a run, from analyse_model.py folders.

Writes the spec's `figures` ({angular_distance, variance_growth, contributions, logit_lens,
angles} -> path, each with a .provenance.json sidecar): angular-distance heatmaps (Gromov et al.
/ Curse of Depth layout), variance and norm growth (Curse of Depth), relative contributions,
cosines and logit lens (Csordas et al.), angles between states and between updates (Liu et al.).

Spec (`plot_analysis` job, one per text set): analyses (analyse_model output folders), out_dir,
format, figures, facts ({model: kind, norm_scheme, sweep, seed, seed_group}: grouping and colours,
see depthlab/core/figure_style.py; optional).
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "plot_analysis")

    from depthlab.core.atomic_files import save_figure
    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.stages.analysis.plots import plot_all, read_analyses

    analyses = spec["analyses"]
    inputs = [f"{a}/{f}" for a in analyses for f in ("measures.csv", "summary.json")]
    provenance = Provenance("figures.analysis", config=spec, inputs=inputs)
    frame, summaries = read_analyses(analyses)
    figures = plot_all(frame, summaries, spec.get("facts"))
    for name, path in spec["figures"].items():
        save_figure(path, figures[name])
    provenance.write(*(sidecar_path(path) for path in spec["figures"].values()))


if __name__ == "__main__":
    main_guard(main)
