"""Measured inference speed of pruned models against the full model (Gromov et al. report none).

Every variant, the full model included, is the exported HF folder of the model without its
removed layers (depthlab.stages.pruning.layer_removal.export_pruned), loaded with `from_pretrained` in the job's
dtype as a user would load it, one at a time (`measure_exports`).
Two throughputs per variant:

  prefill     batch_size x prompt_length tokens through one forward pass that fills the KV
              cache: prompt tokens per second
  generation  `generate` of new_tokens tokens per row after the prompt (greedy, the length
              forced, prefill included): new tokens per second

`measure` times the models it is given in rounds that interleave them (round r times every
model once), so a machine whose load changes slows every model alike; the median over rounds is
reported after one untimed warm-up round, with the fastest and slowest round beside it. The stage
gives it one model at a time (memory), so a speed-up is a ratio of medians taken minutes apart:
`speedup_range` bounds it by the rounds' spread. A toy model's prefill takes ~10 ms on a CPU, so
one slow round of the full model (a neighbouring job, the allocator growing) can lift a ratio
above the ideal L/(L-n), which fewer layers cannot reach (the embeddings, head and `generate`'s
own work do not shrink): such a point's range reaches back below the ideal, and the figure draws
the range.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from depthlab.models.architectures import load_model
from depthlab.stages.pruning.layer_removal import export_pruned


def _prompt(vocab_size: int, batch_size: int, length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # ids from 2 on: 0/1 are the eos/pad ids of the project's tokenizers
    return torch.randint(2, vocab_size, (batch_size, length), generator=generator)


def _time_prefill(model, ids) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
    return time.perf_counter() - start


def _time_generation(model, ids, new_tokens: int) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
    elapsed = time.perf_counter() - start
    if out.shape[1] != ids.shape[1] + new_tokens:
        raise RuntimeError(
            f"generate returned {out.shape[1] - ids.shape[1]} new tokens, asked for {new_tokens}"
        )
    return elapsed


def measure(
    models: dict, batch_size: int, prompt_length: int, new_tokens: int, repeats: int, seed: int = 0
) -> dict:
    """{name: {prefill_tokens_per_s, generation_tokens_per_s, ...}} for loaded models."""
    first = next(iter(models.values()))
    context = getattr(first.config, "max_position_embeddings", None)
    if context is not None and prompt_length + new_tokens > context:
        raise ValueError(
            f"pruning.speed: prompt_length + new_tokens = "
            f"{prompt_length + new_tokens} exceeds the model's context of "
            f"{context} positions"
        )
    device = next(first.parameters()).device
    ids = _prompt(first.config.vocab_size, batch_size, prompt_length, seed).to(device)
    times = {name: {"prefill": [], "generation": []} for name in models}
    for round_ in range(repeats + 1):
        for name, model in models.items():
            prefill = _time_prefill(model, ids)
            generation = _time_generation(model, ids, new_tokens)
            if round_:  # round 0 warms up
                times[name]["prefill"].append(prefill)
                times[name]["generation"].append(generation)
    results = {}
    for name, measured in times.items():
        prefill = float(np.median(measured["prefill"]))
        generation = float(np.median(measured["generation"]))
        weights = list(models[name].parameters())
        results[name] = {
            "dtype": str(weights[0].dtype).removeprefix("torch."),
            "parameters": sum(w.numel() for w in weights),
            "prefill_tokens_per_s": batch_size * prompt_length / prefill,
            "generation_tokens_per_s": batch_size * new_tokens / generation,
            "prefill_seconds": prefill,
            "generation_seconds": generation,
            # the spread of the timed rounds (the median above is the value reported)
            "prefill_seconds_min": float(np.min(measured["prefill"])),
            "prefill_seconds_max": float(np.max(measured["prefill"])),
            "generation_seconds_min": float(np.min(measured["generation"])),
            "generation_seconds_max": float(np.max(measured["generation"])),
            "batch_size": batch_size,
            "prompt_length": prompt_length,
            "new_tokens": new_tokens,
            "repeats": repeats,
        }
    return results


def measure_exports(
    model,
    removal_sets: dict[str, Sequence[int]],
    batch_size: int,
    prompt_length: int,
    new_tokens: int,
    repeats: int,
    seed: int = 0,
    device: str = "cpu",
    dtype: str | torch.dtype | None = None,
    work_dir: str | Path | None = None,
) -> dict:
    """Speed of the full model and of each removal set; {name: result}, the full model under
    "full". Like for like: every variant, the full model included (as the empty removal), is
    exported from `model` (the job's model, loaded at its pinned revision) to a temporary folder
    and loaded back by `from_pretrained` in the same `dtype` (default: the model's), as a user
    would load it. One variant at a time, then freed with its folder: a 70B model's export is
    ~140 GB of disk and of GPU memory, so neither may hold all variants at once; each variant
    gets its own warm-up round and `repeats` timed rounds."""
    dtype = dtype or next(model.parameters()).dtype
    results = {}
    for name, removed in {"full": (), **removal_sets}.items():
        folder = Path(tempfile.mkdtemp(prefix=f"depthlab-speed-{name}-", dir=work_dir))
        try:
            export_pruned(model, removed, folder)
            loaded = load_model(str(folder), dtype=dtype, device=device)
            results[name] = measure(
                {name: loaded}, batch_size, prompt_length, new_tokens, repeats, seed
            )[name]
            del loaded
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return results


def speedup_range(full: dict, variant: dict, kind: str) -> tuple[float, float]:
    """(low, high) of a variant's `kind` (prefill | generation) speed-up over the full model from
    the spread of both's timed rounds: full's fastest over the variant's slowest round, full's
    slowest over the variant's fastest."""
    return (
        full[f"{kind}_seconds_min"] / variant[f"{kind}_seconds_max"],
        full[f"{kind}_seconds_max"] / variant[f"{kind}_seconds_min"],
    )
