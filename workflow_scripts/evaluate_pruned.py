#!/usr/bin/env python
"""lm-eval of one removal set of a model: the full model (`full`), one layer (`single<l>`) or the
(strategy, n) set prune_model chose (`<strategy>_n<n>`). One job per set, used when a model's
lm-eval does not fit one job's time limit (pruning.lm_eval.per_set_jobs); gather_pruning.py puts
the rows into the stage's tables. See depthlab/stages/pruning/variants.py.

Spec (`evaluate_pruned` job): the prune_model spec's model_name, model_kind, model, revision,
tasks, datasets_cache, seed, device, dtype and lm_eval keys (see prune_model.py), plus
  measured   the prune_model output folder (measured.json: the removal sets)
  variant    full | single<l> | <strategy>_n<n>
  out        output folder, written atomically

Outputs in `out`: tasks.json (variant, removed, rows: lm-eval rows as {columns, values},
seconds), provenance.json.

Example: python workflow_scripts/evaluate_pruned.py --config config/paper.yaml
--job llama2_70b/single3
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

from depthlab.cli import main_guard, resolve_device, start_job


def main() -> None:
    _, spec = start_job(__doc__, "evaluate_pruned")
    # lm-eval loads the task files with `datasets`: its cache goes inside the run, before import
    os.environ["HF_DATASETS_CACHE"] = str(spec["datasets_cache"])

    from depthlab.stages.pruning.variants import evaluate_variant

    part = evaluate_variant(
        spec, device=resolve_device(spec["device"]), log=lambda message: print(message, flush=True)
    )
    print(f"[{spec['model_name']}] {spec['variant']} done in {part['seconds']} s")


if __name__ == "__main__":
    main_guard(main)
