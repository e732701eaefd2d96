"""Narrowing config/default.yaml from an overlay, as docs/configs.md documents it: each documented
`--config` line resolves (before, `pruning={models: [pre_ln]}` failed on the base config's
`pruning.per_model.smollm2`), ignored per_model entries give one note, a misspelled name is still
an error, a stage set to null is off. And config files that cannot be read: one line naming the
file and, where YAML knows it, the line."""

import re
import shlex
from pathlib import Path

import pytest
from depthlab.config import ConfigError, apply_overrides, load_config, load_yaml, resolve

ROOT = Path(__file__).resolve().parents[3]


def documented_narrowings() -> list[list[str]]:
    text = (ROOT / "docs" / "configs.md").read_text()
    section = text[text.index("## Narrowing a config from an overlay") :]
    section = section[: section.index("\n## ", 1)]
    commands = re.findall(r"^\.venv/bin/snakemake -n --config (.+)$", section, re.M)
    assert len(commands) >= 7
    return [shlex.split(command) for command in commands]


@pytest.fixture(scope="module")
def default_config():
    return load_config(ROOT / "config" / "default.yaml")


def overlaid(config, items):
    return apply_overrides(config, dict(item.split("=", 1) for item in items))


@pytest.mark.parametrize("items", documented_narrowings(), ids=" ".join)
def test_each_documented_narrowing_resolves(default_config, items):
    resolved = resolve(overlaid(default_config, items), ROOT)
    assert resolved.jobs("pretrain_model")  # the rest of the config is kept


def test_narrowing_pruning_ignores_the_other_models_settings_with_one_note(default_config):
    resolved = resolve(overlaid(default_config, ["pruning={models: [pre_ln]}"]), ROOT)
    assert sorted(resolved.jobs("prune_model")) == ["pre_ln_s0", "pre_ln_s1", "pre_ln_s2"]
    assert resolved.notes == [
        "pruning.per_model: the settings of smollm2 are ignored (not in pruning.models)"
    ]


def test_a_misspelled_per_model_name_is_still_an_error(default_config):
    items = ["pruning={models: [pre_ln], per_model: {smolm2: {n_grid: [1]}}}"]
    with pytest.raises(ConfigError, match=r"^pruning\.per_model\.smolm2: 'smolm2' is not a "):
        resolve(overlaid(default_config, items), ROOT)


def test_a_stage_set_to_null_is_off(default_config):
    resolved = resolve(overlaid(default_config, ["pruning=null", "finetune=null"]), ROOT)
    assert not resolved.jobs("prune_model") and not resolved.jobs("finetune_model")
    assert resolved.jobs("analyse_model")


def test_null_removes_a_per_model_entry(default_config):
    resolved = resolve(overlaid(default_config, ["pruning={per_model: {smollm2: null}}"]), ROOT)
    base = resolve(default_config, ROOT)
    assert resolved.jobs("prune_model")["smollm2"] != base.jobs("prune_model")["smollm2"]


BROKEN = {
    "empty.yaml": ("", r"empty\.yaml: empty \(a config is a mapping of keys"),
    "comment.yaml": ("# nothing\n", r"comment\.yaml: empty"),
    "list.yaml": ("- a\n- b\n", r"list\.yaml:1: a config is a mapping of keys, got a list"),
    "text.yaml": ("just words\n", r"text\.yaml:1: a config is a mapping of keys, got a string"),
    "tab.yaml": (
        "run_name: x\npretrain:\n\tsteps: 3\n",
        r"tab\.yaml:3: not valid YAML: a tab indents this line",
    ),
    "brace.yaml": (
        "run_name: x\npruning: {models: [pre_ln]\n",
        r"brace\.yaml:3: not valid YAML: expected ',' or '}', but got '<stream end>' "
        r"\(while parsing a flow mapping started at line 2\)",
    ),
    "twice.yaml": ("a: 1\na: 2\n", r"twice\.yaml:2: key 'a' appears twice"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_config_file_that_cannot_be_read_is_one_line_naming_it(tmp_path, name):
    text, message = BROKEN[name]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_yaml(path)
    assert re.match(f"^{re.escape(str(tmp_path))}/{message}", str(error.value))
    assert "\n" not in str(error.value)


def test_a_folder_or_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"is a folder, not a config file$"):
        load_yaml(tmp_path)
    with pytest.raises(ConfigError, match=r"nope\.yaml: config file not found$"):
        load_yaml(tmp_path / "nope.yaml")


def test_a_dotted_override_sets_the_nested_key_and_a_bad_value_names_it(default_config):
    config = apply_overrides(default_config, {"pretrain.steps": "64"})
    assert config["pretrain"]["steps"] == 64 and config["pretrain"]["lr"] == 0.003
    with pytest.raises(
        ConfigError, match=r"^pretrain\.steps: 'abc' is not of type 'integer' \(in --config\)$"
    ):
        resolve(apply_overrides(default_config, {"pretrain.steps": "abc"}), ROOT)


def test_analysis_off_names_the_stage_that_still_reads_it(default_config):
    """Before: `lens_swaps.text_sets: 'val' is not a text set of analysis.text_sets`."""
    with pytest.raises(ConfigError, match=r"^lens_swaps: .* but analysis is off; switch"):
        resolve(overlaid(default_config, ["analysis=null"]), ROOT)
    resolved = resolve(overlaid(default_config, ["analysis=null", "lens_swaps=null",
                                                 "pruning=null"]), ROOT)  # fmt: skip
    assert not resolved.jobs("analyse_model") and resolved.jobs("skip_interventions")
