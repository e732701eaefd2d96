"""The `lens_swaps` job: one model's tuned lens (depthlab.stages.lens_swaps.tuned_lens), trained on
train-split documents, then evaluated beside the logit lens, and its layer swaps and deletions
(depthlab.stages.lens_swaps.layer_swaps), on each of its text sets (held-out documents; the
analysis stage's text sets, shards included). One clean pass per batch feeds both.

Writes into the spec's `out` folder: translators.safetensors (A: (L, d, d) with A_l = I + W_l,
b: (L, d); float32; the training settings in its metadata), lens_training.json (steps, lr,
tokens, optimizer, schedule, the loss per step, each layer's last loss), <text_set>/lens.csv
(lens, measure, layer, value, count), <text_set>/swaps.csv (kind, layer, loss, accuracy,
agreement, kept_accuracy, tokens), summary.json and provenance.json. Its figure is drawn from
those tables by its own job (`plot_lens_swaps`, depthlab.stages.lens_swaps.plots), so redrawing
it never retrains a lens. Spec keys: workflow_scripts/lens_swaps.py.
"""

from __future__ import annotations

import json
import time

import torch

from depthlab.core.placement import spec_placement
from depthlab.stages.lens_swaps.plots import LENS_TABLE, SWAPS_TABLE
from depthlab.stages.model_job import (
    clamp_max_length,
    load,
    log_stderr,
    provenance_inputs,
    text_batches,
)

TRAIN_DECODE_CHUNK = 1 << 16


def _train_batches(spec: dict, tokenizer, max_length: int):
    """Padded batches of the train split's documents (depthlab.data.model_tokens: decoded from
    train.bin), read as the model reads text (the spec's add_special_tokens)."""
    from depthlab.data.model_tokens import train_documents
    from depthlab.stages.residual_stream import iter_token_batches

    return iter_token_batches(
        # a few thousand tokens are read: decode train.bin 64k ids at a time, not 1M (5 s)
        train_documents(spec["train_data"], chunk_tokens=TRAIN_DECODE_CHUNK),
        tokenizer,
        max_length=max_length,
        batch_size=spec["batch_size"],
        sort_window=1,  # documents in train.bin order: no bias towards the shortest ones
        add_special_tokens=spec["add_special_tokens"],
    )


def capture_pool(adapter, batches, tokens: int) -> torch.Tensor:
    """The states h_0..h_L (L+1, N, d) of the first `tokens` tokens that have a next real token
    (as the lens is evaluated), float32 or wider, outside inference mode (trainable on)."""
    from depthlab.stages.lens_swaps.layer_swaps import scored_positions
    from depthlab.stages.residual_stream import clean_pass

    device, parts, total = adapter.input_device, [], 0
    with torch.inference_mode():
        for batch in batches:
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            states, _ = clean_pass(adapter, ids, mask)
            here, _ = scored_positions(mask)
            here = here[: tokens - total]
            d = states[0].shape[-1]
            parts.append(torch.stack([s.reshape(-1, d).index_select(0, here) for s in states]))
            total += here.numel()
            if total >= tokens:
                break
    if total == 0:
        raise ValueError("tuned lens: the train split gave no tokens")
    pool = torch.cat(parts, dim=1)
    return pool.to(torch.promote_types(pool.dtype, torch.float32)).clone()


def _evaluate(adapter, batches, translators, stride: int):
    """(LensStatistics, SwapStatistics) of one text set."""
    from depthlab.stages.lens_swaps.layer_swaps import SwapStatistics, scored_tokens
    from depthlab.stages.lens_swaps.tuned_lens import LensStatistics, readout
    from depthlab.stages.residual_stream import clean_pass

    read = readout(adapter)
    lens = LensStatistics(adapter.num_layers, translators)
    swaps = SwapStatistics(adapter, read)
    device, seen = adapter.input_device, 0
    with torch.inference_mode():
        for batch in batches:
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            states, calls = clean_pass(adapter, ids, mask)
            here, nxt, seen = scored_tokens(mask, stride, seen)
            targets = ids.reshape(-1).index_select(0, nxt)
            d = states[0].shape[-1]
            lens.add(read, torch.stack([s.reshape(-1, d).index_select(0, here) for s in states]),
                     targets)  # fmt: skip
            swaps.add(states, calls, here, targets)
    return lens, swaps


