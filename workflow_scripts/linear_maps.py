#!/usr/bin/env python
"""Cross-model linear maps (Csordás et al. 2025): an affine map from every layer state of a
source model to every layer state of a target model on the same tokens, in closed form.

Both models read the same token ids (their tokenizers must be identical; checked). Documents of
the texts are split by sha256 of their text into fit / val / test; the ridge normal equations of
every (source layer, target layer) pair are accumulated in float64 over the fit tokens, one
eigendecomposition per source layer serves every target layer and every alpha, alpha is chosen
per pair by the closed-form validation error, and the mean relative error ||y_hat - y|| / ||y||
is measured on the test tokens. Memory stays within max_memory_mb (target layers in blocks, the
tokens streamed once per block). See depthlab/linear_maps.py.

Writes into spec["out"] (atomically): relative_error.csv (pair, source_layer, target_layer,
source_depth, target_depth = layer / L, relative_error, centred_error, alpha), best_target.csv
(per source layer: the target layer of least error and its relative depth), summary.json,
provenance.json.

Spec keys (all required; null where marked):
  pair                      name of the pair (label)
  source_name, source_path  the source model's name and checkpoint (folder, hub id, pkg:)
  target_name, target_path  the same for the target model
  source_revision, target_revision  hub revision (commit, tag or branch) of each (null)
  out                       output folder (results/<run>/depth_use/linear_maps/<pair>)
  texts, text_field         {source: jsonl, path} (results/<run>/data/val.jsonl) or
                            {source: hf_dataset, name, config_name, split}; the text field
  add_special_tokens        documents with the tokenizer's template (hub models) or as the
                            training stream encoded them (models pretrained here)
  max_documents             null or the documents read
  max_length, batch_size    tokens per document, documents per pass
  skip_first                first real tokens of each document left out (attention sinks)
  val_fraction, test_fraction   document fractions of the validation and test splits
  alphas                    ridge strengths (lambda = alpha * trace(Sxx) / d); 0 = least squares
  max_memory_mb             bound on the accumulators
  error                     relative | centred: which error picks the best target layer and
                            fills the heatmap (both are written): relative = mean
                            ||y_hat - y|| / ||y|| (the paper's); centred = mean
                            ||y_hat - y|| / ||y - mean(y)|| (a common mean direction, which
                            dominates ||y|| in the last layers of small models, predicts nothing)
  dtype, device             model dtype; auto | cpu | cuda

Example (default run): --spec '{"pair": "l4_to_l16_m96",
  "source_name": "depth_width_l4_m96",
  "source_path": "results/default/models/depth_width_l4_m96",
  "target_name": "depth_width_l16_m96",
  "target_path": "results/default/models/depth_width_l16_m96",
  "source_revision": null, "target_revision": null,
  "out": "results/default/depth_use/linear_maps/l4_to_l16_m96",
  "texts": {"source": "jsonl", "path": "results/default/data/val.jsonl"}, "text_field": "text",
  "max_documents": 400,
  "max_length": 64, "batch_size": 32, "skip_first": 1, "val_fraction": 0.15,
  "test_fraction": 0.25, "alphas": [0.0, 1e-4, 1e-3, 1e-2, 1e-1], "max_memory_mb": 256,
  "error": "relative", "dtype": "float32", "device": "auto"}'
"""

import json
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin

from depthlab.cli import UserError, main_guard, resolve_device, start_job

REQUIRED = ("pair", "source_name", "source_path", "target_name", "target_path",
            "source_revision", "target_revision",
            "out", "texts",
            "text_field", "max_documents", "max_length", "batch_size", "skip_first",
            "val_fraction", "test_fraction", "alphas", "max_memory_mb", "error", "dtype",
            "device")


def main() -> None:
    _, spec = start_job(__doc__, "linear_maps", REQUIRED)

    import itertools

    from transformers.utils import logging as hf_logging

    from depthlab.adapter import adapt, load_model, load_tokenizer, resolve_model_path
    from depthlab.data import iter_texts
    from depthlab.io import atomic_path, write_dataframe, write_json
    from depthlab.linear_maps import (check_same_tokenizer, fit_linear_maps, split_of,
                                      validate_linear_map_settings)
    from depthlab.provenance import Provenance
    from depthlab.residual_stream import iter_token_batches

    hf_logging.disable_progress_bar()
    try:
        validate_linear_map_settings(spec, where="spec")
        check_same_tokenizer(spec["source_path"], spec["target_path"], where="spec")
    except ValueError as error:
        raise UserError(str(error)) from None
    device = resolve_device(spec["device"])
    texts = spec["texts"]
    if not isinstance(texts, dict) or texts.get("source") not in ("jsonl", "hf_dataset"):
        raise UserError("spec.texts: {source: jsonl, path} or {source: hf_dataset, name, "
                        "config_name, split}")
    inputs = ([texts["path"]] if texts["source"] == "jsonl" else []) + \
        [resolve_model_path(spec[k]) for k in ("source_path", "target_path")
         if os.path.isdir(resolve_model_path(spec[k]))]
    provenance = Provenance("depth_use.linear_maps", config=spec, inputs=inputs)
    source = adapt(load_model(spec["source_path"], dtype=spec["dtype"], device=device,
                              revision=spec["source_revision"]))
    target = adapt(load_model(spec["target_path"], dtype=spec["dtype"], device=device,
                              revision=spec["target_revision"]))
    tokenizer = load_tokenizer(spec["source_path"], revision=spec["source_revision"])
    contexts = [getattr(m.model.config, "max_position_embeddings", None) or spec["max_length"]
                for m in (source, target)]
    max_length = min([spec["max_length"], *contexts])

    def batches_by_split(split):
        documents = iter_texts(texts, spec["text_field"])
        documents = itertools.islice(documents, spec["max_documents"])
        chosen = (text for text in documents
                  if split_of(text, spec["val_fraction"], spec["test_fraction"]) == split)
        return iter_token_batches(chosen, tokenizer, max_length=max_length,
                                  batch_size=spec["batch_size"],
                                  add_special_tokens=spec["add_special_tokens"])

    clock = time.perf_counter()
    result = fit_linear_maps(source, target, batches_by_split, alphas=spec["alphas"],
                             max_memory_mb=spec["max_memory_mb"], skip_first=spec["skip_first"])
    seconds = time.perf_counter() - clock
    frame = result.to_frame(pair=spec["pair"])
    centred = spec["error"] == "centred"
    best_frame = result.best_target_frame(centred, pair=spec["pair"])
    summary = {"pair": spec["pair"], "error": spec["error"], "source": spec["source_name"],
               "target": spec["target_name"], "source_layers": result.source_layers - 1,
               "target_layers": result.target_layers - 1, "tokens": result.tokens,
               "blocks": result.blocks, "alphas": result.alphas, "max_length": max_length,
               "fit_seconds": round(seconds, 3),
               "alpha_chosen_counts": {str(a): int((result.alpha == a).sum())
                                       for a in result.alphas},
               "mean_abs_depth_offset_of_best_target":
                   result.depth_offset_of_best_target(centred)}
    with atomic_path(spec["out"], is_dir=True) as out:
        write_dataframe(out / "relative_error.csv", frame)
        write_dataframe(out / "best_target.csv", best_frame)
        write_json(out / "summary.json", summary)
        provenance.extra["summary"] = summary
        provenance.write(out / "provenance.json")
    print(json.dumps({k: summary[k] for k in ("pair", "tokens", "blocks", "fit_seconds")}))
    print(best_frame.to_string(index=False))


if __name__ == "__main__":
    main_guard(main)
