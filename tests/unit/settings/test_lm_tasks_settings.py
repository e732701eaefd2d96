"""The LM task set's settings (depthlab.settings.lm_tasks): a kind without its counts, too few
words to reorder and task names the set does not build are refused naming the key (unknown kinds
and counts below 1 are the schema's: test_schema_owned_checks.py)."""

from __future__ import annotations

import pytest
from depthlab.settings.lm_tasks import task_name, validate_task_names, validate_task_settings


def test_task_settings_and_names_are_checked_naming_the_key():
    assert task_name("word_order") == "depthlab_word_order"
    good = {
        "kinds": ["word_order"],
        "examples": 8,
        "words": {"word_order": 4},
        "context_tokens": 8,
        "max_per_document": 1,
    }
    validate_task_settings(good)
    # per task kind, each kind built needs its count (the schema cannot tie the two keys)
    with pytest.raises(ValueError, match=r"^pruning\.tasks\.examples: no count for 'continuation'"):
        validate_task_settings(
            {**good, "kinds": ["word_order", "continuation"], "examples": {"word_order": 8}}
        )
    with pytest.raises(ValueError, match=r"^pruning\.tasks\.words\.continuation: required"):
        validate_task_settings({**good, "kinds": ["word_order", "continuation"]})
    with pytest.raises(ValueError, match=r"pruning\.tasks\.words\.word_order: at least 3"):
        validate_task_settings({**good, "words": {"word_order": 2}})
    validate_task_names(["depthlab_word_order"], ["word_order", "continuation"])
    with pytest.raises(ValueError, match=r"pruning\.lm_eval\.tasks: task 'depthlab_cont"):
        validate_task_names(["depthlab_continuation"], ["word_order"])
