#!/usr/bin/env python
"""Export the auto-depth choices of one pruned model as ordinary HF folders (Gromov et al. 2024:
the pruned model a user would deploy): for each configured {strategy, metric}, the model without
the removal set of that strategy at the chosen (unhealed) depth, with its tokenizer, pruning.json
and mergekit.yaml (the mergekit passthrough config that rebuilds it from the original, where one
can: `mergekit-yaml mergekit.yaml OUT`, run from the workflow's directory). A choice
made after measuring: changing the export list reruns this job alone, on the CPU.
See depthlab/stages/pruning/strategies.py (export_choices) and layer_removal.py (export_pruned).

Spec (`export_pruned` job, one per pruned model with pruning.export items):
  model_name  the model's name in the config
  model       the model's HF folder (as prune_model read it)
  revision    hub revision of a hub model (null)
  dtype       auto | float32 | bfloat16 | float16: the precision it is loaded and saved in
              (auto: bfloat16 where the device multiplies it natively, else float32)
  pruning     the prune_model output folder (sweep.csv: each strategy's removal set per n)
  auto_depth  the choose_depth output folder (auto_depth.json)
  export      [{strategy, metric}]: which choices to export
  out         output folder, written atomically

Outputs in `out`: <strategy>_<metric>_n<k>/ per exported choice, exports.json (model, exports:
per item its strategy, metric, n, removed layers, folder and mergekit: {expressible: true, config:
mergekit.yaml}, or {expressible: false, reason} where a passthrough cannot rebuild the export and
no mergekit.yaml is written; folder null with a note when no layer can be removed within the
tolerance), provenance.json.

Example: {"model_name": "pre_ln", "model": "results/default/models/pre_ln", "revision": null,
"dtype": "float32", "pruning": "results/default/pruning/pre_ln",
"auto_depth": "results/default/auto_depth/pre_ln",
"export": [{"strategy": "angular", "metric": "val_loss"}],
"out": "results/default/pruned_models/pre_ln"}
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "export_pruned", offline=True)
    from depthlab.stages.pruning.variants import export_job

    for export in export_job(spec):
        where = export["folder"] or export["note"]
        print(
            f"[{spec['model_name']}] {export['strategy']} {export['metric']} n={export['n']}: {where}"
        )


if __name__ == "__main__":
    main_guard(main)
