#!/usr/bin/env python
"""Cost of the pruning stage's block-ranking criteria (those depthlab.settings.block_criteria declares
to run before the validation sweep: ppl, taylor, taylor_plus, magnitude, magnitude_plus, sleb,
...), each run alone as prune_model runs it
(rank_blocks on calibration windows of the train split), beside the validation-loss greedy path
for comparison: per strategy, the calibration forward passes asked for (a set scored on a batch
counts one), the backward passes, the decoder-layer calls actually run (the sweep's prefix reuse)
and the wall time, then the layers each removes at --n.

    python bench/bench_pruning_criteria.py [--model DIR --data DIR] [--windows 8] [--seq-len 64]
                                           [--batch-size 4] [--n 4] [--sleb-max-n 4]
                                           [--threads 1] [--dtype auto]

Without --model: a random 12 x 128 pre-LN toy and random train tokens. With --model (e.g. the
default run's converted SmolLM2, results/default/models/smollm2, and the run's data folder,
whose train split it re-encodes with the model's tokenizer when the model has its own):

    python bench/bench_pruning_criteria.py --model results/default/models/smollm2 \
        --data results/default/data --windows 8 --seq-len 64 --batch-size 4 --n 4 --threads 2
"""

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def existing(option: str):
    def check(value: str) -> Path:
        path = Path(value)
        if not path.exists():
            raise argparse.ArgumentTypeError(f"{option}: {path} is not a file or folder")
        return path

    return check


def inputs(args):
    import numpy as np
    import torch

    if args.model:
        from depthlab.data.model_tokens import model_tokens
        from depthlab.models.architectures import load_model

        model = load_model(str(args.model), dtype=args.dtype)
        own = Path(args.model) / "tokenizer.json"
        run = Path(args.data) / "tokenizer" / "tokenizer.json"
        tokenizer = None
        if own.exists() and (not run.exists() or own.read_bytes() != run.read_bytes()):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(args.model)
        tokens = model_tokens(str(args.data), "train", tokenizer, max_tokens=200_000)[0]
        return model, tokens
    from depthlab.models.decoders import build_model, make_config

    config = make_config(
        {"hidden_size": 128, "num_layers": 12, "num_heads": 4, "intermediate_size": 352},
        "pre_ln",
        vocab_size=4096,
        max_positions=128,
    )
    model = build_model(config, seed=0).to(torch.float32).eval()
    return model, np.random.default_rng(0).integers(2, 4096, 20000).astype(np.uint16)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=existing("--model"), help="HF model folder")
    parser.add_argument("--data", type=existing("--data"), help="data folder with train.bin")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--n", type=int, default=4, help="block size whose sets are printed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 (as the stage)")
    parser.add_argument("--seed", type=int, default=0, help="the job seed (a criterion that draws)")
    args = parser.parse_args()
    if args.model and not args.data:
        parser.error("--data: needed with --model (its train split is the calibration text)")

    import torch
    from depthlab.models.architectures import adapt
    from depthlab.stages.pruning.criteria import CRITERIA, rank_blocks
    from depthlab.stages.pruning.strategies import LossSweep, greedy_path, validation_windows

    torch.set_num_threads(args.threads)
    model, tokens = inputs(args)
    windows = validation_windows(tokens, args.windows, args.seq_len, args.batch_size)
    L = adapt(model).num_layers
    n = min(args.n, L - 1)
    print(
        f"model: {args.model or 'random 12 x 128 pre-LN toy'}; {L} layers; calibration "
        f"{len(windows)} batches of {args.batch_size} x {args.seq_len} tokens; sets at n = {n}"
    )
    sets = {}
    for strategy in CRITERIA:
        result = rank_blocks(model, [strategy], [n], windows, seed=args.seed)
        cost = result.cost[strategy]
        full = result.cost.get("calibration_full_pass")
        if full:  # the sweep's full pass belongs to this criterion when run alone
            for key in ("calibration_forward_passes", "layer_calls", "seconds"):
                cost = {**cost, key: cost[key] + full[key]}
        sets[strategy] = result.removals.get((strategy, n))
        print(
            f"{strategy}: calibration passes {cost['calibration_forward_passes']}, backward "
            f"passes {cost['backward_passes']}, layer calls {cost['layer_calls']}, "
            f"seconds {cost['seconds']:.2f}"
        )
    start = time.perf_counter()
    sweep = LossSweep(model, windows)
    asked = [0]

    def losses_of(candidates):
        asked[0] += len(candidates)
        return sweep.losses(candidates)

    path = greedy_path(losses_of, L, n)
    sets["greedy"] = path[-1]["removed"]
    print(
        f"greedy (the same windows, no barrier): calibration passes "
        f"{(asked[0] + 1) * len(windows)}, backward passes 0, layer calls {sweep.layer_calls}, "
        f"seconds {time.perf_counter() - start:.2f}"
    )
    for strategy, removed in sets.items():
        print(f"removed at n = {n}: {strategy} {list(removed) if removed else 'no set'}")


if __name__ == "__main__":
    main()
