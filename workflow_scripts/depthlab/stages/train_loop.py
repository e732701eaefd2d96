"""The training loop that pretraining (depthlab.stages.pretrain.training), fine-tuning
(depthlab.stages.finetune.finetuning) and healing (depthlab.stages.pruning.healing) share, each
with settings of one family (depthlab.settings.training): step iteration, gradient
clipping, the AdamW and schedule steps, the train log and its TensorBoard / W&B scalars,
periodic evaluation, the resumable state and the run record; and the parts of a step the three
share (the batch of a step, the language-model loss, AdamW, the schedule, the precision and the
attention a run trains in), so that no stage imports another's.

A run subclasses TrainingLoop with what differs: the loss of a step's batch (`train_loss`, which
also runs the backward pass), the held-out loss (`validate`) and what to do with it
(`validated`), optionally a look at the gradient before clipping at evaluation steps
(`gradients_taken`) and the names of its train scalars (`train_scalars`). A run without a
resumable state (healing: state_path and checkpoint_every None) never saves one. `train_loss`
may return the loss as a tensor on the device: the loop brings losses to the host only at check
steps (log, evaluation, checkpoint and progress steps and the last step), one transfer for all
the steps since the previous check, so a GPU never waits on the host between them
(NonFiniteLossCheck). A non-finite loss stops the run at the next check step, naming the step it
first appeared at and the range of steps that check covered; the updates in between were taken,
but nothing after the previous check is saved.

Batches are a pure function of (seed, step), so resuming restores only the step counter, the
weights, the optimizer, the schedule, torch's RNG and the logs; a run resumed after a kill ends
bit-identical to one that was never interrupted.

The resumable state (`state.pt`) holds only tensors and plain Python values and is read with
`torch.load(weights_only=True)`: a state file cannot run code. It carries a fingerprint of the
run (a state saved by a different run is never resumed) and how many processes the run has
taken and their summed wall time, so a resumed run's provenance records that it resumed, from
which step, and its total time.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from depthlab.core.atomic_files import atomic_path, write_dataframe
from depthlab.core.devices import native_bf16
from depthlab.core.errors import CheckpointError
from depthlab.core.tracking import Progress, Tracker
from depthlab.settings.training import RunSettings, StepSet, lr_multiplier

LOG_COLUMNS = ["step", "tokens", "split", "loss", "lr", "wall_s"]
STATE_KEYS = (
    "fingerprint",
    "step",
    "model",
    "optimizer",
    "scheduler",
    "torch_rng",
    "log_rows",
    "wall_s",
)  # and a loop's `extra_rows` (pretraining: "layer_rows"), "processes", "total_wall_s"


# ---------------------------------------------------------------------------------------------
# The parts of a step that pretraining, fine-tuning and healing share: the batch of a step, the
# loss, AdamW, the schedule, the precision and the attention a run trains in


IGNORE = -100  # padding in a truncate_pad batch: never a target (cross_entropy's ignore_index)


def train_batch(
    tokens: np.ndarray, step: int, seed: int, batch_size: int, seq_len: int
) -> torch.Tensor:
    """The global batch of `step`: (batch_size, seq_len + 1) random windows of the train split."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch_size)
    return torch.from_numpy(
        np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int64)
    )


def effective_precision(precision: str, device: torch.device | str) -> str:
    """The precision a run trains in: `auto` resolved on this machine (bf16 where the device
    multiplies bf16 natively, else fp32); any other value as declared."""
    if precision != "auto":
        return precision
    return "bf16" if native_bf16(torch.device(device)) else "fp32"


def training_attention(precision: str, device: torch.device) -> str | None:
    """The attention implementation to train with (None: the model's default, SDPA): eager for
    bf16 precisions on a CPU (depthlab.stages.pretrain.training's docstring says why), else None."""
    if precision in ("bf16", "pure_bf16") and device.type == "cpu":
        return "eager"
    return None


