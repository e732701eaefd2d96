#!/usr/bin/env python
"""Layer-skip interventions of one model (Csordás et al. 2025), and its depth score on problems
of graded difficulty.

1. Effect matrices: over the texts (e.g. results/<run>/data/val.jsonl), for every variant
   (<kind>_<scope>: kind layer | attention | mlp, scope all | future; see
   depthlab/stages/depth_use/interventions.py) and every skipped layer s, the relative change of every later
   layer's update ||D_l - D'_l|| / ||D_l|| and the output change ||p - p'||_2, max and mean over
   positions and prompts. Batched: many prompts per pass, the layers before s never recomputed.
2. With spec["problems"] (a problems.jsonl: {family, level, prompt, answer} per line): greedy
   accuracy per (family, level), then the per-layer output effect of `depth_score_variant` at
   the answer positions, its depth score sum_l l e_l / sum_l e_l per level with a bootstrap
   interval over problems.

Writes into spec["out"] (atomically): effects.csv (model, text_set, variant, skipped, layer,
measure [update | output; output rows have layer = L], max, mean, count), summary.json, and with
problems: accuracy.csv, depth_score.csv (family, level, prompts, depth_score,
depth_score_normalised = score / (L - 1), ci_low, ci_high), problem_effects.csv (one row per
problem and skipped layer), completions.csv (boxed-graded problems: the greedy solutions);
provenance.json. The stage is depthlab/stages/depth_use/skip_stage.py; the problem scoring
depthlab/stages/depth_use/problem_scoring.py.

Spec keys (all required; null where marked):
  model_name, model_path, revision   the name recorded; checkpoint folder, hub id or
                        pkg:<package>/<folder>; hub revision (null)
  out                   output folder (results/<run>/depth_use/skip/<model>)
  texts                 {source: jsonl, path} or {source: hf_dataset, name, config_name, split}
                        (as analyse_model); text_field: the text field
  add_special_tokens    documents with the tokenizer's template (hub models) or as the training
                        stream encoded them (models pretrained here)
  text_set              label of the text set
  max_samples, max_length, batch_size   documents, tokens per document, prompts per pass
  variants              list of <kind>_<scope>
  layers                null (every layer) or the skipped layer indices
  no_skip_front         first real tokens never intervened on (1: the BOS / attention sink)
  future_positions      sampled positions t per prompt (future scope)
  future_min_position   smallest t
  max_rows              stacked intervention rows per forward (memory bound)
  seed                  seed of the sampled t
  problems              null or a problems.jsonl
  problem_families      (optional) only these families of it (depth_use.depth_score.families)
  depth_score_variant   an _all variant (e.g. layer_all)
  prepend_bos           prompts start with the tokenizer's bos token (the problem model: eos =
                        the document boundary it was trained after)
  bootstrap             {resamples, confidence}
  dtype, device         auto | float32 | bfloat16 | float16; auto | cpu | cuda

Example (default run): --spec '{"model_name": "depth_problems",
  "model_path": "results/default/models/depth_problems", "revision": null,
  "out": "results/default/depth_use/skip/depth_problems",
  "texts": {"source": "jsonl", "path": "results/default/depth_use/problems/val.jsonl"},
  "text_field": "text",
  "text_set": "problems_val", "max_samples": 64, "max_length": 16, "batch_size": 64,
  "variants": ["layer_all", "layer_future", "attention_all", "mlp_all"], "layers": null,
  "no_skip_front": 1, "future_positions": 2, "future_min_position": 3, "max_rows": 512,
  "seed": 0, "problems": "results/default/depth_use/problems/problems.jsonl",
  "depth_score_variant": "layer_all", "prepend_bos": true,
  "bootstrap": {"resamples": 1000, "confidence": 0.95}, "dtype": "float32", "device": "auto"}'
"""

import json

from depthlab.cli import main_guard, resolve_device, start_job


def main() -> None:
    _, spec = start_job(__doc__, "skip_interventions")

    from depthlab.stages.depth_use.skip_stage import run

    summary = run(spec, device=resolve_device(spec["device"]))
    print(
        json.dumps(
            {
                k: summary.get(k)
                for k in ("model", "prompts", "rows", "effect_seconds", "problem_seconds")
            }
        )
    )


if __name__ == "__main__":
    main_guard(main)
