"""Pretraining's settings (`pretrain:` and each model's `train:` in the config), a member of the
training settings family (depthlab.settings.training), and what follows from them alone:
the learning-rate schedule (the family's lr_multiplier) and the evaluation steps. Its own module
so that the batches (depthlab.stages.pretrain.batches) and the loop (training) both import it and
neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthlab.settings.training import RunSettings, lr_multiplier  # noqa: F401 (re-exported)


@dataclass(frozen=True, kw_only=True)
class TrainSettings(RunSettings):
    log_spaced_evals: int
    eval_batches: int
    init_std: float
    micro_batch_size: int | None  # per-process rows per forward; None = the whole share
    document_layout: str = "packed"
    compile: bool | str = "auto"  # torch.compile the forward and loss; auto: where CUDA is


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
