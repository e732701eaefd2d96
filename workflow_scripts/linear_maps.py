#!/usr/bin/env python
"""Cross-model linear maps (Csordás et al. 2025): an affine map from every layer state of a
source model to every layer state of a target model on the same tokens, in closed form.

With alignment positions both models read the same token ids (their tokenizers must be
identical: the config resolver compares those of models trained here and of local checkpoints,
the job those of hub models once downloaded) and token t is paired with token t; with word_ends
each model reads the text with its own tokenizer and the states are paired at the word ends both
tokenizations share (a deviation from the paper, for models of different families; auto picks
one by comparing the tokenizers). Documents of the texts are split by sha256 of their text into
fit / val / test; the ridge normal equations of every (source layer, target layer) pair are
accumulated in float64 over the fit tokens, one eigendecomposition per source layer serves every
target layer and every alpha, alpha is chosen per pair by the closed-form validation error,
and the mean relative error ||y_hat - y|| / ||y|| is measured on the test tokens. Memory stays
within max_memory_mb (target layers in blocks, the tokens streamed once per block). See
depthlab/stages/depth_use/linear_map_stage.py (the stage) and depthlab/stages/depth_use/linear_maps.py (the fit).

Writes into spec["out"] (atomically): relative_error.csv (pair, source_layer, target_layer,
source_depth, target_depth = layer / L, relative_error, centred_error, alpha), best_target.csv
(per source layer: the target layer of least error and its relative depth), summary.json,
provenance.json; summary.json names the alignment used and, per split ("streams"), the
documents, source and target tokens and pairs the maps were fitted on.

Spec keys (all required; null where marked):
  pair                      name of the pair (label)
  source_name, source_path  the source model's name and checkpoint (folder, hub id, pkg:)
  target_name, target_path  the same for the target model
  source_revision, target_revision  hub revision (commit, tag or branch) of each (null)
  out                       output folder (results/<run>/depth_use/linear_maps/<pair>)
  texts, text_field         {source: jsonl, path} (results/<run>/data/val.jsonl) or
                            {source: hf_dataset, name, config_name, split}; the text field
  add_special_tokens        documents with the tokenizer's template (hub models) or as the
                            training stream encoded them (models pretrained here); the source's
  target_add_special_tokens the same for the target model (word_ends: it reads its own tokens)
  alignment                 positions | word_ends | auto (depthlab/stages/depth_use/linear_maps.py)
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
  "add_special_tokens": false, "target_add_special_tokens": false, "alignment": "positions",
  "max_documents": 400,
  "max_length": 64, "batch_size": 32, "skip_first": 1, "val_fraction": 0.15,
  "test_fraction": 0.25, "alphas": [0.0, 1e-4, 1e-3, 1e-2, 1e-1], "max_memory_mb": 256,
  "error": "relative", "dtype": "float32", "device": "auto"}'
"""

import json

from depthlab.cli import main_guard, resolve_device, start_job


def main() -> None:
    _, spec = start_job(__doc__, "linear_maps")

    from depthlab.stages.depth_use.linear_map_stage import run

    summary = run(spec, device=resolve_device(spec["device"]))
    print(json.dumps({k: summary[k] for k in ("pair", "tokens", "blocks", "fit_seconds")}))


if __name__ == "__main__":
    main_guard(main)
