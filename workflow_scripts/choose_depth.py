#!/usr/bin/env python
"""Auto depth of one pruned model (Gromov et al. 2024): per strategy, healed or not, and metric
with a tolerance, the largest block size n whose validation-loss increase (or accuracy drop)
stays within the tolerance at every n' <= n, read from the prune_model job's tables. A choice made
after measuring: changing a tolerance reruns this seconds-long job, never the measurements.
See depthlab/stages/pruning/strategies.py (auto_depth, auto_depth_choices, auto_depth_record).

Spec (`choose_depth` job, one per pruned model):
  model_name  the model's name in the config
  pruning     the prune_model output folder (reads sweep.csv and summary.json)
  auto_depth  {tolerances: {val_loss | mean_acc | <task name>: absolute tolerance}}
  metric      acc | acc_norm | score: the lm-eval metric of mean_acc and task tolerances
              (pruning.lm_eval.metric)
  out         output folder, written atomically

Outputs in `out`: auto_depth.json (model, num_layers, tolerances, choices: one per strategy,
healed and metric: n, value, baseline, drop, tolerance, higher_is_better; greedy choices also
curve_end_n and at_curve_end where pruning.greedy_max_n cut the greedy path), provenance.json.

Example: {"model_name": "pre_ln", "pruning": "results/default/pruning/pre_ln",
"auto_depth": {"tolerances": {"val_loss": 0.25, "mean_acc": 0.05}}, "metric": "acc",
"out": "results/default/auto_depth/pre_ln"}
"""

from pathlib import Path

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "choose_depth")

    from depthlab.core.atomic_files import atomic_path, write_json
    from depthlab.core.provenance import Provenance
    from depthlab.stages.pruning.strategies import auto_depth_record, read_measurements

    folder = Path(spec["pruning"])
    provenance = Provenance(
        "pruning.auto_depth", config=spec, inputs=[folder / "sweep.csv", folder / "summary.json"]
    )
    sweep, summary = read_measurements(folder)
    tolerances = spec["auto_depth"].get("tolerances", {})
    record = auto_depth_record(sweep, summary, tolerances, spec["metric"])
    with atomic_path(Path(spec["out"]), is_dir=True) as tmp:
        write_json(tmp / "auto_depth.json", record)
        provenance.write(tmp / "provenance.json")
    for choice in record["choices"]:
        healed = " healed" if choice["healed"] else ""
        print(
            f"[{spec['model_name']}] {choice['strategy']}{healed} {choice['metric']} "
            f"(tolerance {choice['tolerance']:g}): n = {choice['n']}, drop {choice['drop']:.4g}"
        )


if __name__ == "__main__":
    main_guard(main)
