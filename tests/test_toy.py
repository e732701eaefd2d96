"""Teacher-student toy models: architecture against a hand-written forward, tied vs independent
teachers (shared weights, successive-update angles), the KL objective, training, slicing by
temperature, the depth-exponent fit and the scripts."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from depthlab import toy, toy_fit
from depthlab.config import temperature_grid

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow_scripts"
SHAPE = toy.ToyShape(width=8, hidden=16, input_size=6, output_size=10)
SETTINGS = {"width": 8, "hidden": 16, "input_size": 6, "output_size": 10, "teacher_layers": 8,
            "student_depths": [1, 2, 4], "temperatures": [0.5, 1.0], "steps": 15,
            "batch_size": 32, "lr": 3e-3, "eval_batches": 2, "replicates": 1,
            "angle_samples": 64, "device": "cpu"}


def naive_forward(model: toy.ToyResNet, x: np.ndarray, temperature: float = 1.0):
    """The paper's network in float64 numpy: h = rmsnorm(x E); h += W2 relu(W1 rmsnorm(h) + b)^2;
    logits = head(rmsnorm(h)) / T. Returns logits and the residual stream h_0..h_L."""
    def rms(v):
        return v / np.sqrt(np.mean(v ** 2, axis=-1, keepdims=True) + np.finfo(np.float32).eps)

    def as64(t):
        return t.detach().double().numpy()

    h = rms(x @ as64(model.embedding))
    states = [h]
    for layer in model.layers:
        pre = rms(h) @ as64(layer.mlp.fc_in.weight).T + as64(layer.mlp.fc_in.bias)
        h = h + (np.maximum(pre, 0) ** 2) @ as64(layer.mlp.fc_out.weight).T
        states.append(h)
    return rms(h) @ as64(model.head.weight).T / temperature, states


def naive_angles(states) -> np.ndarray:
    out = []
    for l in range(len(states) - 2):
        u, v = states[l + 1] - states[l], states[l + 2] - states[l + 1]
        cos = np.sum(u * v, -1) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))
        out.append(np.degrees(np.arccos(np.clip(cos, -1, 1))).mean())
    return np.array(out)


@pytest.mark.parametrize("kind", ["independent", "tied"])
def test_teacher_matches_a_hand_written_forward(kind):
    teacher = toy.build_teacher(SHAPE, 5, kind, seed=3)
    x = np.random.default_rng(0).standard_normal((16, SHAPE.input_size))
    logits, hidden = teacher(torch.tensor(x, dtype=torch.float32), temperature=0.7,
                             return_hidden=True)
    expected, states = naive_forward(teacher, x, temperature=0.7)
    np.testing.assert_allclose(logits.numpy(), expected, rtol=1e-4, atol=1e-4)
    assert len(hidden) == 6
    np.testing.assert_allclose(toy.successive_update_angles(hidden), naive_angles(states),
                               atol=1e-2)


def test_tied_teacher_shares_one_block_and_independent_does_not():
    tied = toy.build_teacher(SHAPE, 6, "tied", seed=0)
    independent = toy.build_teacher(SHAPE, 6, "independent", seed=0)
    ptrs = {layer.mlp.fc_in.weight.data_ptr() for layer in tied.layers}
    assert len(ptrs) == 1
    assert len({layer.mlp.fc_in.weight.data_ptr() for layer in independent.layers}) == 6
    block = SHAPE.width * SHAPE.hidden + SHAPE.hidden + SHAPE.hidden * SHAPE.width
    fixed = SHAPE.width * SHAPE.output_size
    assert sum(p.numel() for p in tied.parameters()) == block + fixed
    assert sum(p.numel() for p in independent.parameters()) == 6 * block + fixed
    # output projections scaled by 1/sqrt(L) exactly once, even for the shared block
    torch.manual_seed(0)
    reference = toy.ToyBlock(SHAPE)
    np.testing.assert_allclose(tied.layers[0].mlp.fc_out.weight.numpy(),
                               reference.mlp.fc_out.weight.detach().numpy() / np.sqrt(6),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="teacher kind 'shared'"):
        toy.build_teacher(SHAPE, 6, "shared", seed=0)


def test_tied_and_independent_teachers_differ_in_successive_update_angle():
    shape = toy.ToyShape(width=16, hidden=64, input_size=16, output_size=32)
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(0))
    angles = {}
    for kind in ("independent", "tied"):
        _, hidden = toy.build_teacher(shape, 32, kind, seed=1)(x, return_hidden=True)
        angles[kind] = toy.successive_update_angles(hidden)
        assert angles[kind].shape == (31,)
    # tied layers: a smooth flow, successive updates nearly parallel;
    # independent layers: successive updates nearly orthogonal
    assert angles["tied"].mean() < 15
    assert 75 < angles["independent"].mean() < 105
    assert angles["tied"].max() < angles["independent"].min()


def test_student_starts_uniform_so_initial_kl_is_log_v_minus_teacher_entropy():
    teacher = toy.build_teacher(SHAPE, 4, "independent", seed=0)
    student = toy.build_student(SHAPE, 3, teacher.embedding, seed=1)
    x = torch.randn(64, SHAPE.input_size, generator=torch.Generator().manual_seed(2))
    t_logits = teacher(x, temperature=0.5).double().numpy()
    p = np.exp(t_logits - t_logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    entropy = -(p * np.log(p)).sum(-1).mean()
    kl = toy.kl_to_teacher(student(x), teacher(x, temperature=0.5)).item()
    assert kl == pytest.approx(np.log(SHAPE.output_size) - entropy, rel=1e-5)


def test_training_lowers_the_test_kl_and_temperature_slices_reproduce_the_full_run():
    full, angles = toy.run_teacher_kind("tied", SETTINGS, seed=0, log=lambda _: None)
    assert len(full) == 2 * 3
    assert angles["mean_angle_deg"] < 30
    teacher = toy.build_teacher(SHAPE, SETTINGS["teacher_layers"], "tied", seed=1)
    untrained = toy.build_student(SHAPE, 2, teacher.embedding, seed=0)
    before = toy.evaluate(untrained, teacher, 1.0, 2, 32, seed=5)
    after = toy.train_students(teacher, [2], [1.0], steps=30, batch_size=32, lr=3e-3, seed=0,
                               eval_batches=2, eval_seed=5)[0]["test_loss"]
    assert after < 0.8 * before
    # the T = 1.0 job alone trains exactly the T = 1.0 students of the full run
    sliced, _ = toy.run_teacher_kind("tied", SETTINGS, seed=0, log=lambda _: None,
                                     temperature_index=1)
    expected = full[full["temperature"] == 1.0].reset_index(drop=True)
    pd.testing.assert_frame_equal(sliced, expected)
    with pytest.raises(ValueError, match="temperature index 2"):
        toy.run_teacher_kind("tied", SETTINGS, seed=0, temperature_index=2)


def test_temperature_grid_matches_the_papers_logspace():
    grid = temperature_grid({"min": 0.01, "max": 1.0, "count": 16})
    np.testing.assert_allclose(grid, torch.logspace(-2, 0, 16, dtype=torch.float64).numpy())
    assert temperature_grid([0.1, 1]) == [0.1, 1.0]
    with pytest.raises(ValueError, match="toy.temperatures"):
        toy.run_teacher_kind("tied", {**SETTINGS, "temperatures": [0.0, 1.0]}, seed=0)


def test_depth_exponent_fits():
    depths = np.array([2, 4, 8, 16, 32])
    fit = toy_fit.fit_depth_exponent(depths, 2.0 / depths ** 1.5, "power")
    assert fit["a"] == pytest.approx(1.5, abs=1e-10) and fit["c"] == pytest.approx(2.0)
    fit = toy_fit.fit_depth_exponent(depths, 0.1 + 2.0 / depths ** 3.0, "power_offset")
    assert fit["a"] == pytest.approx(3.0, rel=1e-4)
    assert fit["L0"] == pytest.approx(0.1, rel=1e-4)
    with pytest.raises(ValueError, match="two distinct"):
        toy_fit.fit_depth_exponent([4, 4], [1.0, 0.9])
    with pytest.raises(ValueError, match="toy.fit_form"):
        toy_fit.fit_depth_exponent(depths, 1 / depths, "exp")


def test_train_and_fit_scripts(tmp_path):
    env = {"PYTHONPATH": str(SCRIPTS), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    runs = []
    for kind in ("independent", "tied"):
        out = tmp_path / kind
        result = subprocess.run(
            [sys.executable, SCRIPTS / "train_toy.py", "--spec", json.dumps(
                {"teacher_kind": kind, "temperature_index": None, "settings": SETTINGS,
                 "seed": 0, "out": str(out)})],
            capture_output=True, text=True, timeout=180, env=env)
        assert result.returncode == 0, result.stderr
        assert {p.name for p in out.iterdir()} == {"losses.csv", "teacher.json",
                                                   "provenance.json"}
        runs.append(out)
    fit_json, figure = tmp_path / "fit.json", tmp_path / "toy.png"
    result = subprocess.run(
        [sys.executable, SCRIPTS / "fit_toy.py", "--spec", json.dumps({
            "runs": [str(r) for r in runs], "form": "power", "exponent_bounds": [0.0, 10.0],
            "out_json": str(fit_json), "figure": str(figure)})],
        capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr
    record = json.loads(fit_json.read_text())
    assert {(f["teacher_kind"], f["temperature"]) for f in record["fits"]} == {
        (k, t) for k in ("independent", "tied") for t in (0.5, 1.0)}
    assert record["teacher_angles_deg"]["tied"] < record["teacher_angles_deg"]["independent"]
    assert figure.stat().st_size > 10_000
