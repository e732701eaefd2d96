#!/usr/bin/env python
"""Plot each parent's task score before and after supervised fine-tuning, with the range over
fine-tuning seeds (depthlab/stages/finetune/plots.py).

Spec (`plot_finetuning` job): scores (evaluate_finetuned output folders), labels (parent ->
legend label, its norm scheme), run_name, out (.png, .pdf or .svg).
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "plot_finetuning")
    from depthlab.core.atomic_files import save_figure
    from depthlab.core.provenance import Provenance, sidecar_path
    from depthlab.stages.finetune.plots import plot_finetuning
    from depthlab.stages.finetune.scores import read_scores

    provenance = Provenance(
        "figures.finetuning", config=spec, inputs=[f"{d}/scores.csv" for d in spec["scores"]]
    )
    figure = plot_finetuning(read_scores(spec["scores"]), spec["labels"], spec["run_name"])
    save_figure(spec["out"], figure)
    provenance.write(sidecar_path(spec["out"]))


if __name__ == "__main__":
    main_guard(main)
