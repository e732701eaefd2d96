#!/usr/bin/env python
"""Benchmark of the pruning stage's loss sweep (depthlab.stages.pruning.strategies.LossSweep) against rebuilding
and rerunning every variant (depthlab.stages.pruning.layer_removal: model_loss of prune_copy, i.e. copy the
pruned model and run it).

The sweep is the default stage's: every single-layer removal, angular and deepest blocks for
every n in 1..L-1 (--n-grid: those n only) and the greedy path to n = L-1 (--greedy-max-n: to
that n; each greedy step asks for all its candidates at once, as the stage does), on the default
validation windows (32 x 64 tokens in batches of 16).
The reference rebuilds each distinct removal set once (no credit is taken for the sweep's
deduplication). Asserts the losses are identical (relative 1e-6) and prints the wall-time ratio
and the ratio of decoder-layer calls (machine-independent). Timings alternate the two methods
over --repeats rounds and keep each one's best, since the machine is shared.

    python bench/bench_pruning_sweep.py [--model DIR] [--analysis DIR] [--data DIR]
                                        [--threads 1] [--repeats 1] [--dtype auto]
                                        [--n-grid 2 4 8] [--greedy-max-n 2]

Without --model: the default suite's 12 x 128 pre-LN toy shape with random weights, random
validation tokens and a random distance matrix. With --model (e.g. the default run's converted
SmolLM2, results/default/models/smollm2, its analysis results/default/analysis/val/smollm2 and
the run's data folder, whose val.jsonl it re-encodes with the model's tokenizer when the model
has its own), each method prints a line every 10 removal sets.

    python bench/bench_pruning_sweep.py --model results/default/models/smollm2 \
        --analysis results/default/analysis/val/smollm2 --data results/default/data \
        --windows 8 --seq-len 64 --batch-size 8 --n-grid 2 4 8 --greedy-max-n 2 --threads 2
"""

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def inputs(args):
    import numpy as np
    import torch
    from depthlab.stages.pruning.strategies import read_distance_matrix

    if args.model:
        from depthlab.models.architectures import load_model

        model = load_model(args.model, dtype=args.dtype)
        tokens = model_val_tokens(args.model, args.data)
        distance = read_distance_matrix(Path(args.analysis) / "angular_distance_last.csv")
        return model, tokens, distance
    from depthlab.models.decoders import build_model, make_config

    config = make_config(
        {"hidden_size": 128, "num_layers": 12, "num_heads": 4, "intermediate_size": 352},
        "pre_ln",
        vocab_size=4096,
        max_positions=64,
    )
    model = build_model(config, seed=0).to(torch.float32).eval()
    rng = np.random.default_rng(0)
    tokens = rng.integers(2, 4096, 20000).astype(np.uint16)
    distance = rng.random((13, 13))
    return model, tokens, (distance + distance.T) / 2


def sweep_requests(num_layers, distance, losses_of, n_values=None, greedy_max_n=None):
    """The stage's requests in order; returns every distinct removal set asked for."""
    from depthlab.stages.pruning.blocks import angular_removal, deepest_removal
    from depthlab.stages.pruning.strategies import greedy_path

    asked = []

    def record(sets):
        asked.extend(sets)
        return losses_of(sets)

    n_values = n_values or range(1, num_layers)
    greedy = greedy_path(record, num_layers, greedy_max_n or max(n_values))
    plans = [angular_removal(distance, n) for n in n_values]
    plans += [deepest_removal(num_layers, n) for n in n_values]
    plans += [r["removed"] for r in greedy]
    record([()] + [(l,) for l in range(num_layers)] + plans)
    return list(dict.fromkeys(tuple(sorted(s)) for s in asked))


def model_val_tokens(model_dir, data_dir):
    """The validation ids the stage scores the model on: the run's val.bin for a model pretrained
    here (its tokenizer is the run's), else val.jsonl re-encoded by the model's own tokenizer
    (as pruning.retokenize)."""
    from depthlab.data.model_tokens import model_tokens

    own, run = Path(model_dir) / "tokenizer.json", Path(data_dir) / "tokenizer" / "tokenizer.json"
    tokenizer = None
    if own.exists() and (not run.exists() or own.read_bytes() != run.read_bytes()):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return model_tokens(data_dir, "val", tokenizer, max_tokens=200_000)[0]


def progress(losses_of, label, start):
    """losses_of, printing how many removal sets it has scored every 10."""
    done = [0]

    def scored(sets):
        result = losses_of(sets)
        before, done[0] = done[0], done[0] + len(sets)
        if done[0] // 10 > before // 10:
            print(f"{label}: {done[0]} sets, {time.perf_counter() - start:.1f} s", flush=True)
        return result

    return scored


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="HF model folder (default: random 12 x 128 toy)")
    parser.add_argument("--analysis", help="analysis folder with angular_distance_last.csv")
    parser.add_argument("--data", help="data folder with val.bin")
    parser.add_argument("--windows", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 (as the stage)")
    parser.add_argument("--n-grid", type=int, nargs="+", help="block sizes (default: every n)")
    parser.add_argument("--greedy-max-n", type=int, help="greedy path length (default: max n)")
    args = parser.parse_args()

    import numpy as np
    import torch
    from depthlab.stages.pruning.layer_removal import model_loss, prune_copy
    from depthlab.stages.pruning.strategies import LossSweep, validation_windows

    torch.set_num_threads(args.threads)
    model, tokens, distance = inputs(args)
    windows = validation_windows(tokens, args.windows, args.seq_len, args.batch_size)
    num_layers = distance.shape[0] - 1

    best = {"sweep": float("inf"), "rebuild": float("inf")}
    for _ in range(args.repeats):
        start = time.perf_counter()
        sweep = LossSweep(model, windows)
        sets = sweep_requests(
            num_layers, distance, progress(sweep.losses, "sweep", start), args.n_grid,
            args.greedy_max_n,
        )  # fmt: skip
        best["sweep"] = min(best["sweep"], time.perf_counter() - start)
        cached = dict(zip(sets, sweep.losses(sets)))

        start = time.perf_counter()
        rebuilt = {}
        for index, s in enumerate(sets, 1):
            rebuilt[s] = model_loss(prune_copy(model, s), windows)
            if index % 10 == 0:
                print(f"rebuild: {index}/{len(sets)} sets, {time.perf_counter() - start:.1f} s",
                      flush=True)  # fmt: skip
        best["rebuild"] = min(best["rebuild"], time.perf_counter() - start)

    got = np.array([cached[s] for s in sets])
    expected = np.array([rebuilt[s] for s in sets])
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
    naive_calls = sum(num_layers - len(s) for s in sets) * len(windows)
    load = os.getloadavg()[0]
    print(f"threads: {args.threads}; load {load:.2f} (the machine is shared: timings are noisy)")
    print(
        f"model: {args.model or 'random 12 x 128 pre-LN toy'}; {num_layers} layers; "
        f"{len(windows)} batches of {args.batch_size} x {args.seq_len} tokens"
    )
    print(
        f"distinct removal sets: {len(sets)}; losses identical to rebuilding "
        f"(max |diff| {np.max(np.abs(got - expected)):.2e})"
    )
    print(
        f"layer calls: sweep {sweep.layer_calls} vs rebuild {naive_calls} "
        f"({naive_calls / sweep.layer_calls:.2f}x fewer)"
    )
    print(
        f"wall: sweep {best['sweep']:.2f} s vs rebuild {best['rebuild']:.2f} s -> "
        f"ratio {best['rebuild'] / best['sweep']:.2f}x (goal >= 2x)"
    )


if __name__ == "__main__":
    main()
