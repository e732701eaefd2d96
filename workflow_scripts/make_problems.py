#!/usr/bin/env python
"""Build the graded-difficulty problem set of the depth-use stage.

With a synthetic family (generated offline) spec["out"] is a folder in exactly the data stage's
format (tokenizer/, train.bin, val.bin, val.jsonl, meta.json, provenance.json; see
depthlab/data/prepare.py), so the `pretrain` rule trains the problem model on it unchanged, plus
problems.jsonl: the evaluation problems (family, level, prompt, answer) whose per-level accuracy
and depth score skip_interventions.py measures. A set of dataset families only (math, mquake:
MATH levels and MQuAKE hop counts, for hub models) writes problems.jsonl, meta.json and
provenance.json; reading a hub dataset needs the network (or the datasets cache). See
depthlab/data/problem_sets.py and depthlab/data/benchmark_problems.py for the families.

Spec keys (all required unless marked):
  out              output folder (results/<run>/depth_use/problems)
  seed             seed of the generator (relation tables, problems) and of the dataset draws
  families         {family: settings}; family one of arithmetic | hops | lookup | math | mquake;
                   settings: levels (list of ints >= 1; math 1..5, mquake hop counts 2..4);
                   hops: relations (1..8); lookup: table_pairs (>= the highest level, <= 15);
                   math, mquake: dataset ({source: hf_dataset, name, config_name, split,
                   revision} or {source: jsonl, path}); math: max_new_tokens (optional, default
                   512: the budget of the greedy solution its accuracy grades)
  train_problems   problems in train.bin (documents, levels mixed); optional without a
                   synthetic family
  val_problems     problems in val.bin / val.jsonl (the pretraining validation loss); optional
                   without a synthetic family
  eval_per_level   evaluation problems per (family, level) in problems.jsonl (a dataset level
                   with fewer records gives all of them)
  level_weights    (optional, default uniform) uniform | level (level k drawn with weight k)

Example: --spec '{"out": "results/default/depth_use/problems", "seed": 0,
  "families": {"hops": {"levels": [1, 2, 3, 4], "relations": 2}}, "train_problems": 30000,
  "val_problems": 500, "eval_per_level": 100, "level_weights": "uniform"}'
  Dataset families: --spec '{"out": "results/paper/depth_use/problems", "seed": 0,
  "families": {"mquake": {"levels": [2, 3, 4], "dataset": {"source": "jsonl",
  "path": "MQuAKE-CF-3k.json"}}}, "eval_per_level": 20}'
"""

import json

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "make_problems")

    from depthlab.data.problem_sets import run

    meta = run(spec)
    print(
        json.dumps(
            {
                "out": spec["out"],
                "splits": meta.get("splits", {}),
                "problems": meta["problems"]["count"],
            }
        )
    )


if __name__ == "__main__":
    main_guard(main)
