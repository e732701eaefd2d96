"""Switching things off from an overlay with null (docs/configs.md, "Switching things off"):
every key config/schema.yaml lets null switch off or remove, a model removed while stages still
name it (dropped from them, one note), the issue's cases on config/default.yaml, the narrowing
note, the misspelled model's suggestion, and the command-line form once through Snakemake."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from depthlab.config import ConfigError, apply_overrides, load_config, resolve
from depthlab.config.switch_off import drop_removed_entries, null_keys

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def default_config():
    return load_config(ROOT / "config" / "default.yaml")


def nested(path: tuple, value) -> dict:
    for part in reversed(path):
        value = {part: value}
    return value


def lookup(config: dict, path: tuple):
    for part in path:
        if not isinstance(config, dict) or part not in config:
            return "absent"
        config = config[part]
    return config


TEST_CONFIG = load_config(ROOT / "config" / "test.yaml")
CONFIGS = {"test": TEST_CONFIG, "default": load_config(ROOT / "config" / "default.yaml")}
NULL_KEYS = [(name, path) for name, config in CONFIGS.items() for path in null_keys(config)]


def test_the_schema_walk_finds_each_kind_of_switch():
    keys = {".".join(path) for path in null_keys(TEST_CONFIG)}
    # a stage, a model, a sweep, a fit, a text set, a problem family, a pair, an optional section
    assert {
        "depth_use", "toy", "models.depth_problems", "sweeps.depth_width", "scaling.fits.sweep",
        "analysis.text_sets.val", "depth_use.problems.families.hops",
        "depth_use.linear_maps.pairs.l1_to_l2_m32", "pruning.calibration", "depth_use.problems",
    } <= keys  # fmt: skip
    # required keys and number entries are not switches: null there is the schema's to refuse
    assert not keys & {"pretrain", "run_name", "pruning.val", "pruning.tasks.words.word_order"}


@pytest.mark.parametrize(
    ("config", "path"), NULL_KEYS, ids=[f"{c}:{'.'.join(p)}" for c, p in NULL_KEYS]
)
def test_null_switches_off_every_key_the_schema_allows(config, path):
    """Each key of config/test.yaml and config/default.yaml that null may switch off: the config
    resolves with it off (null kept: a stage) or gone (an entry, an optional section), or the
    refusal names the key that still needs it; never the schema's `None is not of type`."""
    try:
        resolved = resolve(apply_overrides(CONFIGS[config], nested(path, None)), ROOT)
    except ConfigError as error:
        assert "None is not of type" not in str(error)
        assert re.match(r"^[\w.\[\]-]+: ", str(error)), str(error)
        return
    assert lookup(resolved.config, path) in (None, "absent")
    assert resolved.jobs("prepare_data")


def test_a_stage_off_has_no_jobs_and_depth_use_off_drops_its_problem_models(default_config):
    """Before: `models.depth_problems_s0.data: 'problems' needs depth_use.problems`."""
    resolved = resolve(apply_overrides(default_config, {"depth_use": None}), ROOT)
    assert not resolved.jobs("skip_interventions") and not resolved.jobs("make_problems")
    assert not [name for name in resolved.models if name.startswith("depth_problems")]
    assert resolved.jobs("analyse_model")
    notes = []
    drop_removed_entries(apply_overrides(default_config, {"depth_use": None}), notes)
    assert notes == [
        "models.depth_problems (data: problems; depth_use is off): removed; no stage named it"
    ]


def test_a_model_removed_leaves_every_list_that_names_it_with_one_note(default_config):
    """Before: `models.depth_problems: None is not of type 'object'`."""
    overlay = apply_overrides(default_config, {"models": {"depth_problems": None}})
    resolved = resolve(overlay, ROOT)
    assert sorted(resolved.jobs("skip_interventions")) == ["depth_width_l16_m96", "smollm2"]
    assert resolved.jobs("make_problems")  # SmolLM2's depth score still reads the problems
    assert not [name for name in resolved.models if name.startswith("depth_problems")]
    notes = []
    config = drop_removed_entries(overlay, notes)
    assert config["depth_use"]["depth_score"]["models"] == ["smollm2"]
    assert "depth_problems" not in config["depth_use"]["skip"]["per_model"]
    assert notes == [
        "models.depth_problems: removed; dropped from depth_use.skip.models, "
        "depth_use.depth_score.models, depth_use.skip.per_model, depth_use.depth_score.families"
    ]


def test_a_seeded_model_removed_leaves_the_text_sets_and_finetune(default_config):
    config = drop_removed_entries(apply_overrides(default_config, {"models": {"pre_ln": None}}))
    assert "pre_ln" not in config["analysis"]["text_sets"]["val"]["models"]
    assert config["finetune"]["models"] == ["lns"]
    assert config["pruning"]["models"] == ["lns", "smollm2"]


def test_a_sweep_removed_takes_its_pair_and_its_fit(default_config):
    overlay = apply_overrides(default_config, {"sweeps": {"depth_width": None}})
    resolved = resolve(overlay, ROOT)
    assert not resolved.jobs("linear_maps") and "sweep" not in resolved.jobs("fit_scaling")
    assert sorted(resolved.jobs("fit_scaling")) == ["chinchilla_besiroglu", "chinchilla_liu"]