def lens_and_swaps(adapter, tokenizer, spec: dict, max_length: int, log=log_stderr):
    """The job's measurement of one loaded model (the claims' untrained twins reuse it): the
    tuned lens trained on the spec's train-split documents, then on each text set the lens
    statistics and the swap statistics. Returns (translators, training log, lens settings,
    training seconds, {text set: (LensStatistics, SwapStatistics)}, {text set: seconds})."""
    from depthlab.stages.lens_swaps.tuned_lens import LensSettings, train_translators

    lens = spec["tuned_lens"]
    settings = LensSettings(
        train_tokens=lens["train_tokens"],
        steps=lens["steps"],
        batch_tokens=lens["batch_tokens"],
        lr=lens["lr"],
        seed=spec["seed"],
    )
    start = time.perf_counter()
    pool = capture_pool(adapter, _train_batches(spec, tokenizer, max_length), lens["train_tokens"])
    translators, training = train_translators(adapter, pool, settings, log=log)
    train_seconds = time.perf_counter() - start
    del pool
    evaluations, seconds = {}, {}
    for text_set, source in spec["text_sets"].items():
        start = time.perf_counter()
        batches = text_batches(
            {**spec, "texts": source}, tokenizer, max_length, max_samples=spec["max_samples"]
        )
        evaluations[text_set] = _evaluate(adapter, batches, translators, spec["stride"])
        seconds[text_set] = round(time.perf_counter() - start, 3)
    return translators, training, settings, train_seconds, evaluations, seconds


def run(spec: dict, device: str = "cpu", log=log_stderr) -> dict:
    """Run one `lens_swaps` job on `device`; returns its summary (also in summary.json)."""
    from safetensors.torch import save_file

    from depthlab.core.atomic_files import atomic_path, write_dataframe, write_json
    from depthlab.core.provenance import Provenance

    texts = list(spec["text_sets"].values())
    provenance = Provenance(
        "lens_swaps",
        config=spec,
        inputs=[
            *dict.fromkeys(p for t in texts for p in provenance_inputs(t, [])),
            *provenance_inputs({"source": "none"}, [spec["model_path"]], [spec["train_data"]]),
        ],
    )
    adapter, tokenizer = load(
        spec["model_path"], spec["revision"], spec["dtype"], device, **spec_placement(spec)
    )
    if not adapter.has_lm_head:
        raise ValueError(f"{spec['model_name']}: no LM head, so no lens and no next-token loss")
    max_length = clamp_max_length(spec["max_length"], [adapter], log)
    translators, training, settings, train_seconds, evaluations, seconds = lens_and_swaps(
        adapter, tokenizer, spec, max_length, log
    )
    summary = {
        "model": spec["model_name"],
        "num_layers": adapter.num_layers,
        "train_tokens": int(training.pool_tokens),
        "train_seconds": round(train_seconds, 3),
        "eval_seconds": seconds,
        "eval_tokens": {t: lens_stats.tokens for t, (lens_stats, _) in evaluations.items()},
        "architecture": adapter.describe(),
    }
    A, b = translators.matrices()
    metadata = {"model": spec["model_name"], "training": json.dumps(vars(settings))}
    with atomic_path(spec["out"], is_dir=True) as out:
        save_file({"A": A.cpu().contiguous(), "b": b.cpu().contiguous()},
                  str(out / "translators.safetensors"),
                  metadata=metadata)  # fmt: skip
        write_json(out / "lens_training.json", training.as_dict())
        for text_set, (lens_stats, swap_stats) in evaluations.items():
            labels = {"model": spec["model_name"], "text_set": text_set}
            write_dataframe(out / text_set / LENS_TABLE, lens_stats.frame(**labels))
            write_dataframe(out / text_set / SWAPS_TABLE, swap_stats.result().frame(**labels))
        write_json(out / "summary.json", summary)
        provenance.extra["summary"] = summary
        provenance.write(out / "provenance.json")
    return summary
