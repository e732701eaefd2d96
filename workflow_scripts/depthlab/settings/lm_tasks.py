"""The LM task set's settings (`pruning.tasks`, `finetune.tasks` and the lm-eval task names
that score on it): the task kinds the stage builds, their lm-eval names, and the checks the
schema cannot make. Torch- and numpy-free: the resolver runs them while the Snakefile plans the
DAG; the task builder and evaluator (depthlab.stages.pruning.lm_tasks) read the same names."""

from __future__ import annotations

from collections.abc import Sequence

from depthlab.core.errors import check_names

TASK_KINDS = ("word_order", "continuation")
TASK_PREFIX = "depthlab_"
# Longest choice, in tokens per word (BPE on docstrings: most words take 1-3 tokens).
MAX_TOKENS_PER_WORD = 3


def task_name(kind: str) -> str:
    return f"{TASK_PREFIX}{kind}"


def validate_task_settings(settings: dict, where: str = "pruning.tasks") -> None:
    """Config-time check of the task-building settings; raises ValueError naming the key."""
    kinds = settings.get("kinds")
    check_names(kinds, TASK_KINDS, f"{where}.kinds", "task")
    examples = settings.get("examples")
    for kind in kinds:
        value = examples.get(kind) if isinstance(examples, dict) else examples
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                f"{where}.examples: an integer >= 1 (or one per task kind) for "
                f"'{kind}' (got {value!r})"
            )
    for key in ("context_tokens", "max_per_document"):
        value = settings.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{where}.{key}: must be an integer >= 1 (got {value!r})")
    words = settings.get("words") or {}
    for kind in kinds:
        value = words.get(kind)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{where}.words.{kind}: must be an integer >= 1 (got {value!r})")
    if "word_order" in kinds and words["word_order"] < 3:
        raise ValueError(f"{where}.words.word_order: at least 3 words give four orders")


def validate_task_names(
    names: Sequence[str] | None, kinds: Sequence[str], where: str = "pruning.lm_eval.tasks"
) -> None:
    """Config-time check that the tasks lm-eval is asked for are among those the task-building
    job will write (depthlab_<kind> for the configured kinds); raises ValueError naming the key."""
    built = [task_name(k) for k in kinds]
    for name in names or []:
        if name not in built:
            raise ValueError(
                f"{where}: task '{name}' is not built (pruning.tasks.kinds makes "
                f"{', '.join(built)})"
            )
