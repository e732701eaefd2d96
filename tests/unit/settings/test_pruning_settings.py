"""The pruning stage's settings (depthlab.settings.pruning): the one rule for a block-size grid,
the checks that name the key they refuse, and the re-encoding caps' defaults read from
config/schema.yaml."""

from __future__ import annotations

import copy
import importlib.util

import pytest
from depthlab.config import ConfigError, resolve
from depthlab.plan.job_costs import pruning_work
from depthlab.plan.model_shapes import pretrain_shape
from depthlab.settings import defaults as schema_defaults
from depthlab.settings.pruning import (
    block_sizes,
    grid,
    retokenize_caps,
    validate_auto_depth_settings,
    validate_pruning_settings,
)


@pytest.fixture(scope="module")
def pruning_spec(test_config):
    """The prune_model spec config/test.yaml resolves to (schema defaults applied)."""
    (spec,) = resolve(test_config).jobs("prune_model").values()
    return spec


def test_null_is_every_n_and_a_list_its_distinct_sizes():
    assert block_sizes(None, 5) == [1, 2, 3, 4]
    assert block_sizes([3, 1, 3], 5) == [1, 3]
    assert grid(None, 5, "k") == [1, 2, 3, 4] and grid([3, 1, 3], 5, "k") == [1, 3]
    with pytest.raises(ValueError, match=r"^k: block size 5 is outside 1\.\.4"):
        grid([1, 5], 5, "k")
    assert block_sizes([1, 5], 5) == [1, 5]  # unchecked: the planner prices checked specs


def test_the_planner_prices_a_null_grid_as_every_n(pruning_spec, test_config):
    """The resource planner reads the same rule: a null grid costs what the list 1..L-1 costs."""
    architecture = {"num_layers": 6, "hidden_size": 32, "intermediate_size": 64, "num_heads": 4}
    shape = pretrain_shape(architecture, 512, 64, "float32")
    spec = {**pruning_spec, "n_grid": None}
    spec["lm_eval"] = {**spec["lm_eval"], "n_grid": None}
    listed = {**spec, "n_grid": [5, 1, 2, 3, 4]}
    listed["lm_eval"] = {**spec["lm_eval"], "n_grid": [1, 2, 3, 4, 5]}
    tasks = test_config["pruning"]["tasks"]
    every, given = (pruning_work("m", s, shape, tasks, 0.0) for s in (spec, listed))
    assert every.flops == given.flops and every.flops
    narrower = {**listed, "n_grid": [1, 2]}
    assert pruning_work("m", narrower, shape, tasks, 0.0).flops != every.flops


def test_the_retokenize_caps_default_is_the_schemas(monkeypatch):
    assert retokenize_caps(None) == {"val_tokens": 1_000_000, "train_tokens": 1_000_000}
    assert retokenize_caps({"val_tokens": 5}) == {"val_tokens": 5, "train_tokens": 1_000_000}
    # written once: a different default in the schema is the default the resolver fills in
    planted = copy.deepcopy(schema_defaults.schema())
    caps = planted["properties"]["pruning"]["properties"]["retokenize"]["properties"]
    caps["train_tokens"]["default"] = 7
    monkeypatch.setattr(schema_defaults, "_schema", lambda: planted)
    assert retokenize_caps({"val_tokens": 5}) == {"val_tokens": 5, "train_tokens": 7}


def test_validation_names_the_key(pruning_spec, test_config, monkeypatch):
    def settings(**overrides):
        return {**pruning_spec, **overrides}

    healing = test_config["pruning"]["healing"]  # the config's section (a heal job's spec)
    validate_pruning_settings(settings(), 12)
    with pytest.raises(ValueError, match=r"pruning\.n_grid: block size 12 >= "):
        validate_pruning_settings(settings(n_grid=[1, 12]), 12)
    with pytest.raises(ValueError, match=r"pruning\.speed\.n_grid"):
        validate_pruning_settings(
            settings(speed={**pruning_spec["speed"], "strategy": "angular", "n_grid": [20]}), 12
        )
    with pytest.raises(ValueError, match=r"pruning\.export\[0\]\.metric"):
        validate_auto_depth_settings(
            {
                **pruning_spec,
                "lm_eval": {**pruning_spec["lm_eval"], "metric": "acc"},
                "auto_depth": {"tolerances": {"val_loss": 0.5}},
                "export": [{"strategy": "angular", "metric": "mean_acc"}],
            }
        )
    # healing's training settings are its family's check (settings.training), which the
    # resolver runs beside these: QLoRA without bitsandbytes passes the schema, not the resolver
    qlora = {**healing, "enabled": True, "methods": ["qlora"]}
    validate_pruning_settings(settings(healing=qlora), 12)
    config = copy.deepcopy(test_config)
    config["pruning"]["healing"] = qlora
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "bitsandbytes" else find_spec(name, *a),
    )
    with pytest.raises(
        ConfigError, match=r"^pruning\.healing\.method: qlora needs the bitsandbytes"
    ):
        resolve(config)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"pruning\.n_grid: block size 3 is outside"):
        grid([3], 3)
