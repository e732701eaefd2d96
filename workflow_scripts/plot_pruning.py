#!/usr/bin/env python
"""Figures of the pruning stage across the models of a run, from prune_model.py folders
(depthlab/stages/pruning/plots.py): per-layer ablation Delta P(l) (Curse of Depth Fig. 2 layout), loss
and task accuracy vs fraction removed per strategy, healed and unhealed (Gromov et al. Fig. 1/2
layout), measured speed-up vs fraction removed.

Spec (`plot_pruning` job, one per run); every key is required:
  prunings   {model name: prune_model output folder}
  labels     {model name: label in the figures, e.g. its norm scheme}; the models' order
  metric     acc or acc_norm (the lm-eval metric plotted)
  chance     chance accuracy of the tasks (a dotted line), or null
  run_name   named in the titles
  figures    {delta_p, sweep, speedup: output path}; each gets a .provenance.json sidecar

Example: {"prunings": {"pre_ln": "results/default/pruning/pre_ln",
"lns": "results/default/pruning/lns"}, "labels": {"pre_ln": "Pre-LN", "lns": "LNS"},
"metric": "acc", "chance": 0.25, "run_name": "default",
"figures": {"delta_p": "results/default/figures/pruning_delta_p.png",
"sweep": "results/default/figures/pruning_sweep.png",
"speedup": "results/default/figures/pruning_speedup.png"}}
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "plot_pruning")

    import matplotlib

    matplotlib.use("Agg")

    from depthlab.core.atomic_files import save_figure
    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.stages.pruning.plots import plot_all

    # every table plot_all reads (speed and block_choice when present: provenance records the
    # files that exist)
    inputs = [
        f"{folder}/{name}.csv"
        for folder in spec["prunings"].values()
        for name in ("sweep", "single_layer", "speed", "block_choice")
    ]
    provenance = Provenance("figures.pruning", config=spec, inputs=inputs)
    figures = plot_all(
        spec["prunings"], spec["labels"], spec["metric"], spec["run_name"], spec["chance"]
    )
    for name, path in spec["figures"].items():
        save_figure(path, figures[name])
    provenance.write(*(sidecar_path(path) for path in spec["figures"].values()))


if __name__ == "__main__":
    main_guard(main)
