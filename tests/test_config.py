"""A malformed config fails before any job runs, with a message naming the offending key."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from depthlab.config import ConfigError, resolve_config, sweep_model_name

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def dry_run(config: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    # A scratch working directory: results of earlier runs must not make the DAG empty.
    return subprocess.run([SNAKEMAKE, "-n", "--cores", "1", "--snakefile", str(ROOT / "Snakefile"),
                           "--directory", str(tmp_path), "--configfile", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["default.yaml", "test.yaml", "paper.yaml"])
def test_shipped_configs_build_the_dag(name, tmp_path):
    result = dry_run(load(name), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "prepare_data" in result.stdout


@pytest.mark.parametrize("mutate, key, detail", [
    (lambda c: c["pretrain"].__setitem__("steps", "many"), "['pretrain']", "'many' is not of type"),
    (lambda c: c["models"]["lns"].__setitem__("norm_scheme", "lnz"), "['models']['lns']['norm_scheme']", "'lnz'"),
    # test.yaml's models share one YAML anchor: pre_ln gets its own, wrong, copy
    (lambda c: c["models"]["pre_ln"].__setitem__(
        "architecture", {**c["models"]["pre_ln"]["architecture"], "num_layers": 0}),
     "['models']['pre_ln']['architecture']['num_layers']", "minimum"),
    (lambda c: c.__setitem__("pretrian", {}), "'pretrian'", "ValidationError"),
])
def test_schema_errors_name_the_key_and_nothing_runs(mutate, key, detail, tmp_path):
    config = load("test.yaml")
    config["run_name"] = "config_error_probe"
    mutate(config)
    result = dry_run(config, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert key in output and detail in output, output[-2000:]
    assert not (tmp_path / "results").exists()


def test_workflow_reports_cross_reference_errors_by_key(tmp_path):
    config = load("test.yaml")
    # test.yaml's models share one YAML anchor; give pre_ln its own, wrong, copy (32 % 3 != 0)
    config["models"]["pre_ln"]["architecture"] = {**config["models"]["pre_ln"]["architecture"],
                                                  "num_heads": 3}
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    assert "models.pre_ln.architecture.num_heads" in result.stdout + result.stderr


def test_stage_naming_an_undeclared_model_is_rejected():
    config = load("test.yaml")
    config["some_stage"] = {"models": ["pre_ln", "ghost"]}
    with pytest.raises(ConfigError, match=r"some_stage\.models\[1\]: 'ghost' is not a declared"):
        resolve_config(config)
    config["some_stage"] = {"nested": {"models": ["depth_width_l2_m16"]}}
    resolve_config(config)  # sweep-expanded names are declared models


def test_stage_naming_an_undeclared_sweep_is_rejected():
    config = load("test.yaml")
    config["some_stage"] = {"sweep": "nope"}
    with pytest.raises(ConfigError, match=r"some_stage\.sweep: 'nope'"):
        resolve_config(config)


def test_sweep_expansion_and_training_overrides():
    config = load("test.yaml")
    models = resolve_config(config)["resolved_models"]
    sweep = config["sweeps"]["depth_width"]
    expected = {sweep_model_name("depth_width", d, w) for d in sweep["depths"] for w in sweep["widths"]}
    assert expected <= set(models)
    model = models[sweep_model_name("depth_width", 2, 32)]
    assert model["architecture"]["num_layers"] == 2
    assert model["architecture"]["num_heads"] == 32 // sweep["head_dim"]
    assert model["train"]["steps"] == sweep["train"]["steps"]           # sweep override
    assert model["train"]["lr"] == config["pretrain"]["lr"]             # default
    assert models["pre_ln"]["train"]["steps"] == config["pretrain"]["steps"]


def test_unknown_training_override_and_clashing_sweep_name_are_rejected():
    config = load("test.yaml")
    bad = copy.deepcopy(config)
    bad["models"]["pre_ln"]["train"] = {"stepz": 3}
    with pytest.raises(ConfigError, match=r"models\.pre_ln\.train\.stepz"):
        resolve_config(bad)
    bad = copy.deepcopy(config)
    bad["models"][sweep_model_name("depth_width", 1, 16)] = copy.deepcopy(config["models"]["pre_ln"])
    with pytest.raises(ConfigError, match=r"sweeps\.depth_width"):
        resolve_config(bad)
    bad = copy.deepcopy(config)
    bad["models"]["pre_ln"]["train"] = {"warmup_steps": 10_000}
    with pytest.raises(ConfigError, match=r"models\.pre_ln\.train\.warmup_steps"):
        resolve_config(bad)


def test_workflow_passes_snakemake_lint():
    result = subprocess.run([SNAKEMAKE, "--lint", "--cores", "1"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
