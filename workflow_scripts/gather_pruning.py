#!/usr/bin/env python
"""The pruning stage's tables of one model, from its jobs' parts: prune_model's measurements,
each healed variant (heal_pruned) and each per-set lm-eval (evaluate_pruned). Torch-free and
seconds long. See depthlab/stages/pruning/tables.py.

Spec (`gather_pruning` job, one per model):
  model_name   the model's name in the config
  measured     the prune_model output folder
  heals        the heal_pruned output folders, in the order of their rows
  evaluations  the evaluate_pruned output folders ([] when prune_model ran lm-eval itself)
  seed         the run's seed (provenance)
  out          output folder, written atomically

Outputs in `out`: sweep.csv, single_layer.csv, window_losses.csv, healing.csv (with healed
variants), summary.json, provenance.json, tensorboard/<strategy>_n<n>/ (each healed variant's
curves, with tracking.tensorboard), and prune_model's block_choice.csv, block_influence.csv,
greedy_path.csv, speed.csv, sublayer_path.csv as it wrote them (columns: see prune_model.py).

Example: python workflow_scripts/gather_pruning.py --config config/test.yaml --job lns
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "gather_pruning")

    from depthlab.stages.pruning.tables import gather

    summary = gather(spec)
    print(
        f"[{spec['model_name']}] {summary['healed_variants']} healed variants, "
        f"{summary['lm_eval_variants']} lm-eval variants"
    )


if __name__ == "__main__":
    main_guard(main)
