#!/usr/bin/env python
"""Benchmark of the analysis pass (depthlab.stages.analysis.measures.analyse), measured side by side:

1. wall time of the streamed pass with the logit lens off, on (every token) and on with a
   stride, against one plain forward pass over the same batches: the causal LM's own forward
   (logits for every token, what a user would run) and the bare backbone forward;
2. memory growth during the pass (sampled RSS of a fresh process) at 10k and at 100k tokens,
   beside a control that stores the hidden states, to show the measurement would see growth.

Timings alternate the variants and keep the best of --repeats, since the machine is shared.
Default model: the default suite's 12 x 128 pre-LN toy (random weights, vocab 4096).

    python bench/bench_analysis.py [--threads 1] [--tokens 20000] [--model DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import psutil

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def build_model(model_dir):
    import torch

    if model_dir:
        from depthlab.models.architectures import load_model

        return load_model(model_dir)
    from depthlab.models.decoders import build_model as build
    from depthlab.models.decoders import make_config

    config = make_config(
        {"hidden_size": 128, "num_layers": 12, "num_heads": 4, "intermediate_size": 352},
        "pre_ln",
        vocab_size=4096,
        max_positions=64,
    )
    return build(config, seed=0).to(torch.float32).eval()


def token_batches(tokens, seq_len, batch_size, vocab, seed=0):
    """Random token batches with ragged right padding (a quarter of each row is padding on
    average), `tokens` real tokens in all."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    batches, total = [], 0
    while total < tokens:
        lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=generator)
        ids = torch.randint(2, vocab, (batch_size, seq_len), generator=generator)
        mask = (torch.arange(seq_len) < lengths[:, None]).long()
        batches.append({"input_ids": ids * mask, "attention_mask": mask})
        total += int(mask.sum())
    return batches


def time_variants(model, batches, repeats):
    import torch
    from depthlab.models.architectures import adapt
    from depthlab.stages.analysis.measures import analyse

    adapter = adapt(model)

    def plain_forward():
        with torch.inference_mode():
            for batch in batches:
                model(**batch)

    def backbone_forward():
        with torch.inference_mode():
            for batch in batches:
                adapter.backbone(**batch)

    variants = {
        "plain_forward_causal_lm": plain_forward,
        "plain_forward_backbone": backbone_forward,
        "pass_logit_lens_off": lambda: analyse(adapter, batches, logit_lens=False),
        "pass_logit_lens_on": lambda: analyse(adapter, batches, logit_lens=True),
        "pass_logit_lens_stride8": lambda: analyse(
            adapter, batches, logit_lens=True, logit_lens_stride=8
        ),
        "pass_all_token_distance": lambda: analyse(
            adapter, batches, logit_lens=False, all_token_distance=True
        ),
    }
    best = {name: float("inf") for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def peak_memory_child(args) -> None:
    """Runs in a fresh process: one pass over args.tokens tokens, prints its RSS growth in MiB."""
    import torch
    from depthlab.models.architectures import adapt
    from depthlab.stages.analysis.measures import analyse

    torch.set_num_threads(args.threads)
    model = build_model(args.model)
    vocab = model.config.vocab_size

    def lazy_batches():  # generated on the fly: the token ids themselves must not pile up
        import torch

        generator = torch.Generator().manual_seed(1)
        total = 0
        while total < args.tokens:
            ids = torch.randint(2, vocab, (args.batch_size, args.seq_len), generator=generator)
            mask = torch.ones_like(ids)
            total += ids.numel()
            yield {"input_ids": ids, "attention_mask": mask}

    process = psutil.Process()
    before = process.memory_info().rss
    peak = [before]
    running = threading.Event()
    running.set()

    def sample_rss():  # ru_maxrss is dominated by imports; sample the pass's own peak instead
        while running.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    if args.variant == "stored_hidden_states":
        # positive control: what a non-streaming analysis keeps (every hidden state, in fp32)
        stored, count = [], 0
        with torch.no_grad():
            for batch in lazy_batches():
                out = model(**batch, output_hidden_states=True)
                stored.append(torch.stack(out.hidden_states).float())
                count += int(batch["attention_mask"].sum())
        tokens = count
    else:
        # the all-token variant runs without the lens, to isolate its own per-batch buffers
        all_tokens = args.variant == "streamed_all_token_distance"
        tokens = analyse(
            adapt(model), lazy_batches(), logit_lens=not all_tokens, all_token_distance=all_tokens
        ).tokens
    running.clear()
    sampler.join()
    peak[0] = max(peak[0], process.memory_info().rss)
    print(
        json.dumps(
            {
                "tokens": tokens,
                "rss_before_pass_mib": round(before / 2**20, 1),
                "pass_growth_mib": round((peak[0] - before) / 2**20, 1),
            }
        )
    )


def peak_memory(args, tokens, variant):
    command = [
        sys.executable,
        __file__,
        "--child",
        "--tokens",
        str(tokens),
        "--threads",
        str(args.threads),
        "--seq-len",
        str(args.seq_len),
        "--batch-size",
        str(args.batch_size),
        "--variant",
        variant,
    ]
    if args.model:
        command += ["--model", args.model]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="checkpoint folder (default: toy 12x128)")
    parser.add_argument("--tokens", type=int, default=20000, help="real tokens for the timing")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--memory-tokens", type=int, nargs=2, default=[10_000, 100_000])
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--variant",
        default="streamed",
        help=argparse.SUPPRESS,
        choices=["streamed", "streamed_all_token_distance", "stored_hidden_states"],
    )
    args = parser.parse_args()
    if args.child:
        peak_memory_child(args)
        return

    import torch

    torch.set_num_threads(args.threads)
    model = build_model(args.model)
    batches = token_batches(args.tokens, args.seq_len, args.batch_size, model.config.vocab_size)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    times = time_variants(model, batches, args.repeats)
    reference = times["plain_forward_causal_lm"]
    print(
        f"model: {type(model).__name__} {model.config.num_hidden_layers} layers x "
        f"{model.config.hidden_size}, vocab {model.config.vocab_size}; {real} real tokens in "
        f"{len(batches)} batches of {args.batch_size} x {args.seq_len}; {args.threads} "
        f"thread(s); best of {args.repeats}"
    )
    print(f"{'variant':28s} {'seconds':>8s} {'vs causal-LM fwd':>17s} {'vs backbone fwd':>16s}")
    for name, seconds in times.items():
        print(
            f"{name:28s} {seconds:8.3f} {seconds / reference:16.2f}x "
            f"{seconds / times['plain_forward_backbone']:15.2f}x"
        )
    if args.skip_memory:
        return
    print("\nmemory growth during one pass (sampled RSS peak minus RSS before it, fresh process):")
    labels = {
        "streamed": "streamed, every measure, logit lens on",
        "streamed_all_token_distance": "streamed, all-token distance, lens off",
        "stored_hidden_states": "control: stored hidden states (not streamed)",
    }
    for variant, label in labels.items():
        rows = [peak_memory(args, tokens, variant) for tokens in args.memory_tokens]
        print(
            f"  {label:46s} "
            + "; ".join(f"{r['tokens']} tokens: +{r['pass_growth_mib']} MiB" for r in rows)
            + f"; growth x{rows[1]['pass_growth_mib'] / max(rows[0]['pass_growth_mib'], 0.1):.2f}"
            + f" for x{rows[1]['tokens'] / rows[0]['tokens']:.1f} tokens"
        )


if __name__ == "__main__":
    main()
