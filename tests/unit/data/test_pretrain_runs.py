"""Reading a pretraining run's outputs: model facts from config.json, the train log, and the
loss-curve frame whose labels come from the caller (never from provenance records)."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from depthlab.data.pretrain_runs import read_run, read_training_runs

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "workflow_scripts"


def write_run(path: Path, width: int, depth: int, norm_scheme=None, provenance=None):
    path.mkdir(parents=True)
    config = {
        "hidden_size": width,
        "num_hidden_layers": depth,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": width // 2,
        "intermediate_size": 3 * width,
    }
    if norm_scheme:
        config["norm_scheme"] = norm_scheme
    (path / "config.json").write_text(json.dumps(config))
    rows = [
        (
            step,
            64 * step,
            split,
            6.0 - 0.1 * step + (0.05 if split == "train" else 0),
            1e-3,
            0.1 * step,
        )
        for step in (1, 2, 3)
        for split in ("train", "val")
    ]
    rows.append((3, 192, "val", 5.5, 1e-3, 0.4))  # a repeated token count: the last row wins
    pd.DataFrame(rows, columns=["step", "tokens", "split", "loss", "lr", "wall_s"]).to_csv(
        path / "train_log.csv", index=False
    )
    if provenance is not None:
        (path / "provenance.json").write_text(json.dumps(provenance))


def test_read_run_gives_the_model_facts_and_the_log(tmp_path):
    write_run(tmp_path / "a", 32, 3, norm_scheme="mix_ln")
    run = read_run(tmp_path / "a")
    assert (run.name, run.width, run.depth, run.norm_scheme) == ("a", 32, 3, "mix_ln")
    # attention 4 * 32 * 32, MLP 3 * 32 * 96, two norms per layer; plus the final norm
    assert run.non_embedding_params == 3 * (4 * 32 * 32 + 3 * 32 * 96 + 2 * 32) + 32
    assert len(run.log) == 7
    val = run.val_losses(min_tokens=100)
    assert list(val["tokens"]) == [128, 192] and list(val["loss"]) == [5.8, 5.5]
    write_run(tmp_path / "plain", 32, 2)
    assert read_run(tmp_path / "plain").norm_scheme is None


def test_read_run_errors_name_the_file(tmp_path):
    write_run(tmp_path / "a", 32, 3)
    (tmp_path / "a" / "train_log.csv").unlink()
    with pytest.raises(FileNotFoundError, match="a: missing train_log.csv"):
        read_run(tmp_path / "a")
    write_run(tmp_path / "b", 32, 3)
    pd.DataFrame({"step": [1], "split": ["val"], "loss": [1.0]}).to_csv(
        tmp_path / "b" / "train_log.csv", index=False
    )
    with pytest.raises(ValueError, match="train_log.csv: missing column 'tokens'"):
        read_run(tmp_path / "b")


def test_training_runs_take_labels_from_the_caller_not_from_provenance(tmp_path):
    lying = {
        "config": {
            "model_name": "other",
            "norm_scheme": "post_ln",
            "sweep": "grid",
            "architecture": {"num_layers": 99, "hidden_size": 1},
        }
    }
    write_run(tmp_path / "pre_ln", 32, 3, provenance=lying)
    write_run(tmp_path / "grid_l2_m32", 32, 2)
    runs = read_training_runs(
        [tmp_path / "pre_ln", tmp_path / "grid_l2_m32"],
        labels={"pre_ln": "Pre-LN"},
        sweeps={"grid_l2_m32": "grid"},
    )
    first = runs[runs["model"] == "pre_ln"].iloc[0]
    assert (first["label"], first["sweep"], first["depth"], first["width"]) == ("Pre-LN", "", 3, 32)
    second = runs[runs["model"] == "grid_l2_m32"].iloc[0]
    assert (second["label"], second["sweep"], second["depth"]) == ("grid_l2_m32", "grid", 2)
    assert len(runs) == 14


def test_loss_curve_script_with_labels_and_sweeps(tmp_path):
    write_run(tmp_path / "pre_ln", 32, 3)
    write_run(tmp_path / "grid_l2_m32", 32, 2)
    figure = tmp_path / "curves.png"
    result = subprocess.run(
        [
            sys.executable,
            SCRIPTS / "plot_loss_curves.py",
            "--spec",
            json.dumps(
                {
                    "models": [str(tmp_path / "pre_ln"), str(tmp_path / "grid_l2_m32")],
                    "labels": {"pre_ln": "Pre-LN"},
                    "sweeps": {"grid_l2_m32": "grid"},
                    "out": str(figure),
                }
            ),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={"PYTHONPATH": str(SCRIPTS), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert figure.stat().st_size > 10_000
    sidecar = json.loads((tmp_path / "curves.provenance.json").read_text())
    assert sidecar["config"]["labels"] == {"pre_ln": "Pre-LN"}
