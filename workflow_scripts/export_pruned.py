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

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path  # noqa: E402

from depthlab.cli import main_guard, start_job  # noqa: E402


def main() -> None:
    _, spec = start_job(__doc__, "export_pruned")

    from depthlab.core.atomic_files import atomic_path, write_json
    from depthlab.core.provenance import Provenance
    from depthlab.models.architectures import load_model, load_tokenizer
    from depthlab.stages.pruning.strategies import (
        export_choices,
        read_auto_depth,
        read_measurements,
        removal_sets,
    )

    sweep_path = Path(spec["pruning"]) / "sweep.csv"
    choices_path = Path(spec["auto_depth"]) / "auto_depth.json"
    provenance = Provenance(
        "pruning.export", config=spec, inputs=[spec["model"], sweep_path, choices_path]
    )
    sweep, _ = read_measurements(spec["pruning"])
    record = read_auto_depth(spec["auto_depth"])
    model = load_model(spec["model"], dtype=spec["dtype"], device="cpu", revision=spec["revision"])
    tokenizer = load_tokenizer(spec["model"], revision=spec["revision"])
    with atomic_path(Path(spec["out"]), is_dir=True) as tmp:
        exports = export_choices(
            model,
            tokenizer,
            record,
            removal_sets(sweep),
            spec["export"],
            tmp,
            spec["model"],
            revision=spec["revision"],
        )
        write_json(tmp / "exports.json", {"model": spec["model_name"], "exports": exports})
        provenance.write(tmp / "provenance.json")
    for export in exports:
        where = export["folder"] or export["note"]
        print(
            f"[{spec['model_name']}] {export['strategy']} {export['metric']} n={export['n']}: {where}"
        )


if __name__ == "__main__":
    main_guard(main)
