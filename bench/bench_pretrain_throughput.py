#!/usr/bin/env python
"""Training throughput: depthlab's pretraining loop vs a plain LlamaForCausalLM + AdamW loop on
the same device, and whether the configured precision keeps the loss curve within seed noise.

Throughput (depthlab.stages.pretrain.throughput): same device (--device, default: CUDA where
visible, else the CPU), architecture, batch, sequence length, token windows and threads; the
loops run in turn each repeat (so machine noise hits all of them), each timing `--steps` steps
after `--warmup` untimed ones:
  depthlab (P)           PretrainLoop as the workflow trains the model: train.precision P (auto
                         resolved on this device), train.compile as configured (auto: compiled
                         on CUDA only), fused AdamW on CUDA, losses read at check steps only
  depthlab (P, compiled) / depthlab (P, eager)   with --compile-both: both settings of compile
  plain (P)              LlamaForCausalLM (SDPA attention), AdamW (fused on CUDA), eager, the
                         same precision P: what one writes by default
  plain fp32             the same in fp32 (when P is not fp32 already)
It prints tokens/s of each, ratios of medians (depthlab / plain at the same precision) and each
loop's share of the device's measured matmul peak in the dtype it computes in (bf16 for bf16 and
pure_bf16, fp32 for fp32), with model FLOPs counted as 6N + 12 L d T per token.

Loss check (`--loss-seeds 0 1 2`): the model trained to its configured steps with each seed, in
its configured precision and in fp32, on the same data; it prints each run's final validation
loss, the paired (same seed) difference configured - fp32 with its t-interval over the seeds, the
seed-to-seed standard deviation of the fp32 final loss, and the largest same-seed difference on
the second half of the curves. The configured precision is within seed noise when the interval
holds 0 and the mean difference is smaller than the seed spread.

Usage: python bench/bench_pretrain_throughput.py [--steps 40 --repeats 3] [--shape cod_130m]
       python bench/bench_pretrain_throughput.py --loss-seeds 0 1 2 --data results/default/data
"""

import argparse
import copy
import statistics
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]

from depthlab.config import load_config, resolve  # noqa: E402
from depthlab.core.devices import resolve_device  # noqa: E402
from depthlab.data.prepare import prepare_corpus  # noqa: E402
from depthlab.stages.pretrain.throughput import (  # noqa: E402
    SHAPES,
    matmul_peak_tflops,
    measure_training,
    model_flops_utilisation,
)
from depthlab.stages.pretrain.training import effective_precision, pretrain  # noqa: E402


def with_precision(model_decl: dict, precision: str) -> dict:
    model_decl = copy.deepcopy(model_decl)
    model_decl["train"]["precision"] = precision
    return model_decl


def throughput(args, model) -> None:
    device = torch.device(args.device or resolve_device("auto"))
    if args.shape:
        shape = SHAPES[args.shape]
        norm_scheme, compile_setting = args.norm_scheme or "pre_ln", "auto"
        configured = args.precision or "auto"
    else:  # the model exactly as the workflow would train it
        train = model["train"]
        shape = {
            "arch": model["architecture"],
            "batch_size": train["batch_size"],
            "seq_len": train["seq_len"],
            "vocab_size": args.vocab_size,
        }
        norm_scheme = args.norm_scheme or model["norm_scheme"]
        compile_setting = train.get("compile", "auto")
        configured = args.precision or train["precision"]
    precision = effective_precision(configured, device)
    common = dict(
        arch=shape["arch"],
        batch_size=shape["batch_size"],
        seq_len=shape["seq_len"],
        vocab_size=shape["vocab_size"],
        device=device,
        steps=args.steps,
        warmup=args.warmup,
        threads=args.threads,
    )
    loops = {}
    compiles = [False, True] if args.compile_both else [compile_setting]
    for setting in compiles:
        label = f"depthlab ({precision})"
        if args.compile_both:
            label = f"depthlab ({precision}, {'compiled' if setting else 'eager'})"
        loops[label] = dict(
            loop="depthlab", norm_scheme=norm_scheme, precision=precision, compile=setting
        )
    loops[f"plain ({precision})"] = dict(loop="plain", precision=precision)
    if precision != "fp32":
        loops["plain fp32"] = dict(loop="plain", precision="fp32")
    rates = {name: [] for name in loops}
    results = {}
    for repeat in range(args.repeats):
        for name, settings in loops.items():
            results[name] = measure_training(**settings, **common)
            rates[name].append(results[name]["tokens_per_s"])
        print(
            f"repeat {repeat}: "
            + ", ".join(f"{name} {values[-1]:.0f} tok/s" for name, values in rates.items())
        )
    arch = shape["arch"]
    print(
        f"{args.shape or args.model} ({norm_scheme}, {arch['num_layers']}x{arch['hidden_size']}), "
        f"batch {shape['batch_size']}x{shape['seq_len']}, vocab {shape['vocab_size']}, device "
        f"{device}, {args.threads} thread(s), precision {precision}"
    )
    median = {name: statistics.median(values) for name, values in rates.items()}
    print("median tokens/s: " + ", ".join(f"{name} {value:.0f}" for name, value in median.items()))
    plain = median[f"plain ({precision})"]
    print(
        "ratio depthlab/plain (same precision): "
        + ", ".join(
            f"{name} {value / plain:.3f}"
            for name, value in median.items()
            if name.startswith("depthlab")
        )
    )
    peaks = {}
    for name, value in median.items():
        dtype = torch.float32 if results[name]["precision"] == "fp32" else torch.bfloat16
        if dtype not in peaks:
            peaks[dtype] = matmul_peak_tflops(device, dtype)
        share = model_flops_utilisation(value, results[name]["flops_per_token"], peaks[dtype])
        print(
            f"share of the measured {str(dtype)[6:]} matmul peak ({peaks[dtype]:.3g} TFLOP/s): {name} {share:.3f}"
        )
    compiled = [r for r in results.values() if r["compiled"]]
    if compiled:
        print(f"compile time (not in tokens/s): {compiled[-1]['compile_s']:.1f} s")


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
    parser.add_argument("--steps", type=int, default=40, help="timed steps per loop")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    parser.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: CUDA where visible)")
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), help="a preset shape instead of the config's model"
    )
    parser.add_argument("--norm-scheme", help="throughput: this norm scheme instead")
    parser.add_argument("--precision", help="throughput: this train.precision instead")
    parser.add_argument(
        "--vocab-size", type=int, help="with the config's model (default: its tokenizer's)"
    )
    parser.add_argument(
        "--compile-both", action="store_true", help="time depthlab compiled and eager"
    )
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
    if not args.loss_seeds:  # random token windows: throughput does not depend on the text
        args.vocab_size = args.vocab_size or config["data"]["tokenizer"]["vocab_size"]
        throughput(args, model)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data_dir = Path(args.data) if args.data else tmp / "data"
        if not args.data:
            test_data = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())["data"]
            test_data["tokenizer"]["vocab_size"] = config["data"]["tokenizer"]["vocab_size"]
            prepare_corpus(test_data, data_dir, seed=0)
        loss_check(args, model, data_dir, tmp)


if __name__ == "__main__":
    main()
