"""A job's log lines and experiment tracking: progress of long loops, third-party noise kept
out, the training loops' progress, TensorBoard and W&B.

Long loops: ProgressLog writes `<what> i/n, <elapsed> elapsed, ETA <remaining>` at most every
EVERY_S (10) seconds, so a job that runs for minutes says every ~10 s how far it is; a loop that
ends sooner says nothing more. One long library call with no steps to count (loading or
converting a model) gets `heartbeat` lines instead (elapsed time, no ETA):

    progress = ProgressLog("[smollm2] loss sweep", len(sets), log, unit="removal sets")
    for removed in sets:
        ...
        progress.step()

Third-party noise: quiet_library_messages drops the library messages that say nothing about a
job (DROPPED_LOG_MESSAGES: bitsandbytes' optional-kernel notice, ...), by logger and message
start, so those loggers' other messages still reach the log; depthlab.cli.start_job installs it.

Training progress (pretraining, healing, fine-tuning): a tqdm bar when stderr is a terminal; in
a job log (not a terminal) plain lines such as
`[lns] step 64/256 loss 5.120 lr 3.00e-03 tok/s 5120, 40.2 s elapsed, ETA 2 min 0 s` every
`every` steps and at the end, since tqdm's carriage returns make a log file unreadable; when
`every` steps take longer than EVERY_S, a line without the values
(`[lns] step 70/256, 50.3 s elapsed, ETA ...`) comes in between, so a long run is never silent
for more than about 10 s (the values are read only at `every` steps: a device sync).

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

import logging
import math
import sys
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from tqdm import tqdm

from depthlab.core.errors import TrackingError

# ---------------------------------------------------------------------------------------------
# Progress lines of any long loop: `<what> i/n, elapsed, ETA`, at most every EVERY_S seconds

# A job log's longest silence while a loop runs (the issue: SmolLM2's prune_model ran 85 s with
# 3 lines); a step that itself takes longer cannot be split, the line comes after it.
EVERY_S = 10.0


def duration_text(seconds: float) -> str:
    """4.2 -> '4.2 s', 75 -> '1 min 15 s', 3725 -> '1 h 2 min'."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s"


def eta_seconds(elapsed: float, done: int, total: int) -> float | None:
    """The time the remaining steps take at the average pace so far (None before a step)."""
    if done <= 0:
        return None
    return elapsed / done * max(total - done, 0)


def timing_text(elapsed: float, done: int, total: int) -> str:
    """'12.0 s elapsed, ETA 28.0 s' after `done` of `total` steps ('done in 40.0 s' at the
    end)."""
    if done >= total:
        return f"done in {duration_text(elapsed)}"
    eta = eta_seconds(elapsed, done, total)
    left = f"ETA {duration_text(eta)}" if eta is not None else "ETA unknown"
    return f"{duration_text(elapsed)} elapsed, {left}"


def progress_text(what: str, done: int, total: int, elapsed: float, unit: str = "") -> str:
    """'<what> 3/10 <unit>, 12.0 s elapsed, ETA 28.0 s' (timing_text)."""
    counted = f"{what} {done}/{total}" + (f" {unit}" if unit else "")
    return f"{counted}, {timing_text(elapsed, done, total)}"


class ProgressLog:
    """Counts a loop's steps and writes progress_text through `log` when EVERY_S (`every_s`)
    seconds passed since the loop began or since its last line, and once at the end when it
    wrote any line before (a loop shorter than `every_s` stays silent)."""

    def __init__(
        self,
        what: str,
        total: int,
        log: Callable[[str], None],
        unit: str = "",
        every_s: float | None = None,
        clock: Callable[[], float] | None = None,
    ):
        self.what, self.total, self.log, self.unit = what, total, log, unit
        # read at each construction, so a test can shorten EVERY_S for a loop deep in a stage
        self.every_s = EVERY_S if every_s is None else every_s
        self.clock = clock or time.monotonic
        self.done = 0
        self.started = self.last = self.clock()
        self.lines = 0

    def step(self, n: int = 1) -> None:
        """`n` more steps done; a line if `every_s` has passed, or the end line."""
        self.done += n
        now = self.clock()
        finished = self.done >= self.total
        if (finished and self.lines) or (not finished and now - self.last >= self.every_s):
            self.log(progress_text(self.what, self.done, self.total, now - self.started, self.unit))
            self.last = now
            self.lines += 1

    def elapsed(self) -> float:
        return self.clock() - self.started


