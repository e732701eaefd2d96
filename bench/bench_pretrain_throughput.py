#!/usr/bin/env python
"""Training throughput: depthlab's pretrain loop vs a plain LlamaForCausalLM + AdamW loop, and
whether the configured precision keeps the loss curve within seed noise.

Throughput: same architecture, batch, sequence length, data windows and threads; four loops run
in turn each repeat (so machine noise hits all of them):
  depthlab           the model as the workflow trains it (its `train.precision`; bf16 on a CPU
                     trains with eager attention, see depthlab.stages.pretrain.training)
  depthlab fp32      the same with precision fp32
  plain fp32         LlamaForCausalLM (SDPA attention), AdamW, fp32: what one writes by default
  plain bf16         the same under bf16 autocast (SDPA attention)
It prints tokens/s of each and ratios of medians; "ratio depthlab/plain" is against plain fp32.

Loss check (`--loss-seeds 0 1 2`): the model trained to its configured steps with each seed, in
its configured precision and in fp32, on the same data; it prints each run's final validation
loss, the paired (same seed) difference configured - fp32 with its t-interval over the seeds, the
seed-to-seed standard deviation of the fp32 final loss, and the largest same-seed difference on
the second half of the curves. The configured precision is within seed noise when the interval
holds 0 and the mean difference is smaller than the seed spread.

Usage: python bench/bench_pretrain_throughput.py [--steps 40 --repeats 3]
       python bench/bench_pretrain_throughput.py --loss-seeds 0 1 2 --data results/default/data
"""

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]

from depthlab.config import load_config, resolve  # noqa: E402
from depthlab.data.prepare import load_tokens, prepare_corpus  # noqa: E402
from depthlab.stages.pretrain.training import language_model_loss, pretrain, train_batch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def plain_llama_tokens_per_s(model_decl, data_dir, steps, threads, autocast_dtype) -> float:
    torch.set_num_threads(threads)
    arch, train = model_decl["architecture"], model_decl["train"]
    tokens = load_tokens(data_dir, "train")
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=int(tokens.max()) + 1,
            hidden_size=arch["hidden_size"],
            intermediate_size=arch["intermediate_size"],
            num_hidden_layers=arch["num_layers"],
            num_attention_heads=arch["num_heads"],
            max_position_embeddings=train["seq_len"],
            use_cache=False,
        )
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=train["lr"])
    start = time.perf_counter()
    for step in range(steps):
        window = train_batch(tokens, step, 0, train["batch_size"], train["seq_len"])
        loss = language_model_loss(model, window, autocast_dtype)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return steps * train["batch_size"] * train["seq_len"] / (time.perf_counter() - start)


def with_precision(model_decl: dict, precision: str) -> dict:
    model_decl = copy.deepcopy(model_decl)
    model_decl["train"]["precision"] = precision
    return model_decl


def throughput(args, model, data_dir: Path, tmp: Path) -> None:
    # Throughput of the training loop only: no evaluation or checkpoints inside the window.
    model = copy.deepcopy(model)
    model["train"].update(
        steps=args.steps,
        eval_every=10**9,
        log_spaced_evals=0,
        checkpoint_every=10**9,
        warmup_steps=0,
    )
    precision = model["train"]["precision"]

    def depthlab_tokens_per_s(model_decl: dict, out: Path) -> float:
        return pretrain(
            args.model,
            model_decl,
            data_dir,
            out,
            out.with_suffix(".state"),
            seed=0,
            threads=args.threads,
            progress=False,
        )["tokens_per_s"]

    loops = {
        f"depthlab ({precision})": lambda out: depthlab_tokens_per_s(model, out),
        "depthlab fp32": lambda out: depthlab_tokens_per_s(with_precision(model, "fp32"), out),
        "plain fp32": lambda out: plain_llama_tokens_per_s(
            model, data_dir, args.steps, args.threads, None
        ),
        "plain bf16": lambda out: plain_llama_tokens_per_s(
            model, data_dir, args.steps, args.threads, torch.bfloat16
        ),
    }
    rates = {name: [] for name in loops}
    for repeat in range(args.repeats):
        for index, (name, loop) in enumerate(loops.items()):
            rates[name].append(loop(tmp / f"out{repeat}_{index}"))
        print(
            f"repeat {repeat}: "
            + ", ".join(f"{name} {values[-1]:.0f} tok/s" for name, values in rates.items())
        )
    arch = model["architecture"]
    print(
        f"model {args.model} ({model['norm_scheme']}, {arch['num_layers']}x{arch['hidden_size']}), "
        f"batch {model['train']['batch_size']}x{model['train']['seq_len']}, {args.threads} "
        f"thread(s), precision {precision}"
    )
    median = {name: statistics.median(values) for name, values in rates.items()}
    ours = median[f"depthlab ({precision})"]
    print("median tokens/s: " + ", ".join(f"{name} {value:.0f}" for name, value in median.items()))
    print(
        f"ratio depthlab/plain {ours / median['plain fp32']:.3f} (vs plain fp32); "
        f"vs plain bf16 {ours / median['plain bf16']:.3f}; "
        f"depthlab fp32/plain fp32 {median['depthlab fp32'] / median['plain fp32']:.3f}"
    )


