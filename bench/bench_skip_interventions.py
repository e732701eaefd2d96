#!/usr/bin/env python
"""Benchmark: batched layer-skip interventions (depthlab.stages.depth_use.interventions.skip_effects: many prompts
per pass, layers before the skipped one never recomputed, all rows stacked layer by layer)
against the reference code's loop (one prompt per full forward pass: one clean pass per prompt,
then one intervened pass per skipped layer and sampled position t). Both give the same effect
matrices; the script prints the largest difference and the time ratio (goal >= 5x).

The reference loop is the reference code's: the model's own forward per pass, so logits and
their softmax at every position; the clean pass once per prompt.

By default two cases, the two skip jobs of the default config:
  problems  the depth-score model (results/default/models/depth_problems, 4 x 64) on 64 problem
            prompts of at most 16 tokens, its four variants: short prompts, where one pass per
            prompt is dominated by per-call overhead that batching removes;
  sweep     the deepest sweep model (depth_width_l16_m96) on 16 texts of at most 64 tokens,
            layer_all and layer_future: on one CPU thread this is arithmetic-bound, and reusing
            the layers before the skipped one saves at most L^2 / (L(L-1)/2) = 2L/(L-1) of the
            layer work (the output softmax, the same in both loops, dilutes it further).
A case's model falls back to a random-weight pre-LN model of its shape (vocabulary 4096) and
random token ids when the default run's outputs are absent.

    python bench/bench_skip_interventions.py [--case problems sweep] [--threads 1]
        [--repeats 2] [--device cuda]
    python bench/bench_skip_interventions.py --random 24x1024 --prompts 32 --length 128 \
        [--model DIR] [--texts val.jsonl] [--variants ...] [--batch-size 16] [--device cuda]

--random LxW or --model benchmark one custom case instead (e.g. on a GPU, where batching, not
arithmetic, is what the reference loop lacks). A --model or --texts path that does not exist is
an error, never a fall-back to a random model or random tokens; --texts needs --model (a random
model has no tokenizer).
"""

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUN = ROOT / "results" / "default"


CASES = {
    "problems": dict(
        model=DEFAULT_RUN / "models" / "depth_problems",
        random="4x64",
        texts=DEFAULT_RUN / "depth_use" / "problems" / "val.jsonl",
        prompts=64,
        length=16,
        batch_size=64,
        max_rows=512,
        future_min_position=3,
        variants=["layer_all", "layer_future", "attention_all", "mlp_all"],
    ),
    "sweep": dict(
        model=DEFAULT_RUN / "models" / "depth_width_l16_m96",
        random="16x96",
        texts=DEFAULT_RUN / "data" / "val.jsonl",
        prompts=16,
        length=64,
        batch_size=16,
        max_rows=256,
        future_min_position=8,
        variants=["layer_all", "layer_future"],
    ),
}


