#!/usr/bin/env python
"""Layer-skip interventions of one model (Csordás et al. 2025), and its depth score on problems
of graded difficulty.

1. Effect matrices: over the texts (e.g. results/<run>/data/val.jsonl), for every variant
   (<kind>_<scope>: kind layer | attention | mlp, scope all | future; see
   depthlab/interventions.py) and every skipped layer s, the relative change of every later
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
problem and skipped layer); provenance.json.

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
  depth_score_variant   an _all variant (e.g. layer_all)
  prepend_bos           prompts start with the tokenizer's bos token (the problem model: eos =
                        the document boundary it was trained after)
  bootstrap             {resamples, confidence}
  dtype, device         float32 | bfloat16 | float16; auto | cpu | cuda

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
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin

from depthlab.cli import UserError, main_guard, resolve_device, start_job

REQUIRED = ("model_name", "model_path", "revision", "out", "texts", "text_field", "text_set",
            "max_samples", "max_length", "batch_size", "variants", "layers", "no_skip_front", "future_positions",
            "future_min_position", "max_rows", "seed", "problems", "depth_score_variant",
            "prepend_bos", "bootstrap", "dtype", "device")


def main() -> None:
    _, spec = start_job(__doc__, "skip_interventions", REQUIRED)

    from transformers.utils import logging as hf_logging

    from depthlab.adapter import adapt, load_model, load_tokenizer, resolve_model_path
    from depthlab.data import iter_texts
    from depthlab.interventions import (SkipSettings, skip_effects,
                                        validate_intervention_settings)
    from depthlab.io import atomic_path, write_dataframe, write_json
    from depthlab.problem_scoring import depth_score_tables
    from depthlab.problems import read_problems
    from depthlab.provenance import Provenance
    from depthlab.residual_stream import iter_token_batches

    hf_logging.disable_progress_bar()
    try:
        validate_intervention_settings(spec, where="spec")
    except ValueError as error:
        raise UserError(str(error)) from None
    settings = SkipSettings.from_spec(spec, where="spec")
    device = resolve_device(spec["device"])
    texts = spec["texts"]
    if not isinstance(texts, dict) or texts.get("source") not in ("jsonl", "hf_dataset"):
        raise UserError("spec.texts: {source: jsonl, path} or {source: hf_dataset, name, "
                        "config_name, split}")
    inputs = ([texts["path"]] if texts["source"] == "jsonl" else []) + \
        ([spec["problems"]] if spec["problems"] else [])
    model_path = resolve_model_path(spec["model_path"])
    if os.path.isdir(model_path):
        inputs.append(model_path)
    provenance = Provenance("depth_use.skip", config=spec, inputs=inputs, seed=spec["seed"])

    model = load_model(spec["model_path"], dtype=spec["dtype"], device=device,
                       revision=spec["revision"])
    tokenizer = load_tokenizer(spec["model_path"], revision=spec["revision"])
    adapter = adapt(model)
    try:
        settings.skipped_layers(adapter.num_layers)
    except ValueError as error:
        raise UserError(f"spec.{error}") from None
    if spec["problems"] and not adapter.has_lm_head:
        raise UserError(f"spec.problems: {spec['model_name']} has no LM head, so it has no "
                        f"output effect to score")
    if spec["problems"] and spec["layers"] is not None:
        raise UserError("spec.layers: the depth score needs every layer (layers: null)")
    context = getattr(model.config, "max_position_embeddings", None) or spec["max_length"]
    max_length = min(spec["max_length"], context)

    clock = time.perf_counter()
    documents = iter_texts(texts, spec["text_field"])
    batches = iter_token_batches(documents, tokenizer, max_length=max_length,
                                 batch_size=spec["batch_size"], max_samples=spec["max_samples"],
                                 add_special_tokens=spec["add_special_tokens"])
    effects = skip_effects(adapter, batches, settings)
    effect_seconds = time.perf_counter() - clock
    summary = {"model": spec["model_name"], "text_set": spec["text_set"],
               "prompts": effects.prompts, "rows": effects.rows, "max_length": max_length,
               "variants": effects.variants, "skipped_layers": effects.skipped_layers,
               "tokens_measured": {v: int(effects.counts[v].sum()) for v in effects.variants},
               "effect_seconds": round(effect_seconds, 3),
               "architecture": adapter.describe(), "notes": effects.notes}

    tables = {}
    if spec["problems"]:
        clock = time.perf_counter()
        problems = read_problems(spec["problems"], "spec.problems")
        tables = depth_score_tables(
            adapter, tokenizer, problems, settings, spec["depth_score_variant"],
            batch_size=spec["batch_size"], max_length=context,
            prepend_bos=bool(spec["prepend_bos"]), bootstrap=spec["bootstrap"], seed=spec["seed"])
        summary.update({
            "problems": len(problems), "depth_score_variant": spec["depth_score_variant"],
            "problem_seconds": round(time.perf_counter() - clock, 3),
            "accuracy": tables["accuracy"].to_dict(orient="records"),
            "depth_score": tables["depth_score"].to_dict(orient="records")})

    with atomic_path(spec["out"], is_dir=True) as out:
        write_dataframe(out / "effects.csv",
                        effects.to_frame(model=spec["model_name"], text_set=spec["text_set"]))
        for name, frame in tables.items():
            frame.insert(0, "model", spec["model_name"])
            write_dataframe(out / f"{name}.csv", frame)
        write_json(out / "summary.json", summary)
        provenance.extra["summary"] = {k: summary[k] for k in summary if k != "architecture"}
        provenance.write(out / "provenance.json")
    print(json.dumps({k: summary.get(k) for k in ("model", "prompts", "rows", "effect_seconds",
                                                  "problem_seconds")}))
    if "accuracy" in tables:
        print(tables["accuracy"].to_string(index=False))
        print(tables["depth_score"].to_string(index=False))


if __name__ == "__main__":
    main_guard(main)
