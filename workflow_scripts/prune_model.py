#!/usr/bin/env python
"""Layer-removal ablations of one model (Gromov et al. 2024; Curse of Depth per-layer ablation):
the strategies listed at the end of this help (block-ranking criteria) over a grid of block sizes,
single-layer removal, lm-eval on the run's offline tasks, measured speed. Healing is one
heal_pruned.py job per variant, lm-eval one evaluate_pruned.py job per removal set when
lm_eval.per_set_jobs; gather_pruning.py writes the stage's tables from them all. The choices made
on the tables are their own seconds-long jobs: choose_depth.py (auto depth) and export_pruned.py
(the chosen pruned models). See depthlab/stages/pruning/stage.py (the phases), strategies.py
(strategies, loss sweep), layer_removal.py (view, copy, export), lm_tasks.py, speed.py and
tables.py (measured.json and the gathered tables).

Spec (`prune_model` job, one per model); paths:
  model_name      the model's name in the config (a label in every table)
  model_kind      pretrain | hf | gguf: a pretrained-here model reads the run's token ids, any
                  other the run's documents re-encoded by its own tokenizer
  model           the model's HF folder (a causal LM: a bare encoder is rejected)
  revision        hub revision (commit, tag or branch) of a hub model (null)
  analysis        analysis folder of the model (reads angular_distance_last.csv, (L+1)x(L+1);
                  measures.csv's cos_adjacent rows for block_influence)
  data            the data stage's folder (val.bin for the loss, train.bin for healing; for a
                  model not pretrained here val.jsonl and train.bin decoded by tokenizer/)
  tasks           build_lm_tasks output folder
  datasets_cache  HF_DATASETS_CACHE for lm-eval's loading of the task files (inside the run)
  out             output folder, written atomically
settings:
  seed, device (auto|cpu|cuda), dtype (float32|bfloat16|float16)
  strategies      a subset of the strategies listed at the end of this help
  n_grid          block sizes n (null: every n from 1 to L-1)
  greedy_max_n    optional: the greedy path stops at this n (absent or null: at the largest n
                  of n_grid); greedy rows exist for n <= greedy_max_n only
  val             {windows, seq_len, batch_size, loss_tokens}: evenly spaced validation windows
                  of val.bin; loss_tokens (optional): every val loss averages the last
                  loss_tokens target positions of each window (absent or null: all seq_len),
                  the earlier positions are context
  calibration     optional {windows, seq_len, batch_size}: evenly spaced windows of the train
                  split that the strategies reading `calibration` rank blocks on (required by them)
  retokenize      {val_tokens, train_tokens}: ids re-encoded per split (null: all); a model that
                  is not pretrain only
  lm_eval         {enabled, tasks (null: every task of the folder), n_grid (null: every n; a
                   config's `inherit` arrives here as the top-level n_grid),
                   single_layer (lm-eval on every single-layer removal), batch_size,
                   bootstrap_iters, per_set_jobs (true: no lm-eval here, each set is an
                   evaluate_pruned job)}
  speed           {enabled, strategy, n_grid, batch_size, prompt_length, new_tokens, repeats}
  sublayer        optional {enabled, max_units}: the sub-layer removal path (attention / MLP
                  sub-blocks, max_units steps), ranked on the calibration windows when
                  there are any, scored on the validation windows

Outputs in `out` (what gather_pruning.py builds the tables from): measured.json (the removal set
of every strategy and n, the loss of every set and single layer, per validation window too, and
the lm-eval rows scored here; see depthlab/stages/pruning/tables.py), block_choice.csv (n, l_star,
distance), block_influence.csv (layer, cos_adjacent, block_influence, rank; with block_influence),
greedy_path.csv, criteria.csv (criterion, layer, score, calibration_loss, rank, protected) and
sleb_path.csv (n, layer, removed, calibration_loss) with the criteria, speed.csv,
sublayer_path.csv (step, layer, kind, removed, search_loss, val_loss, removed_params,
removed_fraction, seconds; with sublayer.enabled), summary.json (criteria_cost: calibration
forward / backward passes, layer calls, seconds per criterion; sublayer: the path's file, steps, seconds per step
and the parameters of each layer and of the decoder; token_source: which tokenizer made the
validation ids; window_losses: windows, scored positions per window, window starts, overlap;
greedy_max_n), provenance.json. The gathered folder adds sweep.csv (model, strategy, n, fraction, removed,
healed, val_loss, val_ppl, delta_loss, task, acc, acc_stderr, acc_norm, acc_norm_stderr,
samples, removed_params), single_layer.csv (layer, val_loss, delta_loss, task, acc, acc_stderr, delta_acc, ...),
window_losses.csv (removed, strategy, n, healed, window, loss), healing.csv and
tensorboard/<strategy>_n<n>/.

Example: {"model_name": "pre_ln", "model_kind": "pretrain",
"model": "results/default/models/pre_ln",
"analysis": "results/default/analysis/val/pre_ln", "data": "results/default/data",
"tasks": "results/default/pruning/tasks",
"datasets_cache": "results/default/pruning/.datasets_cache/pre_ln",
"out": "results/default/pruning_jobs/pre_ln/measured", "seed": 0, "revision": null, "device": "auto",
"dtype": "float32",
"strategies": ["angular", "deepest", "greedy"], "n_grid": null,
"greedy_max_n": null,
"val": {"windows": 32, "seq_len": 64, "batch_size": 16, "loss_tokens": null},
"lm_eval": {"enabled": true, "tasks": null, "n_grid": [3, 6, 9], "single_layer": true,
 "batch_size": 64, "bootstrap_iters": 1000, "per_set_jobs": false},
"speed": {"enabled": true, "strategy": "angular", "n_grid": [3, 6, 9], "batch_size": 4,
 "prompt_length": 32, "new_tokens": 32, "repeats": 3}}
"""

from depthlab.cli import finish_lm_eval_job, main_guard, start_lm_eval_job
from depthlab.settings.block_criteria import help_text


def main() -> None:
    _, spec = start_lm_eval_job(f"{__doc__}\n{help_text()}", "prune_model")
    from depthlab.stages.pruning.stage import run

    finish_lm_eval_job(spec, run, done="done in {result[wall_s]:.1f} s: {result[phase_seconds]}")


if __name__ == "__main__":
    main_guard(main)