def load(args):
    import torch
    from depthlab.models.architectures import adapt, load_model, load_tokenizer

    model_dir = args.model
    if model_dir and Path(model_dir).is_dir() and not args.random:
        model, tokenizer = load_model(str(model_dir)), load_tokenizer(str(model_dir))
        name = Path(model_dir).name
    else:
        from depthlab.models.decoders import build_model, make_config

        layers, width = (int(v) for v in (args.random or "16x96").split("x"))
        config = make_config(
            {
                "hidden_size": width,
                "num_layers": layers,
                "num_heads": max(1, width // 32),
                "intermediate_size": 8 * width // 3,
            },
            "pre_ln",
            vocab_size=4096,
            max_positions=args.length,
        )
        model, tokenizer = build_model(config, 0).eval(), None
        name = f"random {layers}x{width} pre_ln"
    texts = args.texts
    if tokenizer is not None and texts and Path(texts).is_file():
        from depthlab.data.prepare import iter_jsonl_texts

        rows = []
        for text in iter_jsonl_texts(texts):
            ids = tokenizer(text, truncation=True, max_length=args.length)["input_ids"]
            if len(ids) > args.future_min_position + 1:  # room for a future position t
                rows.append(ids)
            if len(rows) == args.prompts:
                break
    else:
        generator = torch.Generator().manual_seed(0)
        rows = [
            torch.randint(
                2, model.config.vocab_size, (args.length - (i % 5),), generator=generator
            ).tolist()
            for i in range(args.prompts)
        ]
    return adapt(model.to(args.device)), rows, name


def batched(adapter, rows, settings, batch_size):
    import torch
    from depthlab.stages.depth_use.interventions import skip_effects

    def batches():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            width = max(len(r) for r in chunk)
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for i, r in enumerate(chunk):
                ids[i, : len(r)] = torch.tensor(r)
                mask[i, : len(r)] = 1
            yield {"input_ids": ids, "attention_mask": mask}

    return skip_effects(adapter, batches(), settings)


def one_prompt_per_pass(adapter, rows, settings, device):
    import numpy as np
    import torch
    from depthlab.stages.depth_use.interventions import future_positions
    from depthlab.stages.depth_use.reference_loop import (
        reference_clean_states,
        reference_skip_effects,
    )

    L = adapter.num_layers
    out = {}
    for variant in settings.variants:
        umax, omax = np.zeros((L, L)), np.zeros(L)
        usum, osum, count = np.zeros((L, L)), np.zeros(L), np.zeros(L)
        for prompt_id, r in enumerate(rows):
            ids = torch.tensor(r, device=device)
            clean = reference_clean_states(adapter, ids)  # once per prompt, as the reference
            ts = (
                [None]
                if variant.endswith("_all")
                else future_positions(len(r), prompt_id, settings)
            )
            for s in range(L):
                for t in ts:
                    change, output = reference_skip_effects(
                        adapter, ids, variant, s, t, settings.no_skip_front, clean=clean
                    )
                    umax[s] = np.maximum(umax[s], change.max(axis=1))
                    usum[s] += change.sum(axis=1)
                    omax[s] = max(omax[s], output.max())
                    osum[s] += output.sum()
                    count[s] += change.shape[1]
        for s in range(L):
            umax[s, :s] = usum[s, :s] = 0.0
        out[variant] = (umax, usum / count[:, None], omax, osum / count)
    return out


def run_case(args, label):
    """Time both loops on one case (alternating, best of `repeats`); one result line."""
    import numpy as np
    from depthlab.stages.depth_use.interventions import SkipSettings

    adapter, rows, name = load(args)
    settings = SkipSettings(
        variants=tuple(args.variants),
        no_skip_front=1,
        future_positions=args.future_positions,
        future_min_position=args.future_min_position,
        max_rows=args.max_rows,
        seed=0,
    )
    best = {"batched": float("inf"), "one_prompt_per_pass": float("inf")}
    for _ in range(args.repeats):  # alternate, keep the best (shared machine)
        start = time.perf_counter()
        fast = batched(adapter, rows, settings, args.batch_size)
        best["batched"] = min(best["batched"], time.perf_counter() - start)
        start = time.perf_counter()
        slow = one_prompt_per_pass(adapter, rows, settings, args.device)
        best["one_prompt_per_pass"] = min(best["one_prompt_per_pass"], time.perf_counter() - start)
    diff = 0.0
    for variant in settings.variants:
        umax, umean, omax, omean = slow[variant]
        for a, b in (
            (fast.update_max[variant], umax),
            (fast.update_mean[variant], umean),
            (fast.output_max[variant], omax),
            (fast.output_mean[variant], omean),
        ):
            diff = max(diff, float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-3))))
    tokens = sum(len(r) for r in rows)
    speedup = best["one_prompt_per_pass"] / best["batched"]
    print(
        f"[{label}] model: {name}, {adapter.num_layers} layers; {len(rows)} prompts, {tokens} "
        f"tokens; variants {', '.join(settings.variants)}; device {args.device}, "
        f"{args.threads} thread(s); best of {args.repeats}"
    )
    print(
        f"[{label}] batched (batch {args.batch_size}, max_rows {args.max_rows}): "
        f"{best['batched']:.2f} s;  one prompt per pass: {best['one_prompt_per_pass']:.2f} s;  "
        f"speed-up x{speedup:.1f} (goal >= 5)"
    )
    print(f"[{label}] largest relative difference of the effects (float32): {diff:.2e}")
    return {
        "case": label,
        "model": name,
        "batched_s": round(best["batched"], 3),
        "one_prompt_per_pass_s": round(best["one_prompt_per_pass"], 3),
        "speedup": round(speedup, 2),
        "max_relative_difference": diff,
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--model")
    parser.add_argument(
        "--random",
        metavar="LAYERSxWIDTH",
        help="benchmark a random-weight pre-LN model of this size",
    )
    parser.add_argument("--texts")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-rows", type=int, default=256)
    parser.add_argument("--variants", nargs="+", default=["layer_all", "layer_future"])
    parser.add_argument("--future-positions", type=int, default=2)
    parser.add_argument("--future-min-position", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    # a given path must exist: a typo would otherwise benchmark a random model without a word
    if args.model and args.random:
        parser.error("--model and --random: one custom case, give one of them")
    if args.model and not Path(args.model).is_dir():
        parser.error(f"--model: {args.model} is not a model folder")
    if args.texts and not args.model:
        parser.error("--texts needs --model (a random model reads random token ids)")
    if args.texts and not Path(args.texts).is_file():
        parser.error(f"--texts: {args.texts} is not a file")

    import torch

    torch.set_num_threads(args.threads)
    if args.model or args.random:
        results = [run_case(args, "custom")]
    else:
        results = []
        for label in args.case:
            case = argparse.Namespace(**{**vars(args), **CASES[label]})
            if Path(case.model).is_dir():  # the default run's model; else a random one
                case.random = None
            else:
                case.model = None
            results.append(run_case(case, label))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
