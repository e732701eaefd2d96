"""Pretraining's settings (`pretrain:` and each model's `train:` in the config), a member of the
training settings family (depthlab.settings.training), and what follows from them alone:
the learning-rate schedule (the family's lr_multiplier) and the evaluation steps. Its own module
so that the batches (depthlab.stages.pretrain.batches) and the loop (training) both import it and
neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthlab.settings.training import RunSettings, StepSet, lr_multiplier  # noqa: F401 (re-exported)


@dataclass(frozen=True, kw_only=True)
class TrainSettings(RunSettings):
    log_spaced_evals: int
    eval_batches: int
    init_std: float
    micro_batch_size: int | None  # per-process rows per forward; None = the whole share
    document_layout: str = "packed"
    compile: bool | str = "auto"  # torch.compile the forward and loss; auto: where CUDA is


def log_spaced_steps(steps: int, count: int) -> frozenset[int]:
    """`count` log-spaced steps from max(1, steps // 64) to `steps` (rounded; duplicates
    merged): the scaling fit's D axis."""
    if not count:
        return frozenset()
    first = max(1, steps // 64)
    return frozenset(int(s) for s in np.unique(np.round(np.geomspace(first, steps, count))))


def evaluation_steps(settings: TrainSettings) -> StepSet:
    """Every eval_every steps, the last step, and log-spaced token counts (scaling-fit D axis),
    as a lazy StepSet: its memory is the log-spaced steps, whatever `steps` is."""
    return StepSet(
        settings.steps,
        settings.eval_every,
        log_spaced_steps(settings.steps, settings.log_spaced_evals),
    )
