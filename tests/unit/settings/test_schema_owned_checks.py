"""One check in one place: the types, ranges and enums of the stage settings are
config/schema.yaml's alone. The settings code (depthlab.settings) once restated them (rank >= 1,
0 <= dropout < 1, the known methods, ...); every spec is built from a validated config, so those
checks are gone from it, and each value they refused is refused here by the schema, naming the
key. What the schema cannot see stays in the settings code: a key a per_model override leaves
missing when it enables a section the stage left incomplete."""

from __future__ import annotations

import copy
import re

import pytest
from depthlab.config import ConfigError, load_config, resolve, validate_schema
from depthlab.config.load import REPO_ROOT


@pytest.fixture(scope="module")
def default_config():
    """config/default.yaml: every stage on, fine-tuning and pruning.retokenize included."""
    return load_config(REPO_ROOT / "config" / "default.yaml")


def _set(config: dict, key: str, value) -> dict:
    config = copy.deepcopy(dict(config))
    *parents, last = key.split(".")
    section = config
    for part in parents:
        section = section[part]
    section[last] = value
    return config


# (key, value the settings code used to refuse as well, what the schema says)
REFUSED = [
    # healing's training settings (settings.training)
    ("pruning.healing.schedule", "linear", "is not one of"),
    ("pruning.healing.method", "dora", "is not one of"),
    ("pruning.healing.methods", ["lora", "cpt"], "is not one of"),
    ("pruning.healing.methods", [], "should be non-empty"),
    ("pruning.healing.methods", ["lora", "lora"], "non-unique"),
    ("pruning.healing.full_lr", 0.0, "less than or equal to the minimum of 0"),
    ("pruning.healing.rank", 0, "less than the minimum of 1"),
    ("pruning.healing.steps", 0, "less than the minimum of 1"),
    ("pruning.healing.batch_size", 0, "less than the minimum of 1"),
    ("pruning.healing.seq_len", 1, "less than the minimum of 2"),
    ("pruning.healing.alpha", 0, "less than or equal to the minimum of 0"),
    ("pruning.healing.lr", 0, "less than or equal to the minimum of 0"),
    ("pruning.healing.dropout", 1.5, "greater than or equal to the maximum of 1"),
    ("pruning.healing.min_lr_ratio", 1.5, "greater than the maximum of 1"),
    ("pruning.healing.warmup_steps", -1, "less than the minimum of 0"),
    ("pruning.healing.target_modules", [], "should be non-empty"),
    ("pruning.healing.micro_batch_size", 0, "less than the minimum of 1"),
    # pruning (settings.pruning)
    ("pruning.strategies", ["angular", "random"], "is not one of"),
    ("pruning.strategies", [], "should be non-empty"),
    ("pruning.n_grid", [], "should be non-empty"),
    ("pruning.n_grid", [0], "less than the minimum of 1"),
    ("pruning.val.windows", 0, "less than the minimum of 1"),
    ("pruning.val.loss_tokens", 0, "less than the minimum of 1"),
    ("pruning.greedy_max_n", 0, "less than the minimum of 1"),
    ("pruning.retokenize", {"val_token": 5}, "unknown key"),
    ("pruning.retokenize.val_tokens", 0, "less than the minimum of 1"),
    ("pruning.lm_eval.batch_size", 0, "less than the minimum of 1"),
    ("pruning.speed.repeats", 0, "less than the minimum of 1"),
    ("pruning.calibration.seq_len", 1, "less than the minimum of 2"),
    ("pruning.sublayer", {"enabled": True, "max_units": 2, "steps": 1}, "unknown key"),
    ("pruning.sublayer.enabled", "yes", "is not of type 'boolean'"),
    ("pruning.lm_eval.metric", "f1", "is not one of"),
    ("pruning.auto_depth.tolerances", {"val_loss": -0.1}, "less than the minimum of 0"),
    # the LM task set (settings.lm_tasks), pruning's and fine-tuning's
    ("pruning.tasks.kinds", ["cloze"], "is not one of"),
    ("pruning.tasks.examples", 0, "less than the minimum of 1"),
    ("pruning.tasks.context_tokens", 0, "less than the minimum of 1"),
    ("pruning.tasks.max_per_document", 0, "less than the minimum of 1"),
    ("pruning.tasks.words", {"word_order": 0, "continuation": 1}, "less than the minimum of 1"),
    ("finetune.data.tasks.kinds", ["cloze"], "is not one of"),
    ("finetune.data.tasks.context_tokens", 0, "less than the minimum of 1"),
    # depth use (settings.depth_use)
    ("depth_use.skip.variants", ["layer_all", "neuron_all"], "is not one of"),
    ("depth_use.skip.variants", [], "should be non-empty"),
    ("depth_use.skip.variants", ["layer_all", "layer_all"], "non-unique"),
    ("depth_use.skip.no_skip_front", -1, "less than the minimum of 0"),
    ("depth_use.skip.future_positions", 0, "less than the minimum of 1"),
    ("depth_use.skip.future_min_position", 0, "less than the minimum of 1"),
    ("depth_use.skip.max_rows", 0, "less than the minimum of 1"),
    ("depth_use.skip.layers", [], "should be non-empty"),  # a bound added to the schema
    ("depth_use.skip.layers", [-1], "less than the minimum of 0"),
    ("depth_use.depth_score.variant", "mlp_future", "is not one of"),
    ("depth_use.linear_maps.alphas", [0.0, float("inf")], "not a finite number"),
]


@pytest.mark.parametrize(
    ("key", "value", "says"), REFUSED, ids=[f"{k}={v!r}" for k, v, _ in REFUSED]
)
def test_the_schema_refuses_what_the_settings_code_no_longer_restates(
    default_config, key, value, says
):
    validate_schema(default_config)  # the base is valid: the one change below is refused
    with pytest.raises(ConfigError) as raised:
        validate_schema(_set(default_config, key, value))
    message = str(raised.value)
    assert re.match(rf"{re.escape(key)}[.\[:]", message), message
    assert says in message, message


def test_a_per_model_override_still_completes_what_it_enables(test_config):
    """The schema requires speed's settings only where pruning.speed is enabled, and cannot see
    a model's override enable it: the settings code names the missing key."""
    config = copy.deepcopy(dict(test_config))
    (model,) = config["pruning"]["models"]
    config["pruning"]["speed"] = {"enabled": False, "strategy": "deepest", "n_grid": [1]}
    config["pruning"]["per_model"] = {model: {"speed": {"enabled": True}}}
    validate_schema(config)
    with pytest.raises(ConfigError, match=r"^pruning\.speed\.batch_size: missing \(set it in"):
        resolve(config)
    # a sub-layer search given only in the override must say whether it runs
    config = copy.deepcopy(dict(test_config))
    del config["pruning"]["sublayer"]
    config["pruning"]["per_model"] = {model: {"sublayer": {"max_units": 3}}}
    validate_schema(config)
    with pytest.raises(ConfigError, match=r"^pruning\.sublayer\.enabled: missing"):
        resolve(config)
    # calibration windows given only in the override, incomplete (before: a KeyError)
    config = copy.deepcopy(dict(test_config))
    del config["pruning"]["calibration"]
    config["pruning"]["strategies"] = ["angular", "deepest"]
    config["pruning"]["per_model"] = {model: {"calibration": {"windows": 4}}}
    validate_schema(config)
    with pytest.raises(ConfigError, match=r"^pruning\.calibration\.seq_len: missing"):
        resolve(config)
