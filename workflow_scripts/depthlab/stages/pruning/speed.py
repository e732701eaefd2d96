"""Measured inference speed of pruned models against the full model (Gromov et al. report none).

Every variant, the full model included, is the exported HF folder of the model without its
removed layers (depthlab.stages.pruning.layer_removal.export_pruned), loaded with
`from_pretrained` in the job's dtype as a user would load it (`measure_exports`).
Two throughputs per variant:

  prefill     batch_size x prompt_length tokens through one forward pass that fills the KV
              cache: prompt tokens per second
  generation  `generate` of new_tokens tokens per row after the prompt (greedy, the length
              forced, prefill included): new tokens per second

`measure` times the models it is given in rounds that interleave them (round r times every
model once, every other round in reverse order), after one untimed warm-up round; each time is
the median over rounds, with the fastest and slowest round beside it.

A speed-up is paired when every variant fits in memory and on disk beside the others (all of
them within half of what is free; `fits_together`): the variants are timed in the same rounds,
and the speed-up is the median over rounds of the full model's time over the variant's in that
round, its range the rounds' smallest and largest such ratio. A load that changes between
rounds (a neighbouring job, the allocator growing) then slows both sides of each ratio alike.
Otherwise (a 70B model's export is ~140 GB of disk and of GPU memory) the variants are timed one
after another, and the speed-up is a ratio of medians taken minutes apart, bounded by
`speedup_range`. Either way fewer layers cannot beat the ideal L/(L-n) (the embeddings, head
and `generate`'s own work do not shrink): a point above it is noise, and its range says how much.
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

from depthlab.core.devices import torch_dtype
from depthlab.models.architectures import load_model
from depthlab.stages.pruning.layer_removal import export_pruned

KINDS = ("prefill", "generation")


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


def timed_rounds(
    models: dict, batch_size: int, prompt_length: int, new_tokens: int, repeats: int, seed: int = 0
) -> dict:
    """{name: {"prefill": [seconds per round], "generation": [...]}}: `repeats` timed rounds
    after one warm-up round, every model once per round, every other round in reverse order (so
    no model always runs right after the same one)."""
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
    times = {name: {kind: [] for kind in KINDS} for name in models}
    names = list(models)
    for round_ in range(repeats + 1):
        for name in names if round_ % 2 == 0 else names[::-1]:
            prefill = _time_prefill(models[name], ids)
            generation = _time_generation(models[name], ids, new_tokens)
            if round_:  # round 0 warms up
                times[name]["prefill"].append(prefill)
                times[name]["generation"].append(generation)
    return times


def summarise(model, rounds: dict, batch_size: int, prompt_length: int, new_tokens: int) -> dict:
    """One model's throughputs from its timed rounds: medians, with the rounds' range."""
    prefill = float(np.median(rounds["prefill"]))
    generation = float(np.median(rounds["generation"]))
    weights = list(model.parameters())
    return {
        "dtype": str(weights[0].dtype).removeprefix("torch."),
        "parameters": sum(w.numel() for w in weights),
        "prefill_tokens_per_s": batch_size * prompt_length / prefill,
        "generation_tokens_per_s": batch_size * new_tokens / generation,
        "prefill_seconds": prefill,
        "generation_seconds": generation,
        # the spread of the timed rounds (the median above is the value reported)
        **{
            f"{kind}_seconds_{end}": float(reduce(rounds[kind]))
            for kind in KINDS
            for end, reduce in (("min", np.min), ("max", np.max))
        },
        "batch_size": batch_size,
        "prompt_length": prompt_length,
        "new_tokens": new_tokens,
        "repeats": len(rounds["prefill"]),
    }


def measure(
    models: dict, batch_size: int, prompt_length: int, new_tokens: int, repeats: int, seed: int = 0
) -> dict:
    """{name: {prefill_tokens_per_s, generation_tokens_per_s, ...}} for loaded models."""
    times = timed_rounds(models, batch_size, prompt_length, new_tokens, repeats, seed)
    return {
        name: summarise(models[name], times[name], batch_size, prompt_length, new_tokens)
        for name in models
    }


def speedup_range(full: dict, variant: dict, kind: str) -> tuple[float, float]:
    """(low, high) of a variant's `kind` (prefill | generation) speed-up over the full model from
    the spread of both's timed rounds, timed apart: full's fastest over the variant's slowest
    round, full's slowest over the variant's fastest."""
    return (
        full[f"{kind}_seconds_min"] / variant[f"{kind}_seconds_max"],
        full[f"{kind}_seconds_max"] / variant[f"{kind}_seconds_min"],
    )


def paired_speedup(full_rounds: Sequence[float], variant_rounds: Sequence[float]) -> tuple:
    """(median, smallest, largest) over rounds of the full model's time over the variant's in
    the same round."""
    ratios = np.asarray(full_rounds, dtype=float) / np.asarray(variant_rounds, dtype=float)
    return float(np.median(ratios)), float(ratios.min()), float(ratios.max())


def speedups(full: dict, variant: dict, rounds: tuple[dict, dict] | None) -> dict:
    """A variant's speed-up columns: `{kind}_speedup` with its `_low`/`_high` range, and whether
    it is `paired` (`rounds`: the full model's and the variant's timed rounds, timed together)."""
    columns = {}
    for kind in KINDS:
        if rounds is not None:
            value, low, high = paired_speedup(rounds[0][kind], rounds[1][kind])
        else:
            # the time ratio (the same tokens): inside speedup_range's bounds exactly
            value = full[f"{kind}_seconds"] / variant[f"{kind}_seconds"]
            low, high = speedup_range(full, variant, kind)
        columns |= {f"{kind}_speedup": value, f"{kind}_speedup_low": low}
        columns[f"{kind}_speedup_high"] = high
    return columns | {"paired": rounds is not None}


def _free_memory(device: str) -> int:
    if str(device).startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    import psutil

    return psutil.virtual_memory().available


def fits_together(model, removal_sets: dict, dtype, device: str, work_dir) -> bool:
    """Whether the full model's export and every removal set's, all loaded at once, take at most
    half of the memory free on `device` and half of the disk free in `work_dir` (each variant
    counted at the full model's size: an upper bound)."""
    element = torch.empty((), dtype=dtype).element_size()
    need = sum(p.numel() for p in model.parameters()) * element * (1 + len(removal_sets))
    disk = shutil.disk_usage(work_dir or tempfile.gettempdir()).free
    return 2 * need <= min(_free_memory(device), disk)


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
    paired: bool | None = None,
) -> dict:
    """Speed of the full model and of each removal set; {name: result}, the full model under
    "full", each result with its `speedups` over the full model. Like for like: every variant,
    the full model included (as the empty removal), is exported from `model` (the job's model,
    loaded at its pinned revision) to a temporary folder and loaded back by `from_pretrained` in
    the same `dtype` (default: the model's), as a user would load it; the folders are removed.

    `paired` (default: `fits_together`): all variants loaded at once and timed in the same
    rounds; else one variant at a time, freed with its folder before the next, each with its
    own warm-up round and `repeats` timed rounds."""
    dtype = torch_dtype(dtype or next(model.parameters()).dtype, device)
    variants = {"full": (), **removal_sets}
    if paired is None:
        paired = fits_together(model, removal_sets, dtype, device, work_dir)
    groups = [list(variants)] if paired else [[name] for name in variants]
    results, times = {}, {}
    for group in groups:
        folders = {
            name: Path(tempfile.mkdtemp(prefix=f"depthlab-speed-{name}-", dir=work_dir))
            for name in group
        }
        try:
            loaded = {}
            for name in group:
                export_pruned(model, variants[name], folders[name])
                loaded[name] = load_model(str(folders[name]), dtype=dtype, device=device)
            settings = (batch_size, prompt_length, new_tokens)
            times |= timed_rounds(loaded, *settings, repeats, seed)
            for name in group:
                results[name] = summarise(loaded[name], times[name], *settings)
            del loaded
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        finally:
            for folder in folders.values():
                shutil.rmtree(folder, ignore_errors=True)
    full = results["full"]
    return {
        name: result | speedups(full, result, (times["full"], times[name]) if paired else None)
        for name, result in results.items()
    }
