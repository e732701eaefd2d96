"""The audit command: a result's provenance chain back to the data, every recorded checksum
checked against the files on disk, dirty commits reported."""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from depthlab import provenance
from depthlab.audit import main as audit
from depthlab.provenance import Provenance, git_state, set_job, sidecar_path
from test_io_provenance import git_repo

ROOT = Path(__file__).resolve().parents[1]
RUN = Path("results") / "r"


def write_chain(base: Path, dirty_rule: str | None = None) -> dict:
    """data -> model -> analysis -> figure, each record written by the library's Provenance from
    `base` (relative paths, as the workflow writes them); every commit clean except the one of
    `dirty_rule`."""
    repo = git_repo(base / "checkout")
    dirty = git_repo(base / "dirty_checkout")
    (dirty / "notes.py").write_text("")
    config = base / "run.yaml"
    config.write_text("seed: 0\n")

    def record(rule, out, inputs, spec):
        set_job(rule, f"python {rule}.py --spec ...", config_files=[config])
        job = Provenance(rule, config=spec, inputs=inputs)
        job.extra["git"] = git_state(dirty if rule == dirty_rule else repo)
        job.write(out)

    data, model = RUN / "data", RUN / "models" / "m"
    analysis, figure = RUN / "analysis" / "m", RUN / "figures" / "angles.png"
    for folder in (data, model, analysis, figure.parent):
        (base / folder).mkdir(parents=True)
    (base / data / "train.bin").write_bytes(bytes(range(200)))
    (base / data / "val.bin").write_bytes(bytes(range(20)))
    record("prepare_data", data / "provenance.json", [], {"vocab_size": 512})
    (base / model / "model.safetensors").write_bytes(b"weights" * 50)
    (base / model / "config.json").write_text('{"num_hidden_layers": 2}')
    record("pretrain_model", model / "provenance.json", [data], {"train": {"steps": 16}})
    (base / analysis / "measures.csv").write_text("layer,angle\n0,0.5\n1,0.25\n")
    record("analyse_model", analysis / "provenance.json", [model], {"max_samples": 8})
    (base / figure).write_bytes(b"\x89PNG figure")
    record("plot_analysis", sidecar_path(figure), [analysis / "measures.csv"], {"out": "x"})
    return {"figure": figure, "data": data, "model": model, "analysis": analysis, "config": config}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "_job", {})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_clean_chain_passes_and_is_shown_down_to_the_data(in_tmp, capsys):
    chain = write_chain(in_tmp)
    assert audit([str(chain["figure"])]) == 0
    out = capsys.readouterr().out
    for rule in ("plot_analysis", "analyse_model", "pretrain_model", "prepare_data"):
        assert f"rule     {rule}" in out
    config_sha = hashlib.sha256(b"seed: 0\n").hexdigest()
    assert out.count(f"config   run.yaml  sha256 {config_sha[:12]}  ok") == 4
    assert "train.steps = 16" in out and "max_samples = 8" in out
    assert out.count("ok       ") == 3 and "inputs   none (the chain starts here)" in out
    assert out.rstrip().endswith(
        "audit OK: 4 record(s), 3 input(s): every recorded checksum "
        "matches the file on disk and every commit was clean"
    )


@pytest.mark.parametrize(
    "tampered, recorded_in",
    [
        ("data/train.bin", "models/m/provenance.json"),
        ("models/m/model.safetensors", "analysis/m/provenance.json"),
        ("analysis/m/measures.csv", "figures/angles.provenance.json"),
    ],
)
def test_a_changed_upstream_file_is_named_and_fails_the_audit(
    in_tmp, capsys, tampered, recorded_in
):
    chain = write_chain(in_tmp)
    path = in_tmp / RUN / tampered
    path.write_bytes(path.read_bytes()[:-1] + b"!")
    assert audit([str(chain["figure"])]) == 1
    problems = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("CHANGED:", "MISSING:", "DIRTY:", "CONFIG:"))
    ]
    assert problems == [
        f"CHANGED: {RUN / tampered} (sha256 differs from the recorded one; "
        f"recorded in {RUN / recorded_in})"
    ]


def test_missing_inputs_and_changed_config_files_fail_the_audit(in_tmp, capsys):
    chain = write_chain(in_tmp)
    (in_tmp / RUN / "models" / "m" / "config.json").unlink()
    (in_tmp / RUN / "data" / "extra.bin").write_bytes(b"")
    assert audit(["--brief", str(chain["analysis"])]) == 1
    out = capsys.readouterr().out
    assert (
        f"CHANGED: {RUN}/models/m/config.json (deleted; recorded in "
        f"{RUN}/analysis/m/provenance.json)" in out
    )
    assert f"CHANGED: {RUN}/data/extra.bin (added; recorded in {RUN}/models/m/" in out
    shutil.rmtree(in_tmp / RUN / "data")
    chain["config"].write_text("seed: 0  # edited\n")
    assert audit(["--brief", str(chain["analysis"])]) == 1
    out = capsys.readouterr().out
    assert f"MISSING: {RUN}/data (recorded input no longer exists; recorded in " in out
    assert "CONFIG: run.yaml (config file changed since the job ran; recorded in 2 records" in out


def test_a_dirty_commit_in_the_chain_is_reported(in_tmp, capsys):
    chain = write_chain(in_tmp, dirty_rule="pretrain_model")
    assert audit(["--brief", str(chain["figure"])]) == 1
    out = capsys.readouterr().out
    assert f"DIRTY: {RUN}/models/m/provenance.json (commit " in out
    assert "with 1 uncommitted change(s): ?? notes.py)" in out
    assert out.count("DIRTY:") == 1
    assert out.rstrip().endswith("audit FAILED: 1 problem(s) (1 dirty) in 4 record(s)")


def test_the_script_audits_moved_results_and_rejects_paths_without_records(
    in_tmp, tmp_path_factory
):
    write_chain(in_tmp)
    moved = tmp_path_factory.mktemp("moved")
    shutil.copytree(in_tmp / "results", moved / "results")
    shutil.copy2(in_tmp / "run.yaml", moved / "run.yaml")
    script = ROOT / "workflow_scripts" / "audit.py"
    run = subprocess.run(
        [sys.executable, script, "results/r/figures/angles.png"],
        cwd=moved,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "audit OK: 4 record(s)" in run.stdout
    (moved / "results" / "r" / "data" / "train.bin").write_bytes(b"")  # the moved copy is audited
    run = subprocess.run(
        [sys.executable, script, "results/r/figures/angles.png"],
        cwd=moved,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and "CHANGED: results/r/data/train.bin" in run.stdout
    bare = moved / "notes.txt"
    bare.write_text("")
    run = subprocess.run(
        [sys.executable, script, str(bare)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2 and "no provenance record" in run.stderr