def counted(items, progress: ProgressLog):
    """`items` as they come, a progress step after each (a loop that hands its batches to a
    library function: `analyse(adapter, counted(batches, progress))`)."""
    for item in items:
        yield item
        progress.step()


@contextmanager
def heartbeat(what: str, log: Callable[[str], None], every_s: float | None = None):
    """For one long call that cannot count its own steps (a library loading or converting a
    model): `<what>: still running, 20.0 s elapsed` every `every_s` (EVERY_S) seconds from a
    background thread until the block ends; nothing for a block shorter than that."""
    every = EVERY_S if every_s is None else every_s
    stop = threading.Event()
    started = time.monotonic()

    def beat():
        while not stop.wait(every):
            log(f"{what}: still running, {duration_text(time.monotonic() - started)} elapsed")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# ---------------------------------------------------------------------------------------------
# Third-party messages that say nothing about a job, kept out of its log

# (logger name, message start): why each says nothing about the run
DROPPED_LOG_MESSAGES = (
    # bitsandbytes on an AVX512-BF16 CPU looks for an optional fused 4-bit kernel package and
    # warns when it is missing; no job here quantises to 4 bits
    ("bitsandbytes.backends.cpu.ops", "Failed to load CPU gemm_4bit_forward"),
    # lm-eval's HFLM warns that a model object was passed instead of a name: the pruning, healing
    # and fine-tuning jobs evaluate the model they hold on purpose, in one process
    ("lm_eval.models.huggingface", "`pretrained` model kwarg is not of type `str`"),
    ("lm_eval.models.huggingface", "Passed an already-initialized model through `pretrained`"),
)

# (warning category, message regex): warnings raised inside libraries about other libraries
DROPPED_WARNINGS = (
    # peft reads transformers' deprecated `is_gradient_checkpointing` (LoRA healing)
    (FutureWarning, r"`is_gradient_checkpointing` is deprecated"),
)


class DropMessages(logging.Filter):
    """Drops a logger's records whose message starts with one of `starts`; keeps the rest."""

    def __init__(self, starts):
        super().__init__()
        self.starts = tuple(starts)

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


def quiet_library_messages() -> None:
    """Install DROPPED_LOG_MESSAGES' filters and DROPPED_WARNINGS' ignores (once per logger)."""
    by_logger: dict[str, list[str]] = {}
    for name, start in DROPPED_LOG_MESSAGES:
        by_logger.setdefault(name, []).append(start)
    for name, starts in by_logger.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropMessages) for f in logger.filters):
            logger.addFilter(DropMessages(starts))
    for category, message in DROPPED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


# ---------------------------------------------------------------------------------------------
# The training loops' progress: a bar on a terminal, plain lines in a log

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
        every_s: float = EVERY_S,
        clock=time.monotonic,
    ):
        self.total, self.desc, self.count = total, desc, initial
        # the ETA counts the steps of this process (a resumed run's earlier ones took no time here)
        self.initial, self.clock, self.every_s = initial, clock, every_s
        self.started = self.last_line = clock()
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
            return
        now = self.clock()
        scheduled = self.count % self.every == 0 or self.count == self.total
        if not scheduled and now - self.last_line < self.every_s:
            return
        # between scheduled steps the values may be an earlier step's: left out
        shown = " ".join(f"{k} {_format_value(v)}" for k, v in values.items()) if scheduled else ""
        timing = timing_text(
            now - self.started, self.count - self.initial, self.total - self.initial
        )
        self.write(f"[{self.desc}] step {self.count}/{self.total} {shown}".rstrip() + f", {timing}")
        self.last_line = now

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
