"""The LM task set's settings (depthlab.settings.lm_tasks): unknown kinds, too few words to
reorder and task names the set does not build are refused naming the key."""

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
    with pytest.raises(ValueError, match=r"pruning\.tasks\.kinds: unknown task 'cloze'"):
        validate_task_settings({**good, "kinds": ["cloze"]})
    with pytest.raises(ValueError, match=r"pruning\.tasks\.words\.word_order: at least 3"):
        validate_task_settings({**good, "words": {"word_order": 2}})
    validate_task_names(["depthlab_word_order"], ["word_order", "continuation"])
    with pytest.raises(ValueError, match=r"pruning\.lm_eval\.tasks: task 'depthlab_cont"):
        validate_task_names(["depthlab_continuation"], ["word_order"])
