"""The workflow end to end on config/test.yaml, in a scratch working directory."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
CONFIG = ROOT / "config" / "test.yaml"

pytestmark = pytest.mark.workflow


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    command = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
               "--configfile", str(CONFIG), "--cores", "2", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("workflow")
    result = snakemake(workdir)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return workdir / "results" / yaml.safe_load(CONFIG.read_text())["run_name"]


def test_every_pretrained_model_is_a_loadable_hf_checkpoint(finished_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import depthlab.models  # noqa: F401  (registers the depthlab_llama Auto classes)
    from depthlab.config import resolve_config

    models = resolve_config(yaml.safe_load(CONFIG.read_text()))["resolved_models"]
    for name, declared in models.items():
        if declared["kind"] != "pretrain":
            continue
        model_dir = finished_run / "models" / name
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        assert model.config.num_hidden_layers == declared["architecture"]["num_layers"]
        assert model.config.hidden_size == declared["architecture"]["hidden_size"]
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        assert len(tokenizer) <= model.config.vocab_size
        log = pd.read_csv(model_dir / "train_log.csv")
        assert log.step.max() == declared["train"]["steps"]
        val_tokens = log[log.split == "val"].tokens
        assert len(val_tokens) >= 3 and val_tokens.is_monotonic_increasing
        provenance = json.loads((model_dir / "provenance.json").read_text())
        assert provenance["config"]["model_name"] == name
        assert len(provenance["git"]["commit"]) == 40


def test_figure_logs_and_benchmarks_exist_for_every_job(finished_run):
    figure = finished_run / "figures" / "loss_curves.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sidecar = json.loads((finished_run / "figures" / "loss_curves.provenance.json").read_text())
    assert len(sidecar["inputs"]) >= 2
    for stage in ("data", "pretrain", "figures"):
        assert list((finished_run / "logs" / stage).glob("*.log")), stage
        assert list((finished_run / "benchmarks" / stage).glob("*.tsv")), stage


def test_rerun_is_a_no_op_and_one_stage_reruns_alone(finished_run):
    workdir = finished_run.parents[1]
    dry = snakemake(workdir, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr
    forced = snakemake(workdir, "-n", "--forcerun", "plot_loss_curves")
    assert forced.returncode == 0
    assert "plot_loss_curves" in forced.stdout and "pretrain " not in forced.stdout


def test_snakemake_report_collects_every_figure(finished_run):
    workdir = finished_run.parents[1]
    result = snakemake(workdir, "--report", str(workdir / "report.html"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    html = (workdir / "report.html").read_text(errors="replace")
    for figure in finished_run.joinpath("figures").rglob("*.png"):
        assert figure.name in html, figure
