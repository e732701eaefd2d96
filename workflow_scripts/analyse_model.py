#!/usr/bin/env python
"""One streamed pass of one model over a text set: every hidden-state measure of the four papers.

Writes into the spec's `out` folder: measures.csv (tidy: model, text_set, measure, layer, n,
value, count), angular_distance_last.csv (the (L+1) x (L+1) matrix of d(x^i, x^j) on the last
real token), angular_distance_all.csv (with all_token_distance), summary.json (counts,
architecture, notes) and provenance.json. See depthlab/measures.py for the measures and
depthlab/adapter.py for the architectures and what a_l, m_l mean in each.

Spec (`analyse_model` job, named <text_set>/<model>): model_name, model_path (HF folder, hub id
or pkg:<package>/<folder>), dtype, revision, text_set, texts ({source: jsonl, path} or
{source: hf_dataset, name, config_name, split}), text_field, max_samples, max_tokens,
max_length, batch_size, logit_lens, logit_lens_stride, all_token_distance, add_special_tokens
(false: documents encoded as in the training stream; true: with the tokenizer's template),
device, out.

By hand: python workflow_scripts/analyse_model.py --config config/default.yaml --job val/lns
"""

import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared core

from depthlab.cli import main_guard, resolve_device, start_job


def main() -> None:
    _, spec = start_job(__doc__, "analyse_model")

    import pandas as pd
    from transformers.utils import logging as hf_logging

    from depthlab.adapter import adapt, load_model, load_tokenizer, resolve_model_path
    from depthlab.data import iter_texts
    from depthlab.io import atomic_path, write_dataframe, write_json
    from depthlab.measures import analyse
    from depthlab.provenance import Provenance
    from depthlab.residual_stream import iter_token_batches

    hf_logging.disable_progress_bar()
    device = resolve_device(spec["device"])
    texts = spec["texts"]
    inputs = [texts["path"]] if texts["source"] == "jsonl" else []
    if os.path.isdir(resolve_model_path(spec["model_path"])):
        inputs.append(resolve_model_path(spec["model_path"]))
    provenance = Provenance("analysis", config=spec, inputs=inputs)

    model = load_model(spec["model_path"], dtype=spec["dtype"], device=device,
                       revision=spec["revision"])
    tokenizer = load_tokenizer(spec["model_path"], revision=spec["revision"])
    adapter = adapt(model)
    documents = iter_texts(texts, spec["text_field"])
    # never past the context the model was trained for (RoPE/learned positions beyond it)
    context = getattr(model.config, "max_position_embeddings", None) or spec["max_length"]
    max_length = min(spec["max_length"], context)
    if max_length < spec["max_length"]:
        print(f"max_length {spec['max_length']} exceeds the model's context; using {max_length}",
              file=sys.stderr)
    batches = iter_token_batches(documents, tokenizer, max_length=max_length,
                                 batch_size=spec["batch_size"], max_samples=spec["max_samples"],
                                 max_tokens=spec["max_tokens"],
                                 add_special_tokens=spec["add_special_tokens"])
    start = time.perf_counter()
    result = analyse(adapter, batches, logit_lens=spec["logit_lens"],
                     all_token_distance=spec["all_token_distance"],
                     logit_lens_stride=spec["logit_lens_stride"])
    seconds = time.perf_counter() - start
    if result.samples < spec["max_samples"] and spec["max_tokens"] is None:
        print(f"note: max_samples is {spec['max_samples']} but the text set has only "
              f"{result.samples} usable documents; used {result.samples}", file=sys.stderr)

    summary = {
        "model": spec["model_name"],
        "text_set": spec["text_set"],
        "samples": result.samples,
        "samples_requested": spec["max_samples"],
        "tokens": result.tokens,
        "logit_lens": bool(spec["logit_lens"] and adapter.has_lm_head),
        "logit_lens_tokens": result.logit_lens_tokens,
        "all_token_distance": spec["all_token_distance"],
        "max_length": max_length,
        "pass_seconds": round(seconds, 3),
        "tokens_per_second": round(result.tokens / seconds, 1),
        "architecture": adapter.describe(),
        "notes": result.notes,
    }
    layers = [str(i) for i in range(result.num_layers + 1)]
    with atomic_path(spec["out"], is_dir=True) as out:
        write_dataframe(out / "measures.csv",
                        result.to_frame(model=spec["model_name"], text_set=spec["text_set"]))
        write_dataframe(out / "angular_distance_last.csv",
                        pd.DataFrame(result.angular_distance_last, columns=layers)
                        .rename_axis("layer").reset_index())
        if result.angular_distance_all is not None:
            write_dataframe(out / "angular_distance_all.csv",
                            pd.DataFrame(result.angular_distance_all, columns=layers)
                            .rename_axis("layer").reset_index())
        write_json(out / "summary.json", summary)
        provenance.extra["summary"] = summary
        provenance.write(out / "provenance.json")
    print(json.dumps({k: summary[k] for k in ("model", "samples", "tokens", "pass_seconds",
                                              "tokens_per_second", "notes")}))


if __name__ == "__main__":
    main_guard(main)
