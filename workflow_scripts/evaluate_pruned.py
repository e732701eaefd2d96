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

from depthlab.cli import finish_lm_eval_job, main_guard, start_lm_eval_job


def main() -> None:
    _, spec = start_lm_eval_job(__doc__, "evaluate_pruned")
    from depthlab.stages.pruning.variants import evaluate_variant

    finish_lm_eval_job(spec, evaluate_variant, done="{spec[variant]} done in {result[seconds]} s")


if __name__ == "__main__":
    main_guard(main)
