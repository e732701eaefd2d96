#!/usr/bin/env python
"""Heal one pruned variant of a model (Gromov et al. 2024: LoRA / QLoRA after block removal):
the (strategy, n) set that prune_model chose, healed on the run's training tokens, then its
validation loss per window and lm-eval rows. One job per variant, so a cluster heals them side by
side; gather_pruning.py puts them into the stage's tables. See
depthlab/stages/pruning/variants.py.

Spec (`heal_pruned` job, one per model, strategy and n of pruning.healing): the prune_model
spec's model_name, model_kind, model, revision, data, tasks, datasets_cache, seed, device,
dtype, val, retokenize (not for pretrain), lm_eval, healing and tracking keys (see
prune_model.py), plus
  measured   the prune_model output folder (measured.json: the removal set of every strategy
             and n, and the unhealed losses)
  strategy   the strategy whose set is healed
  n          its block size
  healing    one method's settings (pruning.healing without strategies, n_grid, methods and
             full_lr; `method` lora, qlora or full, full's lr full_lr where given): one heal job
             per method, named <strategy>_n<n> for the first, <strategy>_n<n>_<method> after
  out        output folder, written atomically

Outputs in `out`: heal.json (strategy, n, method, removed, loss, window_losses, record: healing's
steps, trained parameters, lr, train seconds and losses; tasks: lm-eval rows or null;
token_source; seconds), tensorboard/ (with tracking.tensorboard), provenance.json.

Example: python workflow_scripts/heal_pruned.py --config config/test.yaml --job lns/angular_n2
"""

from depthlab.cli import finish_lm_eval_job, main_guard, start_lm_eval_job


def main() -> None:
    _, spec = start_lm_eval_job(__doc__, "heal_pruned")
    from depthlab.stages.pruning.variants import heal_variant

    finish_lm_eval_job(
        spec, heal_variant, done="{spec[strategy]} n={spec[n]} done in {result[seconds]} s"
    )


if __name__ == "__main__":
    main_guard(main)
