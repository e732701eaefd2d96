#!/usr/bin/env python
"""Training throughput: depthlab's pretrain loop vs a plain LlamaForCausalLM + AdamW loop.

Same architecture, batch, sequence length, data windows and threads; runs alternate
(depthlab, plain, depthlab, plain, ...) so machine noise hits both; prints tokens/s of each and
the ratio of medians. Usage: python bench/bench_pretrain_throughput.py [--steps 40 --repeats 3]
"""

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow_scripts"))

from depthlab.config import load_config, resolve  # noqa: E402
from depthlab.data import load_tokens, prepare_corpus  # noqa: E402
from depthlab.training import language_model_loss, pretrain, train_batch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def plain_llama_tokens_per_s(model_decl, data_dir, steps, threads) -> float:
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
        loss = language_model_loss(model, window, None)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return steps * train["batch_size"] * train["seq_len"] / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=str(ROOT / "config" / "default.yaml"))
    parser.add_argument("--model", default="pre_ln")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    config = load_config(args.config)
    # the model exactly as the workflow would train it (the pretrain job's resolved spec)
    model = copy.deepcopy(resolve(config).jobs("pretrain_model")[args.model]["model"])
    # Throughput of the training loop only: no evaluation or checkpoints inside the window.
    model["train"].update(
        steps=args.steps,
        eval_every=10**9,
        log_spaced_evals=0,
        checkpoint_every=10**9,
        warmup_steps=0,
    )
    test_data = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())["data"]
    test_data["tokenizer"]["vocab_size"] = config["data"]["tokenizer"]["vocab_size"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        prepare_corpus(test_data, tmp / "data", seed=0)
        ours, plain = [], []
        for repeat in range(args.repeats):
            summary = pretrain(
                args.model,
                model,
                tmp / "data",
                tmp / f"out{repeat}",
                tmp / f"state{repeat}",
                seed=0,
                threads=args.threads,
                progress=False,
            )
            ours.append(summary["tokens_per_s"])
            plain.append(plain_llama_tokens_per_s(model, tmp / "data", args.steps, args.threads))
            print(
                f"repeat {repeat}: depthlab {ours[-1]:.0f} tok/s, plain Llama {plain[-1]:.0f} tok/s"
            )
    arch = model["architecture"]
    print(
        f"model {args.model} ({model['norm_scheme']}, {arch['num_layers']}x{arch['hidden_size']}), "
        f"batch {model['train']['batch_size']}x{model['train']['seq_len']}, {args.threads} thread(s)"
    )
    print(
        f"median tokens/s: depthlab {statistics.median(ours):.0f}, plain LlamaForCausalLM "
        f"{statistics.median(plain):.0f}, ratio depthlab/plain "
        f"{statistics.median(ours) / statistics.median(plain):.3f}"
    )


if __name__ == "__main__":
    main()
