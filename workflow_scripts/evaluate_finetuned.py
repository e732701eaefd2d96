#!/usr/bin/env python
"""Score one pretrained model and every model fine-tuned from it on the same lm-eval tasks
(depthlab/stages/finetune/stage.py): the before / after comparison of supervised fine-tuning.

Spec (`evaluate_finetuned` job, one per parent):
  parent_name     the parent's name in the config
  parent          the parent's HF folder, pkg: path or hub id
  revision        hub revision of a hub parent (null)
  finetuned       {name: {path, seed}}: the fine-tuned models' folders
  tasks           the build_finetune_data folder holding the offline tasks (null: none)
  lm_eval         {tasks (null: every task of the folder), harness_tasks ([{name, num_fewshot}]),
                   batch_size, bootstrap_iters}
  datasets_cache  HF_DATASETS_CACHE for lm-eval's loading of the task files
  dtype, device, seed
  out             output folder (written atomically): scores.csv, gains.csv, provenance.json
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "evaluate_finetuned")
    from depthlab.cli import resolve_device
    from depthlab.core.atomic_files import atomic_path, write_dataframe
    from depthlab.core.provenance import Provenance
    from depthlab.stages.finetune.scores import gain_table
    from depthlab.stages.finetune.stage import evaluate_before_after

    provenance = Provenance(
        "finetune.evaluate",
        config=spec,
        inputs=[spec["parent"], *(e["path"] for e in spec["finetuned"].values())]
        + ([spec["tasks"]] if spec["tasks"] else []),
        seed=spec["seed"],
    )
    scores = evaluate_before_after(spec, resolve_device(spec["device"]))
    with atomic_path(spec["out"], is_dir=True) as tmp:
        write_dataframe(tmp / "scores.csv", scores)
        write_dataframe(tmp / "gains.csv", gain_table(scores))
        provenance.write(tmp / "provenance.json")
    print(gain_table(scores).to_string(index=False))


if __name__ == "__main__":
    main_guard(main)
