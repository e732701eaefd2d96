"""Pretraining batches: the training batch of step s (packed windows of the token stream, or
truncate_pad documents cut to seq_len + 1 and padded with IGNORE) and the fixed validation
batches, each drawn from (seed, step) alone so that a resumed run draws the same ones."""

from __future__ import annotations

import numpy as np
import torch

from depthlab.stages.pretrain.settings import TrainSettings
from depthlab.stages.train_loop import IGNORE


def document_bounds(tokens: np.ndarray, eos_id: int) -> np.ndarray:
    """(documents, 2) start/end of every document of a split; end includes its eos."""
    ends = np.flatnonzero(np.asarray(tokens) == eos_id) + 1
    if len(ends) == 0 or ends[-1] != len(tokens):  # a stream not ending in eos: its tail too
        ends = np.append(ends, len(tokens))
    return np.stack([np.concatenate([[0], ends[:-1]]), ends], axis=1)


def document_rows(
    tokens: np.ndarray, bounds: np.ndarray, indices, seq_len: int, bos_id: int
) -> torch.Tensor:
    """(len(indices), seq_len + 1): bos + document (its eos included), cut to seq_len + 1 tokens
    and padded with IGNORE."""
    rows = np.full((len(indices), seq_len + 1), IGNORE, dtype=np.int64)
    for row, index in enumerate(indices):
        start, end = bounds[index]
        end = min(end, start + seq_len)
        rows[row, 0] = bos_id
        rows[row, 1 : 1 + end - start] = tokens[start:end]
    return torch.from_numpy(rows)


def document_batch(
    tokens: np.ndarray,
    bounds: np.ndarray,
    step: int,
    seed: int,
    batch_size: int,
    seq_len: int,
    bos_id: int,
) -> torch.Tensor:
    """truncate_pad's global batch of `step`: random documents, drawn from (seed, step)."""
    rng = np.random.default_rng([seed, step])
    return document_rows(
        tokens, bounds, rng.integers(0, len(bounds), size=batch_size), seq_len, bos_id
    )


def validation_batches(
    tokens: np.ndarray, settings: TrainSettings, layout: dict | None = None
) -> list[torch.Tensor]:
    """Fixed, evenly spaced windows of the val split (the same for every eval and every model);
    for truncate_pad (`layout`: {"bounds", "bos_id"}) evenly spaced documents."""
    count = settings.eval_batches * settings.batch_size
    if layout is not None:
        indices = np.linspace(0, len(layout["bounds"]) - 1, count).astype(np.int64)
        rows = document_rows(tokens, layout["bounds"], indices, settings.seq_len, layout["bos_id"])
        return list(rows.split(settings.batch_size))
    width = settings.seq_len + 1
    if len(tokens) < width:
        raise ValueError(f"val split has {len(tokens)} tokens, fewer than seq_len + 1 = {width}")
    starts = np.linspace(0, len(tokens) - width, count).astype(np.int64)
    windows = np.stack([tokens[s : s + width] for s in starts]).astype(np.int64)
    return list(torch.from_numpy(windows).split(settings.batch_size))
