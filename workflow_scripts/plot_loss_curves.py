#!/usr/bin/env python
"""Plot validation loss against training tokens for every pretrained model of a run.

Spec (`plot_loss_curves` job): models (pretrain checkpoint folders), labels (model name ->
legend label, the norm scheme), sweeps (model name -> its depth x width sweep: those models get
the sweep panel, the others the norm-scheme panel), facts (colours and seed groups, see
depthlab/core/figure_style.py; optional), out (.png, .pdf or .svg).
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "plot_loss_curves")

    from depthlab.core.atomic_files import save_figure
    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.data.pretrain_runs import read_training_runs
    from depthlab.stages.pretrain.plots import plot_loss_curves

    provenance = Provenance(
        "figures.loss_curves",
        config=spec,
        inputs=[f"{m}/{f}" for m in spec["models"] for f in ("config.json", "train_log.csv")],
    )
    runs = read_training_runs(spec["models"], spec["labels"], spec["sweeps"])
    save_figure(spec["out"], plot_loss_curves(runs, spec.get("facts")))
    provenance.write(sidecar_path(spec["out"]))


if __name__ == "__main__":
    main_guard(main)