def loss_check(args, model, data_dir: Path, tmp: Path) -> None:
    precision = model["train"]["precision"]
    if args.loss_steps:
        model = copy.deepcopy(model)
        model["train"].update(
            steps=args.loss_steps,
            warmup_steps=min(model["train"]["warmup_steps"], args.loss_steps // 2),
        )
    curves = {}
    for seed in args.loss_seeds:
        for label in dict.fromkeys([precision, "fp32"]):
            out = tmp / f"loss_s{seed}_{label}"
            pretrain(
                args.model,
                with_precision(model, label),
                data_dir,
                out,
                out.with_suffix(".state"),
                seed=seed,
                threads=args.threads,
                progress=False,
            )
            log = pd.read_csv(out / "train_log.csv")
            curves[seed, label] = log[log.split == "val"].set_index("step")["loss"]
            print(f"seed {seed} {label}: final val loss {curves[seed, label].iloc[-1]:.4f}")
    fp32 = pd.DataFrame({seed: curves[seed, "fp32"] for seed in args.loss_seeds})
    ours = pd.DataFrame({seed: curves[seed, precision] for seed in args.loss_seeds})
    paired = ours.iloc[-1] - fp32.iloc[-1]  # per seed: configured - fp32, final val loss
    n = len(paired)
    half = stats.t.ppf(0.975, n - 1) * paired.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
    late = fp32.index >= fp32.index.max() / 2  # the second half of training
    curve_gap = (ours - fp32).abs()[late].max().max()
    spread = fp32.iloc[-1].std(ddof=1) if n > 1 else np.nan
    print(
        f"loss check, {args.model}, {n} seeds, {precision} vs fp32: final val loss mean "
        f"{ours.iloc[-1].mean():.4f} vs {fp32.iloc[-1].mean():.4f}; paired difference "
        f"{paired.mean():+.4f} [{paired.mean() - half:+.4f}, {paired.mean() + half:+.4f}] "
        f"(95% t-interval over seeds); seed std of the fp32 final loss {spread:.4f}; largest "
        f"same-seed |difference| on the second half of the curve {curve_gap:.4f}"
    )
    print(
        "within seed noise: the interval holds 0 and |mean difference| < seed std: "
        + ("yes" if abs(paired.mean()) <= half and abs(paired.mean()) < spread else "no")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=str(ROOT / "config" / "default.yaml"))
    parser.add_argument("--model", default="pre_ln_s0")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data", help="a data stage folder (default: config/test.yaml's corpus)")
    parser.add_argument(
        "--loss-seeds", type=int, nargs="*", help="run the loss check over these seeds instead"
    )
    parser.add_argument("--loss-steps", type=int, help="loss check: steps (default: the model's)")
    args = parser.parse_args()

    config = load_config(args.config)
    # the model exactly as the workflow would train it (the pretrain job's resolved spec)
    model = copy.deepcopy(resolve(config).jobs("pretrain_model")[args.model]["model"])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data_dir = Path(args.data) if args.data else tmp / "data"
        if not args.data:
            test_data = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())["data"]
            test_data["tokenizer"]["vocab_size"] = config["data"]["tokenizer"]["vocab_size"]
            prepare_corpus(test_data, data_dir, seed=0)
        if args.loss_seeds:
            loss_check(args, model, data_dir, tmp)
        else:
            throughput(args, model, data_dir, tmp)


if __name__ == "__main__":
    main()
