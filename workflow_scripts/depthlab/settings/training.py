"""The settings family of every training run: pretraining (`train:` of a model,
depthlab.stages.pretrain.settings.TrainSettings), fine-tuning (`finetune.train`,
depthlab.stages.finetune.finetuning.FinetuneSettings) and healing (`pruning.healing`,
HealSettings here), all trained by depthlab.stages.train_loop.TrainingLoop.

`TrainingSettings` holds what every run sets (steps, batch, sequence length, learning rate and
its warmup + cosine or constant schedule, weight decay) and the one `from_dict`, whose errors
name the offending key under the run's config section. `RunSettings` adds what a resumable run
with a train log sets (AdamW betas, clipping, evaluation, log and checkpoint intervals,
precision): pretraining and fine-tuning. `HealSettings` adds healing's adapters and memory
settings, and healing's config-time checks live beside it. Every type, range and enum of these
settings (the schedules, the methods, rank >= 1, 0 <= dropout < 1, ...) is config/schema.yaml's:
a spec is built from a validated config, so the code here checks only what the schema cannot.

No torch or numpy here: the Snakefile checks every heal job's settings on each invocation
(validate_healing_settings, called by the pruning resolver), and the stages import the same
classes.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import ClassVar

from depthlab.core.errors import ConfigError, PruningError


@dataclass(frozen=True, kw_only=True)
class TrainingSettings:
    """What every training run sets. A subclass names its config section (`section`, the prefix
    of its error messages), the error type it raises and what its settings are called."""

    section: ClassVar[str] = "train"
    error: ClassVar[type[Exception]] = ConfigError
    noun: ClassVar[str] = "training"

    steps: int
    batch_size: int
    seq_len: int
    lr: float
    warmup_steps: int
    min_lr_ratio: float
    weight_decay: float
    schedule: str = "cosine"  # after the linear warmup: cosine to min_lr_ratio, or constant

    @classmethod
    def from_dict(cls, values: dict, where: str | None = None):
        """The settings of a config section's `values` (keys that are not settings, and every
        value's type and range, are the schema's); `where` (default: the class's section)
        prefixes the error, one line, naming a missing setting: a section the schema does not
        require whole (pruning.healing, required only when enabled, merged with a model's
        per_model override) may lack one."""
        where = where or cls.section
        missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in values]
        if missing:
            raise cls.error(f"{where}.{missing[0]}: missing {cls.noun} setting")
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len


def lr_multiplier(step: int, settings: TrainingSettings) -> float:
    """Linear warmup to 1, then cosine decay to min_lr_ratio at the last step (or, schedule
    constant, 1 after the warmup)."""
    if settings.warmup_steps and step < settings.warmup_steps:
        return (step + 1) / settings.warmup_steps
    if settings.schedule == "constant":
        return 1.0
    decay_steps = max(1, settings.steps - settings.warmup_steps)
    progress = min(1.0, (step - settings.warmup_steps) / decay_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return settings.min_lr_ratio + (1.0 - settings.min_lr_ratio) * cosine


class StepSet:
    """The steps 1..last at which a run evaluates, without listing them: every `every`-th step,
    the last step and `extra` steps (within 1..last). A lazy set, so its memory does not grow
    with the number of steps: `step in steps` is arithmetic, iteration yields them in order."""

    def __init__(self, last: int, every: int, extra=()):
        self.last, self.every = int(last), int(every)
        self.extra = frozenset(s for s in extra if 1 <= s <= self.last)

    def __contains__(self, step) -> bool:
        return 1 <= step <= self.last and (
            step % self.every == 0 or step == self.last or step in self.extra
        )

    def __iter__(self):
        extra = iter(sorted(s for s in self.extra if s % self.every and s != self.last))
        pending = next(extra, None)
        for step in range(self.every, self.last + 1, self.every):
            while pending is not None and pending < step:
                yield pending
                pending = next(extra, None)
            yield step
        while pending is not None:
            yield pending
            pending = next(extra, None)
        if self.last % self.every:
            yield self.last

    def __len__(self) -> int:
        extra = sum(1 for s in self.extra if s % self.every and s != self.last)
        return self.last // self.every + bool(self.last % self.every) + extra

    def __bool__(self) -> bool:
        return self.last >= 1

    def __repr__(self) -> str:
        return f"StepSet(last={self.last}, every={self.every}, extra={sorted(self.extra)})"


@dataclass(frozen=True, kw_only=True)
class RunSettings(TrainingSettings):
    """A resumable run with a train log and held-out evaluations (pretraining, fine-tuning)."""

    beta1: float
    beta2: float
    grad_clip: float | None
    eval_every: int
    log_every: int
    checkpoint_every: int
    precision: str


# --------------------------------------------------------------------------- healing


# the methods (config/schema.yaml: lora, qlora, full) that train LoRA adapters (rank, alpha,
# dropout, target_modules); `full` is continued pretraining: every weight trained, no adapters
ADAPTER_METHODS = ("lora", "qlora")
# the keys of pruning.healing that choose the heal jobs rather than set one job's training
JOB_CHOICE_KEYS = ("strategies", "n_grid", "methods", "full_lr")


@dataclass(frozen=True, kw_only=True)
class HealSettings(TrainingSettings):
    """One heal job's settings (pruning.healing, one method's: method_settings)."""

    section: ClassVar[str] = "pruning.healing"
    error: ClassVar[type[Exception]] = PruningError
    noun: ClassVar[str] = "healing"

    schedule: str = field()  # required here (no default): the healing section names it
    method: str
    rank: int
    alpha: float
    dropout: float
    target_modules: tuple
    # memory at scale (optional keys: absent, a config's jobs keep their specs): rows per
    # forward/backward, the step's gradient accumulated over them; recompute each layer's
    # activations in the backward pass instead of keeping them
    micro_batch_size: int | None = None
    gradient_checkpointing: bool = False

    def __post_init__(self):
        object.__setattr__(self, "target_modules", tuple(self.target_modules))

    # The training loop's settings for healing: every step's loss comes to the host and is
    # logged (the record's first and last losses, the per-step scalars), no gradient clipping,
    # no resumable state (a heal job is minutes; it restarts from the pruned model).
    log_every: ClassVar[int] = 1
    grad_clip: ClassVar[float | None] = None
    checkpoint_every: ClassVar[int | None] = None


def healing_methods(healing: dict) -> list:
    """The healing methods of a healing section, one heal_pruned job each per (strategy, n):
    pruning.healing.methods, absent: [method] (the first method's jobs keep the names
    `<strategy>_n<n>`, the others' are `<strategy>_n<n>_<method>`)."""
    methods = healing.get("methods")
    return [healing.get("method")] if methods is None else list(methods)


def method_settings(healing: dict, method: str) -> dict:
    """One method's heal job settings: the section without the keys that choose the jobs, its
    `method`, and for `full` the learning rate `full_lr` when given (continued pretraining
    updates every weight directly, where an adapter lr is tuned for a low-rank update that
    starts at zero and is scaled by alpha / rank; Kim et al. retrain with a rate of its own).
    A section without `methods` or `full_lr` gives its first method today's settings exactly."""
    values = {k: v for k, v in healing.items() if k not in JOB_CHOICE_KEYS}
    if method is not None:  # None: a section without a method, refused as missing
        values["method"] = method
    if method == "full" and healing.get("full_lr") is not None:
        values["lr"] = healing["full_lr"]
    return values


def validate_healing_settings(values: dict, where: str = "pruning.healing") -> None:
    """Config-time check (ValueError naming the key) of what the schema cannot see in the
    healing section a model's jobs get (pruning.healing merged with its per_model override):
    every method's settings present (methods, absent: [method]) and, for QLoRA, bitsandbytes
    installed."""
    for method in healing_methods(values):
        settings = HealSettings.from_dict(method_settings(values, method), where)
        if settings.method == "qlora":
            import importlib.util

            if importlib.util.find_spec("bitsandbytes") is None:
                raise PruningError(f"{where}.method: qlora needs the bitsandbytes package")