def language_model_loss(model, window: torch.Tensor, autocast_dtype) -> torch.Tensor:
    """Mean next-token cross-entropy over the targets that are not IGNORE (padding)."""
    # Padding sits after each document's end, so with causal attention the id standing in for
    # it (0) never reaches a real position.
    inputs, targets = window[:, :-1].clamp(min=0), window[:, 1:]
    with torch.autocast(
        device_type=inputs.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None
    ):
        logits = model(input_ids=inputs).logits
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE
    )


def make_optimizer(model, settings: RunSettings) -> torch.optim.AdamW:
    """AdamW; the fused kernel where the weights are on CUDA (one launch for all parameters),
    the default elsewhere (a CPU run's numbers stay those of earlier runs)."""
    # Norm gains and other 1-D parameters are not decayed (standard for LLaMA-style training).
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    on_cuda = all(p.device.type == "cuda" for p in model.parameters())
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": settings.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=settings.lr,
        betas=(settings.beta1, settings.beta2),
        eps=1e-8,
        fused=True if on_cuda else None,
    )


def make_scheduler(optimizer, settings) -> torch.optim.lr_scheduler.LambdaLR:
    """Warmup + cosine (lr_multiplier) of `settings`' steps, warmup_steps and min_lr_ratio."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, settings))


def run_fingerprint(model_decl: dict, seed: int, data_meta: dict, world_size: int) -> str:
    """Identifies a training run; a saved state from a different run is never resumed."""
    blob = json.dumps(
        {"model": model_decl, "seed": seed, "data": data_meta, "world_size": world_size},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def save_state(path: Path, state: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_state(path: Path, device) -> dict:
    """A saved training state, unpickled with weights_only=True (tensors and plain values only).
    CheckpointError naming the file when it cannot be read that way or lacks a part."""
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as error:  # noqa: BLE001 - UnpicklingError, zip errors, EOF, ...
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CheckpointError(
            f"{path}: not a training state that loads safely "
            f"({type(error).__name__}: {first}); delete it to start the run "
            f"over"
        ) from None
    missing = [key for key in STATE_KEYS if not isinstance(state, dict) or key not in state]
    if missing:
        raise CheckpointError(
            f"{path}: not a training state (no {', '.join(missing)}); delete "
            f"it to start the run over"
        )
    return state


class NonFiniteLossCheck:
    """The training losses of the steps since the last check, kept where they were computed (a
    GPU's losses stay on the GPU); `check` moves them to the host in one transfer and raises
    FloatingPointError naming the first non-finite one."""

    def __init__(self, name: str, hint: str):
        self.name, self.hint = name, hint
        self.pending: list[tuple[int, torch.Tensor]] = []
        self.checked_through = 0  # the last step a check covered

    def add(self, step: int, loss) -> None:
        self.pending.append((step, torch.as_tensor(loss).detach().reshape(())))

    def check(self, step: int) -> float:
        """The losses since the last check, on the host (one synchronisation); the loss of
        `step`, the last of them. FloatingPointError at the first non-finite loss."""
        steps = [at for at, _ in self.pending]
        values = torch.stack([loss.float() for _, loss in self.pending]).tolist()
        first, self.pending = self.checked_through + 1, []
        self.checked_through = step
        for at, value in zip(steps, values):
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"[{self.name}] loss is {value} at step {at}; stopping at the check of "
                    f"steps {first}..{step} ({self.hint})"
                )
        return values[-1]


def run_record(
    resumed_from: int | None, earlier_processes: int, earlier_wall: float, process_start: float
) -> dict:
    """Whether the run resumed, from which step, its processes and their total wall time."""
    return {
        "resumed": resumed_from is not None,
        "resumed_from_step": resumed_from,
        "processes": earlier_processes + 1,
        "total_wall_s": round(earlier_wall + time.perf_counter() - process_start, 3),
    }


class TrainingLoop:
    """One resumable run of `model` (the unwrapped module whose state is saved) under
    `optimizer` and `scheduler`. `settings` gives steps, log_every, checkpoint_every (None: no
    state saved) and grad_clip; `eval_at` the steps after which to evaluate (empty on the ranks
    that do not); only `is_main` saves the state, at `state_path` (None: none).
    `process_start`: this process's start (perf_counter)."""

    extra_rows: tuple[str, ...] = ()  # row lists besides log_rows that the state carries
    loss_hint = "lower the learning rate"  # what the non-finite loss error suggests
    show_throughput = True  # tok/s in the progress lines

    def __init__(
        self,
        name: str,
        model,
        optimizer,
        scheduler,
        settings,
        *,
        eval_at,
        tokens_per_step: int,
        state_path: Path | None,
        fingerprint: str | None,
        device,
        process_start: float,
        is_main: bool = True,
    ):
        self.name, self.model, self.optimizer, self.scheduler = name, model, optimizer, scheduler
        self.steps, self.log_every = settings.steps, settings.log_every
        self.checkpoint_every, self.grad_clip = settings.checkpoint_every, settings.grad_clip
        # a StepSet stays lazy (its steps are never listed); any other collection becomes a set
        self.eval_at = eval_at if isinstance(eval_at, StepSet) else set(eval_at)
        self.tokens_per_step = tokens_per_step
        self.state_path = None if state_path is None else Path(state_path)
        self.fingerprint, self.device = fingerprint, device
        self.process_start, self.is_main = process_start, is_main
        self.tracker = Tracker(None, enabled=False)
        self.losses = NonFiniteLossCheck(name, self.loss_hint)
        self.last_loss = math.nan  # the loss of the last check step, on the host
        self.progress_every = None  # run() sets the progress lines' interval
        self.step, self.log_rows, self.wall_offset, self.wall = 0, [], 0.0, 0.0
        self.started = time.perf_counter()
        for key in self.extra_rows:
            setattr(self, key, [])
        # Earlier processes of this run (a resume): how many, and their summed wall time up to
        # their last saved state (time after it was lost with the process).
        self.earlier_processes, self.earlier_wall, self.resumed_from = 0, 0.0, None

    # ---- what a run defines

    def train_loss(self, step: int) -> torch.Tensor | float:
        """Forward and backward pass of the batch of `step` (0-based); its mean loss (a tensor
        on the device, or a float)."""
        raise NotImplementedError

    def gradients_taken(self, step: int) -> None:
        """At an evaluation step: the gradient of update `step`, before clipping."""

    def validate(self, step: int) -> float:
        """The held-out loss after update `step`."""
        raise NotImplementedError

    def validated(self, step: int, val: float, tokens_per_s: float) -> None:
        """After the val row of `step` is logged."""

    def write_state(self, path: Path, state: dict) -> None:
        save_state(path, state)

    def train_scalars(self, loss: float, lr: float, tokens_per_s: float) -> dict:
        """The TensorBoard / W&B scalars of a logged train step."""
        return {"loss/train": loss, "lr": lr, "tokens_per_s": tokens_per_s}

    # ---- shared

    def resume(self) -> None:
        """Continue from state_path when it holds a state of this run (same fingerprint)."""
        if self.state_path is None or not self.state_path.exists():
            return
        state = load_state(self.state_path, self.device)
        if state["fingerprint"] != self.fingerprint:
            print(
                f"[{self.name}] ignoring {self.state_path}: saved by a different run configuration",
                file=sys.stderr,
            )
            return
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"].cpu())
        self.step, self.wall_offset = state["step"], state["wall_s"]
        self.log_rows = state["log_rows"]
        for key in self.extra_rows:  # absent from states saved before the loop kept them
            setattr(self, key, state.get(key, []))
        self.resumed_from = self.step
        self.earlier_processes = int(state.get("processes", 1))  # states saved before the count
        self.earlier_wall = float(state.get("total_wall_s", state["wall_s"]))
        print(f"[{self.name}] resumed from step {self.step} ({self.state_path})", file=sys.stderr)

    def checkpoint(self) -> None:
        state = {
            "fingerprint": self.fingerprint,
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "log_rows": self.log_rows,
            **{key: getattr(self, key) for key in self.extra_rows},
            "wall_s": self.wall,
            "processes": self.earlier_processes + 1,
            "total_wall_s": self.earlier_wall + time.perf_counter() - self.process_start,
        }
        self.write_state(self.state_path, state)
        self.tracker.flush()  # what a resume keeps is on disk with the state

    def run(self, progress: bool = True, progress_every: int | None = None, write=None) -> None:
        """Train from self.step to the last step; `write`: where the plain progress lines go
        (a log function; default: stderr)."""
        self.wall = self.wall_offset
        bar = Progress(
            self.steps,
            self.name,
            initial=self.step,
            enabled=progress,
            every=progress_every,
            write=write,
        )
        # the plain progress lines show the loss of the very step they print
        self.progress_every = bar.every if progress else None
        self.losses.checked_through = self.step
        self.model.train()
        self.before_first_step()
        self.started = time.perf_counter()  # after before_first_step: not counted as training
        while self.step < self.steps:
            loss = self.train_loss(self.step)
            self.step += 1
            lr, tokens_per_s = self.update(loss)
            values = {"tok/s": tokens_per_s} if self.show_throughput else {}
            bar.update(1, loss=self.last_loss, lr=lr, **values)
        bar.close()

    def before_first_step(self) -> None:
        """Runs once before the first step of this process (e.g. a compile warm-up); its time is
        not training time."""

    def is_check_step(self, step: int) -> bool:
        """Whether the losses come to the host after update `step`: log, evaluation and
        checkpoint steps, the progress lines' steps and the last step."""
        return (
            step % self.log_every == 0
            or step == self.steps
            or (self.progress_every is not None and step % self.progress_every == 0)
            or step in self.eval_at
            or (self.checkpoint_every is not None and step % self.checkpoint_every == 0)
        )

    def update(self, loss) -> tuple[float, float]:
        """After the backward pass of update self.step: the optimizer and schedule steps, the
        logs, the evaluation and the state; the update's learning rate and tokens/s. `loss`
        stays on its device except at check steps (is_check_step)."""
        step = self.step
        self.losses.add(step, loss)
        if self.is_check_step(step):
            self.last_loss = self.losses.check(step)  # FloatingPointError when not finite
        evaluating = step in self.eval_at
        if evaluating:
            self.gradients_taken(step)
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

        self.wall = self.wall_offset + time.perf_counter() - self.started
        tokens = step * self.tokens_per_step
        tokens_per_s = (
            (step - (self.resumed_from or 0))
            * self.tokens_per_step
            / max(self.wall - self.wall_offset, 1e-9)
        )
        if step % self.log_every == 0 or step == self.steps:
            loss = self.last_loss
            self.log_rows.append([step, tokens, "train", loss, lr, round(self.wall, 3)])
            self.tracker.scalars(step, self.train_scalars(loss, lr, tokens_per_s))
        if evaluating:
            val = self.validate(step)
            self.log_rows.append([step, tokens, "val", val, lr, round(self.wall, 3)])
            self.tracker.scalars(step, {"loss/val": val})
            self.validated(step, val, tokens_per_s)
        saves = self.is_main and self.checkpoint_every is not None and self.state_path is not None
        if saves and step % self.checkpoint_every == 0 and step < self.steps:
            self.checkpoint()
        return lr, tokens_per_s

    def record(self) -> dict:
        return run_record(
            self.resumed_from, self.earlier_processes, self.earlier_wall, self.process_start
        )

    def write_outputs(self, folder: Path, summary: dict, provenance, **extra) -> None:
        """train_log.csv and provenance.json of the finished run into `folder`: the run record
        joins `summary` (updated in place), both join the provenance, then `extra`."""
        write_dataframe(folder / "train_log.csv", pd.DataFrame(self.log_rows, columns=LOG_COLUMNS))
        record = self.record()
        summary.update(record)
        provenance.extra.update(record)
        provenance.extra["summary"] = summary
        provenance.extra.update(extra)
        provenance.write(folder / "provenance.json")

    def discard_state(self) -> None:
        """The finished run's state goes: a rerun starts over."""
        if self.state_path is not None:
            self.state_path.unlink(missing_ok=True)
