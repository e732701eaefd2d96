#!/usr/bin/env python
"""One streamed pass of one model over a text set: every hidden-state measure of the four papers.

Writes into --out: measures.csv (tidy: model, text_set, measure, layer, n, value, count),
angular_distance_last.csv (the (L+1) x (L+1) matrix of d(x^i, x^j) on the last real token),
angular_distance_all.csv (with --all-token-distance), summary.json (counts, architecture, notes)
and provenance.json. See depthlab/measures.py for the measures and depthlab/adapter.py for the
architectures and what a_l, m_l mean in each.

Texts come from a local JSON-lines file (--texts-jsonl, e.g. results/<run>/data/val.jsonl) or a
`datasets` dataset (--dataset, streamed); they are tokenised with the model's own tokenizer.
"""

import argparse
import json
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared core


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True,
                        help="HF checkpoint folder, hub id, or pkg:<package>/<folder>")
    parser.add_argument("--model-name", required=True, help="name recorded in the outputs")
    parser.add_argument("--revision", default=None, help="hub revision (hub models only)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda")
    texts = parser.add_mutually_exclusive_group(required=True)
    texts.add_argument("--texts-jsonl", help="JSON-lines file, one document per line")
    texts.add_argument("--dataset", help="`datasets` name, streamed (e.g. allenai/c4)")
    parser.add_argument("--dataset-config", default=None)
    parser.add_argument("--split", default="validation")
    parser.add_argument("--text-field", default="text")
    parser.add_argument("--text-set", default="texts", help="name of the text set (a label)")
    parser.add_argument("--max-samples", type=int, default=256, help="documents analysed")
    parser.add_argument("--max-tokens", type=int, default=None, help="stop before this many tokens")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per document")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--logit-lens", action=argparse.BooleanOptionalAction, default=True,
                        help="logit lens (one vocabulary projection per layer)")
    parser.add_argument("--logit-lens-stride", type=int, default=1,
                        help="logit lens on every k-th real token (1: all)")
    parser.add_argument("--all-token-distance", action=argparse.BooleanOptionalAction,
                        default=False, help="angular-distance matrix over all tokens as well")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args()
    for key in ("max_samples", "max_length", "batch_size", "threads", "logit_lens_stride"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")

    import torch
    from transformers.utils import logging as hf_logging

    from depthlab.adapter import adapt, load_model, load_tokenizer, resolve_model_path
    from depthlab.data import iter_dataset_texts, iter_jsonl_texts
    from depthlab.io import atomic_path, write_dataframe, write_json
    from depthlab.measures import analyse
    from depthlab.provenance import Provenance
    from depthlab.residual_stream import iter_token_batches

    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available()
                                                          else "cpu")
    inputs = [args.texts_jsonl] if args.texts_jsonl else []
    if os.path.isdir(resolve_model_path(args.model)):
        inputs.append(resolve_model_path(args.model))
    provenance = Provenance("analysis", config=vars(args), inputs=inputs)

    model = load_model(args.model, dtype=args.dtype, device=device, revision=args.revision)
    tokenizer = load_tokenizer(args.model, revision=args.revision)
    adapter = adapt(model)
    if args.texts_jsonl:
        documents = iter_jsonl_texts(args.texts_jsonl, args.text_field, "--texts-jsonl")
    else:
        documents = iter_dataset_texts(args.dataset, args.dataset_config, args.split,
                                       args.text_field, "--dataset", streaming=True)
    # never past the context the model was trained for (RoPE/learned positions beyond it)
    context = getattr(model.config, "max_position_embeddings", None) or args.max_length
    max_length = min(args.max_length, context)
    batches = iter_token_batches(documents, tokenizer, max_length=max_length,
                                 batch_size=args.batch_size, max_samples=args.max_samples,
                                 max_tokens=args.max_tokens)
    start = time.perf_counter()
    if max_length < args.max_length:
        print(f"max_length {args.max_length} exceeds the model's context; using {max_length}")
    result = analyse(adapter, batches, logit_lens=args.logit_lens,
                     all_token_distance=args.all_token_distance,
                     logit_lens_stride=args.logit_lens_stride)
    seconds = time.perf_counter() - start

    import pandas as pd

    summary = {
        "model": args.model_name,
        "text_set": args.text_set,
        "samples": result.samples,
        "tokens": result.tokens,
        "logit_lens": bool(args.logit_lens and adapter.has_lm_head),
        "logit_lens_tokens": result.logit_lens_tokens,
        "all_token_distance": args.all_token_distance,
        "max_length": max_length,
        "pass_seconds": round(seconds, 3),
        "tokens_per_second": round(result.tokens / seconds, 1),
        "architecture": adapter.describe(),
        "notes": result.notes,
    }
    layers = [str(i) for i in range(result.num_layers + 1)]
    with atomic_path(args.out, is_dir=True) as out:
        write_dataframe(out / "measures.csv",
                        result.to_frame(model=args.model_name, text_set=args.text_set))
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
    main()
