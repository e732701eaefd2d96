"""The lens_swaps section: its jobs' specs, and every bad value rejected naming its key."""

import copy
from pathlib import Path

import pytest
from depthlab.config import ConfigError, load_config, resolve

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def test_yaml():
    return load_config(ROOT / "config" / "test.yaml")


@pytest.fixture(scope="module")
def default_yaml():
    return load_config(ROOT / "config" / "default.yaml")


def rejects(config: dict, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        resolve(config)


def test_test_config_jobs(test_yaml):
    jobs = resolve(test_yaml).jobs("lens_swaps")
    assert sorted(jobs) == ["lns", "pre_ln"]
    spec = jobs["pre_ln"]
    assert spec["train_data"] == "results/test/data"
    assert spec["text_sets"] == {
        "val": {
            "source": "jsonl",
            "path": "results/test/data/val.jsonl",
            "input": "results/test/data",
        }
    }
    assert spec["tuned_lens"] == {"train_tokens": 256, "steps": 8, "batch_tokens": 64, "lr": 1e-3}
    assert spec["out"] == "results/test/lens_swaps/pre_ln"
    assert spec["add_special_tokens"] is False
    # the figure is its own job's, drawn from the lens job's tables (a redraw trains no lens)
    assert "figure" not in spec
    resolved = resolve(test_yaml)
    plots = resolved.jobs("plot_lens_swaps")
    assert sorted(plots) == ["lns", "pre_ln"]
    assert plots["pre_ln"] == {
        "model_name": "pre_ln",
        "lens_swaps": "results/test/lens_swaps/pre_ln",
        "text_sets": ["val"],
        "figure": "results/test/figures/lens_swaps/pre_ln.png",
    }
    assert resolved.inputs["plot_lens_swaps"]["pre_ln"] == {
        "lens_swaps": ["results/test/lens_swaps/pre_ln"]
    }
    assert resolved.wildcards["plot_lens_swaps"]["pre_ln"] == {"model": "pre_ln"}


def test_default_config_per_model(default_yaml):
    resolved = resolve(default_yaml)
    jobs = resolved.jobs("lens_swaps")
    assert sorted(jobs) == sorted([f"pre_ln_s{s}" for s in range(3)] + ["smollm2"])
    smollm2 = jobs["smollm2"]
    assert list(smollm2["text_sets"]) == ["val_0", "val_1", "val_2", "val_3"]
    assert smollm2["text_sets"]["val_2"]["shard"] == [2, 4]
    # a partial tuned_lens override keeps the section's other keys
    assert smollm2["tuned_lens"]["lr"] == default_yaml["lens_swaps"]["tuned_lens"]["lr"]
    assert smollm2["tuned_lens"]["steps"] == 4
    # its figure reads the four shards' tables, in the job's text-set order
    plot = resolved.jobs("plot_lens_swaps")["smollm2"]
    assert plot["text_sets"] == ["val_0", "val_1", "val_2", "val_3"]
    assert smollm2["add_special_tokens"] is True and smollm2["seed"] == 0
    assert jobs["pre_ln_s2"]["seed"] == 2
    # the claims read every job's text sets, grouped by seed group
    claims = resolved.jobs("make_claims")["claims"]["lens_swaps"]
    assert claims["groups"]["pre_ln"] == ["pre_ln_s0", "pre_ln_s1", "pre_ln_s2"]
    assert claims["folders"]["smollm2"][3] == "results/default/lens_swaps/smollm2/val_3"


def test_without_the_section_nothing_changes(test_yaml):
    config = copy.deepcopy(test_yaml)
    del config["lens_swaps"]
    resolved = resolve(config)
    assert resolved.jobs("lens_swaps") == {}
    assert resolved.jobs("plot_lens_swaps") == {}
    assert "lens_swaps" not in resolved.jobs("make_claims")["claims"]


@pytest.mark.parametrize(
    "change, pattern",
    [
        (lambda c: c.__setitem__("text_sets", ["nope"]),
         r"^lens_swaps\.text_sets: 'nope' is not a text set of analysis\.text_sets"),
        (lambda c: c.__setitem__("models", ["nope"]), r"^lens_swaps\.models"),
        (lambda c: c.__setitem__("stride", 0), r"lens_swaps\.stride"),
        (lambda c: c["tuned_lens"].__setitem__("lr", 0), r"lens_swaps\.tuned_lens\.lr"),
        (lambda c: c["tuned_lens"].__setitem__("batch_tokens", 512),
         r"^lens_swaps\.tuned_lens\.batch_tokens: 512 tokens per step exceed the 256 train "
         r"tokens \(lens_swaps\.tuned_lens\.train_tokens\)"),
        (lambda c: c.__setitem__("per_model", {"lns": {"text_sets": ["x"]}}),
         r"^lens_swaps\.per_model\.lns\.text_sets: 'x' is not a text set"),
        (lambda c: c.__setitem__("per_model", {"lns": {"tuned_lens": {"batch_tokens": 300}}}),
         r"^lens_swaps\.per_model\.lns\.tuned_lens\.batch_tokens: 300"),
        (lambda c: c.__setitem__("per_model", {"other": {"stride": 2}}),
         r"^lens_swaps\.per_model\.other: 'other' is not a declared model"),
        (lambda c: c.__setitem__("bogus", 1), r"lens_swaps"),
    ],
)  # fmt: skip
def test_bad_values_name_their_key(test_yaml, change, pattern):
    config = copy.deepcopy(test_yaml)
    change(config["lens_swaps"])
    rejects(config, pattern)


def test_a_model_without_lm_head_is_rejected(default_yaml):
    config = copy.deepcopy(default_yaml)
    config["lens_swaps"]["models"] = ["minilm"]
    del config["lens_swaps"]["per_model"]
    rejects(config, r"^lens_swaps\.models: 'minilm' has no LM head")
