"""Pretraining's settings (`pretrain:` and each model's `train:` in the config) and what follows
from them alone: the learning-rate schedule and the evaluation steps. Its own module so that the
batches (depthlab.stages.pretrain.batches) and the loop (training) both import it and neither
imports the other."""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields

import numpy as np


@dataclass(frozen=True)
class TrainSettings:
    seq_len: int
    batch_size: int
    steps: int
    lr: float
    min_lr_ratio: float
    warmup_steps: int
    weight_decay: float
    beta1: float
    beta2: float
    grad_clip: float | None
    eval_every: int
    log_spaced_evals: int
    eval_batches: int
    log_every: int
    checkpoint_every: int
    precision: str
    init_std: float
    micro_batch_size: int | None  # per-process rows per forward; None = the whole share
    document_layout: str = "packed"
    compile: bool | str = "auto"  # torch.compile the forward and loss; auto: where CUDA is

    @classmethod
    def from_dict(cls, values: dict) -> TrainSettings:
        required = {f.name for f in fields(cls) if f.default is MISSING}
        missing = sorted(required - set(values))
        if missing:
            raise KeyError(f"train.{missing[0]}: missing training setting")
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len


def lr_multiplier(step: int, settings: TrainSettings) -> float:
    """Linear warmup to 1, then cosine decay to min_lr_ratio at the last step."""
    if settings.warmup_steps and step < settings.warmup_steps:
        return (step + 1) / settings.warmup_steps
    decay_steps = max(1, settings.steps - settings.warmup_steps)
    progress = min(1.0, (step - settings.warmup_steps) / decay_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return settings.min_lr_ratio + (1.0 - settings.min_lr_ratio) * cosine


def evaluation_steps(settings: TrainSettings) -> list[int]:
    """Every eval_every steps, the last step, and log-spaced token counts (scaling-fit D axis)."""
    steps = set(range(settings.eval_every, settings.steps + 1, settings.eval_every))
    steps.add(settings.steps)
    if settings.log_spaced_evals:
        first = max(1, settings.steps // 64)
        steps.update(
            int(s)
            for s in np.unique(
                np.round(np.geomspace(first, settings.steps, settings.log_spaced_evals))
            )
        )
    return sorted(steps)
