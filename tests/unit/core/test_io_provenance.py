"""Atomic outputs and provenance records."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from depthlab.cli import start_job
from depthlab.core import provenance as provenance_module
from depthlab.core.atomic_files import atomic_path, write_json
from depthlab.core.provenance import (
    CONFIG_SOURCE_ENV,
    Provenance,
    described_files,
    git_state,
    set_job,
    sha256_path,
    sidecar_path,
)

ROOT = Path(__file__).resolve().parents[3]
STAGE_SECTIONS = ("analysis", "lens_swaps", "pruning", "depth_use", "scaling", "toy", "sweeps")


def git_repo(path: Path, gitignore: str = "ignored/\n") -> Path:
    """A one-commit git repository (ignoring `ignored/`, unless told otherwise) at `path`."""
    path.mkdir(parents=True)
    (path / "module.py").write_text("x = 1\n")
    (path / ".gitignore").write_text(gitignore)
    git = [
        "git",
        "-C",
        str(path),
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.org",
        "-c",
        "commit.gpgsign=false",
    ]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    return path


def test_atomic_file_and_folder_appear_only_on_success(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []

    folder = tmp_path / "model"
    with pytest.raises(RuntimeError):
        with atomic_path(folder, is_dir=True) as tmp:
            (tmp / "weights").write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []

    folder.mkdir()
    (folder / "old").write_text("old")
    with atomic_path(folder, is_dir=True) as tmp:
        (tmp / "new").write_text("new")
    assert sorted(p.name for p in folder.iterdir()) == ["new"]  # replaced whole, not merged
    umask = os.umask(0)
    os.umask(umask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask
    write_json(tmp_path / "p.json", {})
    assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o666 & ~umask


def test_json_outputs_are_strict(tmp_path):
    import numpy as np

    write_json(
        tmp_path / "x.json",
        {
            "nan": float("nan"),
            "inf": np.float32("inf"),
            "n": np.int64(3),
            "xs": (1.5, np.float64(2.5)),
            4: "k",
        },
    )
    text = (tmp_path / "x.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"nan": None, "inf": None, "n": 3, "xs": [1.5, 2.5], "4": "k"}


def test_sha256_of_file_and_folder(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"abc")
    assert sha256_path(tmp_path / "a.txt") == hashlib.sha256(b"abc").hexdigest()
    before = sha256_path(tmp_path)
    write_json(tmp_path / "provenance.json", {"wall_s": 1})  # ignored: differs between reruns
    assert sha256_path(tmp_path) == before
    (tmp_path / "b.txt").write_bytes(b"")
    assert sha256_path(tmp_path) != before


def test_provenance_records_commit_config_inputs_versions_and_times(tmp_path):
    source = tmp_path / "input.bin"
    source.write_bytes(b"\x00\x01")
    provenance = Provenance("unit", config={"lr": 0.1}, inputs=[source], seed=7)
    record = provenance.write(tmp_path / "provenance.json")[tmp_path / "provenance.json"]
    assert json.loads((tmp_path / "provenance.json").read_text()) == json.loads(json.dumps(record))
    assert len(record["git"]["commit"]) == 40 and isinstance(record["git"]["dirty"], bool)
    assert record["inputs"][str(source)] == hashlib.sha256(b"\x00\x01").hexdigest()
    assert record["config"] == {"lr": 0.1} and record["seed"] == 7
    assert record["packages"]["torch"].startswith("2.13.0")
    assert record["end"] >= record["start"] and record["wall_s"] >= 0
    assert sidecar_path(tmp_path / "fig.png").name == "fig.provenance.json"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_folder_record_holds_the_sha256_of_every_file_the_job_wrote(tmp_path):
    out = tmp_path / "model"
    (out / "export" / "n2").mkdir(parents=True)
    (out / "weights.bin").write_bytes(b"\x00" * 10)
    (out / "export" / "n2" / "config.json").write_text("{}")
    (out / "export" / "n2" / "provenance.json").write_text("{}")  # a record, not an output
    record = Provenance("unit", config={}).write(out / "provenance.json")[out / "provenance.json"]
    assert record["outputs"] == {
        "export/n2/config.json": sha(b"{}"),
        "weights.bin": sha(b"\0" * 10),
    }
    assert json.loads((out / "provenance.json").read_text())["outputs"] == record["outputs"]
    # Snakemake marks a folder output after the job and its record: not the job's output
    (out / ".snakemake_timestamp").write_text("")
    assert sorted(described_files(out / "provenance.json")) == sorted(record["outputs"])
    with pytest.raises(ValueError, match=r"weights\.bin: not a provenance record"):
        described_files(out / "weights.bin")


def test_a_sidecar_holds_the_sha256_of_its_own_files_only(tmp_path):
    """One record written beside several outputs (plot_pruning's figures; make_claims' csv and
    md share a stem, so one sidecar): each sidecar covers the files of its own stem."""
    figures = tmp_path / "figures"
    figures.mkdir()
    for name in ("sweep.png", "sweep.pdf", "speed.png", "sweep_points.csv"):
        (figures / name).write_bytes(name.encode())
    sidecars = [sidecar_path(figures / "sweep.png"), sidecar_path(figures / "speed.png")]
    written = Provenance("unit", config={"x": 1}).write(*sidecars, sidecars[0])
    assert list(written) == sidecars  # a path named twice is written once
    assert written[sidecars[0]]["outputs"] == {
        "sweep.pdf": sha(b"sweep.pdf"),
        "sweep.png": sha(b"sweep.png"),
    }
    assert written[sidecars[1]]["outputs"] == {"speed.png": sha(b"speed.png")}
    first, second = (json.loads(path.read_text()) for path in sidecars)
    assert first.pop("outputs") != second.pop("outputs") and first == second


def test_dirty_flag_counts_untracked_files_but_not_ignored_ones(tmp_path):
    repo = git_repo(tmp_path / "repo")
    clean = git_state(repo)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False and clean["n_changes"] == 0
    (repo / "ignored").mkdir()
    (repo / "ignored" / "big.bin").write_bytes(b"0")
    assert git_state(repo)["dirty"] is False
    (repo / "new_module.py").write_text("y = 2\n")  # untracked: results can depend on it
    assert git_state(repo) == {
        **clean,
        "dirty": True,
        "n_changes": 1,
        "changes": ["?? new_module.py"],
    }
    (repo / "module.py").write_text("x = 3\n")
    assert git_state(repo)["changes"] == [" M module.py", "?? new_module.py"]
    assert git_state(tmp_path / "not_a_repo")["dirty"] is None


def test_a_users_config_and_stray_reports_leave_the_checkout_clean(tmp_path, monkeypatch):
    """With the project's .gitignore: a user's config in config/local/ and a report written to
    the root by mistake keep later records clean, and records still name the user's config by
    path and sha256; a config copied into config/ itself is an untracked change."""
    repo = git_repo(tmp_path / "repo", gitignore=(ROOT / ".gitignore").read_text())
    (repo / "config" / "local").mkdir(parents=True)
    mine = repo / "config" / "local" / "mine.yaml"
    mine.write_text("run_name: mine\n")
    for stray in ("report.html", "report.zip", "dag.pdf", "results/mine/report.html"):
        (repo / stray).parent.mkdir(parents=True, exist_ok=True)
        (repo / stray).write_text("<html/>")
    assert git_state(repo)["dirty"] is False
    monkeypatch.setattr(provenance_module, "_job", {})
    monkeypatch.chdir(repo)
    set_job("prepare_data", "python prepare_data.py --config config/local/mine.yaml", [mine])
    assert Provenance("unit", config={}).record()["config_source"] == {
        "files": [{"path": "config/local/mine.yaml", "sha256": sha(b"run_name: mine\n")}]
    }
    (repo / "config" / "mine.yaml").write_text("run_name: mine\n")
    assert git_state(repo)["changes"] == ["?? config/mine.yaml"]


def test_records_name_the_rule_command_config_files_and_folder_files(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance_module, "_job", {})
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text("seed: 1  # a comment\n")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "train.bin").write_bytes(b"\x01\x02\x03")
    (folder / "provenance.json").write_text("{}")  # not data: left out, as in sha256_path

    set_job("prepare_data", "python prepare_data.py --config run.yaml", config_files=[config])
    record = Provenance("unit", config={}, inputs=[folder]).record()
    assert record["rule"] == "prepare_data" and record["command"].startswith("python ")
    assert record["cwd"] == str(tmp_path)
    assert record["config_source"] == {
        "files": [{"path": "run.yaml", "sha256": hashlib.sha256(config.read_bytes()).hexdigest()}]
    }
    assert record["inputs"] == {str(folder): sha256_path(folder)}
    assert record["input_files"] == {
        str(folder): {"train.bin": hashlib.sha256(b"\x01\x02\x03").hexdigest()}
    }

    # under the workflow the config source comes from the environment the Snakefile sets
    exported = {"files": [{"path": "config/x.yaml", "sha256": "ab"}], "overrides": {"seed": 2}}
    monkeypatch.setenv(CONFIG_SOURCE_ENV, json.dumps(exported))
    set_job("analyse_model", "python analyse_model.py --spec {}")
    assert Provenance("unit", config={}).record()["config_source"] == exported
    monkeypatch.delenv(CONFIG_SOURCE_ENV)
    set_job("analyse_model", "python analyse_model.py --spec {}")
    assert Provenance("unit", config={}).record()["config_source"] is None


def test_start_job_prints_its_command_first_and_tells_provenance(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(provenance_module, "_job", {})
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    # the test config's data stage and one model only: resolving all of it takes seconds
    test_config = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    first_model = next(iter(test_config["models"]))
    config = tmp_path / "data only.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                **{k: v for k, v in test_config.items() if k not in STAGE_SECTIONS},
                "models": {first_model: test_config["models"][first_model]},
            }
        )
    )
    monkeypatch.setattr(sys, "argv", ["prepare_data.py", "--config", str(config), "--job", "data"])
    _, spec = start_job(None, "prepare_data")
    assert spec["data"] == test_config["data"]
    first_line = capsys.readouterr().err.splitlines()[0]
    assert first_line == f"{sys.executable} prepare_data.py --config '{config}' --job data"
    record = Provenance("unit", config=spec).record()
    assert record["rule"] == "prepare_data" and record["command"] == first_line
    assert (
        record["config_source"]["files"][0]["sha256"]
        == hashlib.sha256(config.read_bytes()).hexdigest()
    )


def test_a_job_that_never_uses_torch_does_not_import_it_and_torch_gets_its_threads_later():
    """set_threads (every script's start) must not import torch (~2.5 s per plot or fit job),
    and a job that imports torch afterwards still runs with the rule's threads; provenance says
    which of the two a job was."""
    code = (
        "import sys\n"
        "from depthlab.cli import set_threads\n"
        "from depthlab.core.provenance import device_description\n"
        "set_threads(1)\n"
        "print('torch' in sys.modules, device_description())\n"
        "import torch\n"
        "print(torch.get_num_threads(), device_description())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3] / "workflow_scripts")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = done.stdout.splitlines()
    assert before.startswith("False cpu (") and "torch not used" in before, before
    assert after.startswith("1 cpu (") and "1 torch threads" in after, after


LOCAL_FILES = [
    "results/default/claims.csv",
    "site/index.html",
    ".snakemake/log/run.log",
    "workflow_scripts/__pycache__/x.cpython-311.pyc",
    "config/local/mine.yaml",
    "report.html",
    ".vscode/settings.json",
    ".ipynb_checkpoints/notes-checkpoint.ipynb",
    ".DS_Store",
]


@pytest.mark.parametrize("venv", ["symlink", "folder"])
def test_a_venv_and_the_usual_local_files_leave_the_checkout_clean(tmp_path, venv):
    """With the project's .gitignore, a venv (a folder, or a symlink to one as the helpers' and
    some users' checkouts have; `.venv/` matched only a folder, so a symlinked venv marked every
    record dirty) and the files a run, the docs build and editors leave behind are not changes;
    a new module still is."""
    repo = git_repo(tmp_path / "checkout", (ROOT / ".gitignore").read_text())
    if venv == "symlink":
        (tmp_path / "elsewhere_venv").mkdir()
        (repo / ".venv").symlink_to(tmp_path / "elsewhere_venv")
    else:
        (repo / ".venv" / "bin").mkdir(parents=True)
        (repo / ".venv" / "bin" / "python").write_text("")
    for name in LOCAL_FILES:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("local")
    assert git_state(repo)["dirty"] is False, git_state(repo)["changes"]
    (repo / "new_module.py").write_text("y = 2\n")
    assert git_state(repo)["changes"] == ["?? new_module.py"]
