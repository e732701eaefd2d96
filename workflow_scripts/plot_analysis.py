#!/usr/bin/env python
"""Figures of the analysis stage across the models of a run, from analyze.py output folders.

Writes <out-dir>/{angular_distance, variance_growth, contributions, logit_lens, angles}.<format>
(each with a .provenance.json sidecar): angular-distance heatmaps (Gromov et al. / Curse of
Depth layout), variance and norm growth (Curse of Depth), relative contributions, cosines and
logit lens (Csordas et al.), angles between states and between updates (Liu et al.).
"""

import argparse
from pathlib import Path

from depthlab.analysis_plots import FIGURES, plot_all, read_analyses
from depthlab.io import save_figure
from depthlab.provenance import Provenance, sidecar_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--analyses", nargs="+", required=True,
                        help="analyze.py output folders (one per model)")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--format", default="png", choices=["png", "pdf", "svg"])
    args = parser.parse_args()

    provenance = Provenance("figures.analysis", config=vars(args),
                            inputs=[f"{a}/measures.csv" for a in args.analyses])
    frame, summaries = read_analyses(args.analyses)
    figures = plot_all(frame, summaries)
    paths = [Path(args.out_dir) / f"{name}.{args.format}" for name in FIGURES]
    for name, path in zip(FIGURES, paths):
        save_figure(path, figures[name])
    provenance.write(*(sidecar_path(path) for path in paths))


if __name__ == "__main__":
    main()
