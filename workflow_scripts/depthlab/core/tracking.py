"""Progress output and experiment tracking for the training loops (pretraining, healing).

Progress: a tqdm bar when stderr is a terminal; in a job log (not a terminal) plain lines such as
`[lns] step 64/256 loss 5.120 lr 3.00e-03 tok/s 5120` every `every` steps and at the end, since
tqdm's carriage returns make a log file unreadable.

Tracking: scalars go to TensorBoard event files (`torch.utils.tensorboard.SummaryWriter`,
offline) when `tracking.tensorboard` is on. A run resumed from step s reopens the same folder
with `purge_step` s + 1, so the events the killed process logged after its last saved state are
hidden and every step appears once. With `tracking.wandb` set, the same scalars also go to a
Weights & Biases run (wandb is imported only then) whose files live in `<dir>/wandb/`; offline
mode needs no network and no login (`wandb sync` uploads such a run later); online mode without
a login or without network stops the job before training with one TrackingError line naming
`tracking.wandb.mode`. A resumed pretraining run logs to a new W&B run from the step it resumed
at.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from tqdm import tqdm

from depthlab.core.errors import TrackingError

# Plain progress lines per run when `every` is not given (about every 5% of the steps).
DEFAULT_PROGRESS_LINES = 20


def _format_value(value) -> str:
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e5):
            return f"{value:.2e}"
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


class Progress:
    """A tqdm bar on a terminal, periodic plain lines otherwise (see the module docstring).
    `write`: where the plain lines go (a log function; default: printed to `file`)."""

    def __init__(
        self,
        total: int,
        desc: str,
        initial: int = 0,
        enabled: bool = True,
        every: int | None = None,
        file=None,
        write=None,
    ):
        self.total, self.desc, self.count = total, desc, initial
        self.file = file if file is not None else sys.stderr
        self.write = write or (lambda line: print(line, file=self.file, flush=True))
        self.enabled = enabled
        self.every = every or max(1, math.ceil(total / DEFAULT_PROGRESS_LINES))
        is_tty = enabled and hasattr(self.file, "isatty") and self.file.isatty()
        self.bar = (
            tqdm(total=total, initial=initial, desc=desc, file=self.file, mininterval=5)
            if is_tty
            else None
        )

    def update(self, n: int = 1, **values) -> None:
        """Advance by n steps; `values` (loss=..., lr=...) are shown with the step."""
        self.count += n
        if not self.enabled:
            return
        if self.bar is not None:
            if values:
                self.bar.set_postfix(
                    {k: _format_value(v) for k, v in values.items()}, refresh=False
                )
            self.bar.update(n)
        elif self.count % self.every == 0 or self.count == self.total:
            shown = " ".join(f"{k} {_format_value(v)}" for k, v in values.items())
            self.write(f"[{self.desc}] step {self.count}/{self.total} {shown}".rstrip())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Tracker:
    """Scalars to TensorBoard event files in `log_dir` (when `enabled`) and, with `wandb`
    settings ({project, mode, entity, dir}), to a W&B run named `run_name` whose config is
    `run_config`. Does nothing when neither is on."""

    def __init__(
        self,
        log_dir: str | Path | None,
        enabled: bool = True,
        purge_step: int | None = None,
        wandb: dict | None = None,
        run_name: str | None = None,
        run_config: dict | None = None,
    ):
        self.writer = None
        self.wandb_run = None
        if enabled and log_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(log_dir), purge_step=purge_step or None)
        if wandb:
            self.wandb_run = start_wandb_run(wandb, run_name, run_config)

    def scalars(self, step: int, values: dict) -> None:
        if self.writer is not None:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, global_step=step)
        if self.wandb_run is not None:
            # calls with the same step fill one history row (W&B commits when the step grows)
            self.wandb_run.log(dict(values), step=step)

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def start_wandb_run(settings: dict, name: str | None, config: dict | None):
    """A W&B run with its files in `<settings["dir"]>/wandb/`. Silent, and the console is not
    captured: the job log stays as it is; offline mode never asks for a login."""
    import wandb

    folder = Path(settings.get("dir") or ".")
    folder.mkdir(parents=True, exist_ok=True)
    mode = settings.get("mode", "offline")
    try:
        run = wandb.init(
            project=settings["project"],
            entity=settings.get("entity"),
            mode=mode,
            dir=str(folder),
            name=name,
            config=config,
            settings=wandb.Settings(silent=True, console="off"),
        )
    except (wandb.errors.UsageError, wandb.errors.CommError) as error:
        # wandb's own traceback would bury the one thing the user must change
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise TrackingError(
            f"tracking.wandb.mode: {mode!r} could not start a W&B run ({first_line}); run "
            f"`wandb login` or set WANDB_API_KEY on the machine that runs the job, or use "
            f"mode: offline (no network, no login; `wandb sync` uploads later)"
        ) from None
    print(f"[{name}] W&B {mode} run {run.id} in {folder / 'wandb'}", file=sys.stderr, flush=True)
    return run
