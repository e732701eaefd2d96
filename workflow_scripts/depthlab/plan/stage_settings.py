"""Config-time checks of healing's settings (pruning.healing: the methods, HealSettings). The
other stages' settings live in depthlab.settings; these join the training-settings family. No
torch here: the Snakefile resolves every job's spec through these checks on each invocation.
"""

from __future__ import annotations

import numbers
from dataclasses import MISSING, dataclass, fields

from depthlab.core.errors import PruningError

# --------------------------------------------------------------------------- healing


METHODS = ("lora", "qlora", "full")
# the methods that train LoRA adapters (rank, alpha, dropout, target_modules); `full` is
# continued pretraining: every weight of the pruned model trained, no adapters
ADAPTER_METHODS = ("lora", "qlora")
# the keys of pruning.healing that choose the heal jobs rather than set one job's training
JOB_CHOICE_KEYS = ("strategies", "n_grid", "methods", "full_lr")


SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class HealSettings:
    method: str
    rank: int
    alpha: float
    dropout: float
    target_modules: tuple
    steps: int
    batch_size: int
    seq_len: int
    lr: float
    warmup_steps: int
    min_lr_ratio: float
    schedule: str
    weight_decay: float
    # memory at scale (optional keys: absent, a config's jobs keep their specs): rows per
    # forward/backward, the step's gradient accumulated over them; recompute each layer's
    # activations in the backward pass instead of keeping them
    micro_batch_size: int | None = None
    gradient_checkpointing: bool = False

    @classmethod
    def from_dict(cls, values: dict, where: str = "pruning.healing") -> HealSettings:
        names = [f.name for f in fields(cls) if f.name in values or f.default is MISSING]
        missing = [n for n in names if n not in values]
        if missing:
            raise PruningError(f"{where}.{missing[0]}: missing healing setting")
        settings = cls(
            **{n: values[n] for n in names if n != "target_modules"},
            target_modules=tuple(values["target_modules"]),
        )
        if settings.method not in METHODS:
            raise PruningError(
                f"{where}.method: unknown method '{settings.method}' (known: {', '.join(METHODS)})"
            )
        if settings.schedule not in SCHEDULES:
            raise PruningError(
                f"{where}.schedule: unknown schedule '{settings.schedule}' "
                f"(known: {', '.join(SCHEDULES)})"
            )
        return settings


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


def _check_methods(values: dict, where: str) -> None:
    methods = values.get("methods")
    if methods is not None:
        if not isinstance(methods, list | tuple) or not methods:
            raise PruningError(
                f"{where}.methods: a non-empty list of {', '.join(METHODS)} (got {methods!r})"
            )
        for method in methods:
            if method not in METHODS:
                raise PruningError(
                    f"{where}.methods: unknown method {method!r} (known: {', '.join(METHODS)})"
                )
        if len(set(methods)) != len(methods):
            raise PruningError(f"{where}.methods: {list(methods)} names a method twice")
    full_lr = values.get("full_lr")
    if full_lr is not None and not (
        isinstance(full_lr, numbers.Real) and not isinstance(full_lr, bool) and full_lr > 0
    ):
        raise PruningError(f"{where}.full_lr: must be > 0 (got {full_lr!r})")


def validate_healing_settings(values: dict, where: str = "pruning.healing") -> None:
    """Config-time check (ValueError naming the key) of every method's settings (methods,
    absent: [method]); QLoRA needs bitsandbytes installed."""
    _check_methods(values, where)
    for method in healing_methods(values):
        _check_method_settings(method_settings(values, method), where)


def _check_method_settings(values: dict, where: str) -> None:
    settings = HealSettings.from_dict(values, where)
    for key in ("rank", "steps", "batch_size", "seq_len"):
        value = getattr(settings, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PruningError(f"{where}.{key}: must be an integer >= 1 (got {value!r})")
    for key in ("alpha", "lr"):
        if not getattr(settings, key) > 0:
            raise PruningError(f"{where}.{key}: must be > 0 (got {getattr(settings, key)!r})")
    if not 0 <= settings.dropout < 1:
        raise PruningError(f"{where}.dropout: must be in [0, 1) (got {settings.dropout!r})")
    if not 0 <= settings.min_lr_ratio <= 1:
        raise PruningError(f"{where}.min_lr_ratio: must be in [0, 1]")
    if not isinstance(settings.warmup_steps, int) or settings.warmup_steps < 0:
        raise PruningError(f"{where}.warmup_steps: must be an integer >= 0")
    if settings.method == "qlora":
        import importlib.util

        if importlib.util.find_spec("bitsandbytes") is None:
            raise PruningError(f"{where}.method: qlora needs the bitsandbytes package")
    if not settings.target_modules:
        raise PruningError(f"{where}.target_modules: name at least one module")
    micro = settings.micro_batch_size
    if micro is not None and (not isinstance(micro, int) or isinstance(micro, bool) or micro < 1):
        raise PruningError(f"{where}.micro_batch_size: must be an integer >= 1 (got {micro!r})")
