"""The LM task set's settings (`pruning.tasks`, `finetune.tasks` and the lm-eval task names
that score on it): the task kinds the stage builds, their lm-eval names, and the checks the
schema cannot make. Torch- and numpy-free: the resolver runs them while the Snakefile plans the
DAG; the task builder and evaluator (depthlab.stages.lm_tasks) read the same names."""

from __future__ import annotations

from collections.abc import Sequence

TASK_KINDS = ("word_order", "continuation")
TASK_PREFIX = "depthlab_"
# Longest choice, in tokens per word (BPE on docstrings: most words take 1-3 tokens).
MAX_TOKENS_PER_WORD = 3


def task_name(kind: str) -> str:
    return f"{TASK_PREFIX}{kind}"


def validate_task_settings(settings: dict, where: str = "pruning.tasks") -> None:
    """Config-time check of what the schema cannot say about the task-building settings (it
    owns the kinds' names and every count's range): a count of examples and of words for each
    kind built, and words enough for word_order; raises ValueError naming the key."""
    kinds = settings["kinds"]
    examples = settings["examples"]
    for kind in kinds:
        if isinstance(examples, dict) and kind not in examples:
            raise ValueError(
                f"{where}.examples: no count for '{kind}' (one number for every kind, or one "
                f"per task kind of {where}.kinds)"
            )
    words = settings.get("words") or {}
    for kind in kinds:
        if kind not in words:
            raise ValueError(f"{where}.words.{kind}: required for each task of {where}.kinds")
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
