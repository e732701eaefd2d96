"""Running a stage script as the workflow does (a subprocess given its job's spec) and comparing
two training runs' outputs; shared by the stage tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "workflow_scripts"
TRAIN_LOG_COLUMNS = ["step", "tokens", "split", "loss", "lr"]


def run_stage_script(name: str, spec: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """workflow_scripts/<name> with `--spec` (the job's spec), run from the repository root."""
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), "--spec", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def run_command(command: list, env: dict, wait: bool = True):
    """Run a training script's command: the finished process (asserted to succeed), or with
    wait=False the started one (a test kills it to resume)."""
    if not wait:
        return subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def assert_same_training(reference: Path, other: Path) -> None:
    """Two checkpoint folders hold the same weights, bit for bit, and train_log.csv the same
    steps, tokens, losses and learning rates (a resumed run against an uninterrupted one)."""
    import pandas as pd
    import torch
    from safetensors.torch import load_file

    want = load_file(reference / "model.safetensors")
    got = load_file(other / "model.safetensors")
    assert want.keys() == got.keys()
    for name in want:
        assert torch.equal(want[name], got[name]), name
    pd.testing.assert_frame_equal(
        pd.read_csv(reference / "train_log.csv")[TRAIN_LOG_COLUMNS],
        pd.read_csv(other / "train_log.csv")[TRAIN_LOG_COLUMNS],
    )