def test_a_fit_and_a_problem_family_removed(default_config):
    """Before: `scaling.fits.sweep: None is not of type 'object'` and the same for a family."""
    overlay = {"scaling": {"fits": {"sweep": None}}}
    resolved = resolve(apply_overrides(default_config, overlay), ROOT)
    assert sorted(resolved.jobs("fit_scaling")) == ["chinchilla_besiroglu", "chinchilla_liu"]
    overlay = {"depth_use": {"problems": {"families": {"addition": None}}}}
    notes = []
    config = drop_removed_entries(apply_overrides(default_config, overlay), notes)
    assert list(config["depth_use"]["problems"]["families"]) == ["hops"]
    assert config["depth_use"]["depth_score"]["models"] == ["depth_problems"]
    assert notes == [
        "depth_use.depth_score.families.smollm2: addition removed; smollm2 is no longer scored "
        "(dropped from depth_use.depth_score.models)"
    ]
    resolved = resolve(apply_overrides(default_config, overlay), ROOT)
    assert resolved.jobs("skip_interventions")["smollm2"]["problems"] is None


def test_narrowing_skip_models_notes_the_job_the_depth_score_keeps(default_config):
    """Before: `depth_use={skip: {models: [depth_problems]}}` kept SmolLM2's job with no word."""
    overlay = {"depth_use": {"skip": {"models": ["depth_problems"]}}}
    resolved = resolve(apply_overrides(default_config, overlay), ROOT)
    assert "smollm2" in resolved.jobs("skip_interventions")
    assert resolved.notes == [
        "depth_use.skip.models: the depth score keeps a skip_interventions job (with "
        "depth_use.skip's settings) for smollm2, which depth_use.depth_score.models names"
    ]


def test_a_misspelled_model_gets_the_declared_names_and_a_suggestion(default_config):
    """Before: the 24 expanded names (pre_ln_s0, ...) and no suggestion."""
    with pytest.raises(ConfigError) as caught:
        resolve(apply_overrides(default_config, {"analysis": {"models": ["pre_lnn"]}}), ROOT)
    message = str(caught.value)
    assert message.startswith(
        "analysis.models[0]: 'pre_lnn' is not a declared model; did you mean 'pre_ln'"
    )
    assert "pre_ln (seeds 0, 1, 2); post_ln;" in message
    assert "sweep depth_width: depth_width_l<2|4|8|16>_m<64|96>" in message
    assert "pre_ln_s0" not in message


def test_depth_use_null_on_the_command_line(tmp_path):
    """The command-line form, through Snakemake's own --config parsing (a dry run)."""
    env = {**os.environ, "DEPTHLAB_AUTO_DEVICE": "cpu"}
    done = subprocess.run(
        # --forceall: the job table whatever this checkout's results/ already holds
        [sys.executable, "-m", "snakemake", "-n", "--forceall", "--quiet", "rules", "--cores",
         "1", "--config", "depth_use=null", "--", "all"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "pretrain_model" in output  # the job table is there, without the depth-use jobs
    assert "skip_interventions" not in output and "make_problems" not in output


def test_the_last_family_removed_switches_the_problems_off():
    """Before: `depth_use.problems.families: {} should be non-empty`."""
    overlay = {"depth_use": {"problems": {"families": {"hops": None}}}}
    notes = []
    config = drop_removed_entries(apply_overrides(TEST_CONFIG, overlay), notes)
    assert config["depth_use"]["problems"] is None and "depth_problems" not in config["models"]
    assert notes[0].startswith(
        "models.depth_problems (data: problems; no problem family left once hops is removed)"
    )
    resolved = resolve(apply_overrides(TEST_CONFIG, overlay), ROOT)
    assert not resolved.jobs("make_problems") and resolved.jobs("linear_maps")


def test_analysis_off_names_pruning_which_reads_it(default_config):
    """Before: `pruning.models[0]: ... add it to analysis.models`, which cannot help."""
    overlay = {"analysis": None, "lens_swaps": None}
    with pytest.raises(ConfigError, match=r"^pruning: .* but analysis is off; switch pruning"):
        resolve(apply_overrides(default_config, overlay), ROOT)


def documented_forms() -> list[list[str]]:
    text = (ROOT / "docs" / "configs.md").read_text()
    section = text[text.index("## Switching things off") :]
    section = section[: section.index("\n## ", 1)]
    commands = re.findall(r"^\.venv/bin/snakemake -n --config (.+)$", section, re.M)
    assert len(commands) >= 9
    return [shlex.split(command, comments=True) for command in commands]


@pytest.mark.parametrize("items", documented_forms(), ids=" ".join)
def test_each_documented_form_resolves(default_config, items):
    overrides = dict(item.split("=", 1) for item in items)
    resolved = resolve(apply_overrides(default_config, overrides), ROOT)
    for key, value in overrides.items():
        if value == "null":  # a stage: off, and its jobs gone
            assert resolved.config[key] is None
    assert resolved.jobs("pretrain_model")  # the rest of the config is kept


def test_a_removal_note_reaches_the_run(default_config):
    resolved = resolve(apply_overrides(default_config, {"models": {"depth_problems": None}}), ROOT)
    assert resolved.notes[0].startswith("models.depth_problems: removed; dropped from")


def test_every_sweep_removed_keeps_a_declared_model_of_a_sweeps_name_form():
    """`sweeps: null` drops every <sweep>_l<d>_m<w> name, except those a model declares."""
    config = {
        "models": {"own_l2_m64": {"kind": "pretrain", "seeds": [0]}},
        "sweeps": None,
        "analysis": {"models": ["own_l2_m64_s0", "grid_l2_m64", "own_l2_m64"]},
    }
    notes = []
    assert drop_removed_entries(config, notes)["analysis"]["models"] == [
        "own_l2_m64_s0",
        "own_l2_m64",
    ]
    assert notes == ["sweeps: removed; dropped from analysis.models"]
