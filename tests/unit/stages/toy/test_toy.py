"""Teacher-student toy models: architecture against a hand-written forward, tied vs independent
teachers (shared weights, successive-update angles), the KL objective, training, slicing by
temperature, the released and converged protocols (rmsnorm-ed inputs, the shared fixed readout,
the lr schedule), the depth-exponent fits per replicate and the scripts."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from depthlab.config import ConfigError, load_config, resolve, temperature_grid
from depthlab.stages.toy import fit as toy_fit
from depthlab.stages.toy import teacher_student as toy

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[4]
SCRIPTS = ROOT / "workflow_scripts"
SHAPE = toy.ToyShape(width=8, hidden=16, input_size=6, output_size=10)
SETTINGS = {
    "width": 8,
    "hidden": 16,
    "input_size": 6,
    "output_size": 10,
    "teacher_layers": 8,
    "student_depths": [1, 2, 4],
    "temperatures": [0.5, 1.0],
    "steps": 15,
    "batch_size": 32,
    "lr": 3e-3,
    "eval_batches": 2,
    "replicates": 1,
    "angle_samples": 64,
    "device": "cpu",
}


def naive_forward(model: toy.ToyResNet, x: np.ndarray, temperature: float = 1.0):
    """The paper's network in float64 numpy: h = rmsnorm(x E); h += W2 relu(W1 rmsnorm(h) + b)^2;
    logits = head(rmsnorm(h)) / T. Returns logits and the residual stream h_0..h_L."""

    def rms(v):
        return v / np.sqrt(np.mean(v**2, axis=-1, keepdims=True) + np.finfo(np.float32).eps)

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
    logits, hidden = teacher(
        torch.tensor(x, dtype=torch.float32), temperature=0.7, return_hidden=True
    )
    expected, states = naive_forward(teacher, x, temperature=0.7)
    np.testing.assert_allclose(logits.numpy(), expected, rtol=1e-4, atol=1e-4)
    assert len(hidden) == 6
    np.testing.assert_allclose(
        toy.successive_update_angles(hidden), naive_angles(states), atol=1e-2
    )


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
    np.testing.assert_allclose(
        tied.layers[0].mlp.fc_out.weight.numpy(),
        reference.mlp.fc_out.weight.detach().numpy() / np.sqrt(6),
        rtol=1e-6,
    )
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
    student = toy.build_student(SHAPE, 3, teacher, seed=1)
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
    untrained = toy.build_student(SHAPE, 2, teacher, seed=0)
    before = toy.evaluate(untrained, teacher, 1.0, 2, 32, seed=5)
    after = toy.train_students(
        teacher, [2], [1.0], steps=30, batch_size=32, lr=3e-3, seed=0, eval_batches=2, eval_seed=5
    )[0]["test_loss"]
    assert after < 0.8 * before
    # the T = 1.0 job alone trains exactly the T = 1.0 students of the full run
    sliced, _ = toy.run_teacher_kind(
        "tied", SETTINGS, seed=0, log=lambda _: None, temperature_index=1
    )
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
    fit = toy_fit.fit_depth_exponent(depths, 2.0 / depths**1.5, "power")
    assert fit["a"] == pytest.approx(1.5, abs=1e-10) and fit["c"] == pytest.approx(2.0)
    fit = toy_fit.fit_depth_exponent(depths, 0.1 + 2.0 / depths**3.0, "power_offset")
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
            [
                sys.executable,
                SCRIPTS / "train_toy.py",
                "--spec",
                json.dumps(
                    {
                        "teacher_kind": kind,
                        "temperature_index": None,
                        "settings": SETTINGS,
                        "seed": 0,
                        "out": str(out),
                    }
                ),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        assert {p.name for p in out.iterdir()} == {"losses.csv", "teacher.json", "provenance.json"}
        runs.append(out)
    fit_json, figure = tmp_path / "fit.json", tmp_path / "toy.png"
    result = subprocess.run(
        [
            sys.executable,
            SCRIPTS / "fit_toy.py",
            "--spec",
            json.dumps(
                {
                    "runs": [str(r) for r in runs],
                    "form": "power",
                    "exponent_bounds": [0.0, 10.0],
                    "protocol": {"name": "embedding", "steps": 15},
                    "out_json": str(fit_json),
                    "figure": str(figure),
                }
            ),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(fit_json.read_text())
    assert {(f["teacher_kind"], f["temperature"]) for f in record["fits"]} == {
        (k, t) for k in ("independent", "tied") for t in (0.5, 1.0)
    }
    assert record["teacher_angles_deg"]["tied"] < record["teacher_angles_deg"]["independent"]
    assert record["protocol"] == {"name": "embedding", "steps": 15}
    teacher_seeds = {
        kind: json.loads((tmp_path / kind / "teacher.json").read_text())["replicates"][0]["seed"]
        for kind in ("independent", "tied")
    }
    for fit in record["fits"]:
        (replicate,) = fit["replicates"]
        assert replicate["a"] == pytest.approx(fit["a"])  # one replicate: the pooled fit
        assert replicate["teacher_seed"] == teacher_seeds[fit["teacher_kind"]]
    assert figure.stat().st_size > 10_000


ROUND_SHAPE = toy.ToyShape(width=8, hidden=16, input_size=8, output_size=10)


@pytest.mark.parametrize("protocol", ["released", "converged"])
def test_inputs_are_rmsnormed_isotropic_gaussians(protocol):
    teacher = toy.build_teacher(ROUND_SHAPE, 3, "independent", seed=0, protocol=protocol)
    assert teacher.embedding is None
    x = torch.randn(40_000, 8, generator=torch.Generator().manual_seed(1))
    _, hidden = teacher(x, return_hidden=True)
    h0 = hidden[0].double().numpy()
    np.testing.assert_allclose(np.sqrt(np.mean(h0**2, axis=1)), 1.0, rtol=1e-5)
    # unit RMS and isotropic: E[h h^T] = I (the covariance of h / sqrt(width) is I / width)
    np.testing.assert_allclose(h0.T @ h0 / len(h0), np.eye(8), atol=0.03)
    # the embedding protocol's square Gaussian matrix is far from isotropic
    embedded = toy.build_teacher(ROUND_SHAPE, 3, "independent", seed=0, protocol="embedding")
    h0 = embedded(x, return_hidden=True)[1][0].double().numpy()
    eigenvalues = np.linalg.eigvalsh(h0.T @ h0 / len(h0))
    assert eigenvalues.max() / eigenvalues.min() > 10


def test_converged_student_reads_out_through_the_teachers_fixed_head():
    teacher = toy.build_teacher(ROUND_SHAPE, 4, "tied", seed=0, protocol="converged")
    student = toy.build_student(ROUND_SHAPE, 3, teacher, seed=1, protocol="converged")
    head = student.head.weight
    assert torch.equal(head, teacher.head.weight) and not head.requires_grad
    assert head.data_ptr() != teacher.head.weight.data_ptr()  # a copy, not the same tensor
    optimizer, _ = toy.make_optimizer(student, 1e-2, 10, "converged")
    assert all(p is not head for group in optimizer.param_groups for p in group["params"])
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(2))
    for _ in range(3):
        loss = toy.kl_to_teacher(student(x, 0.5), teacher(x, 0.5))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert head.grad is None and torch.equal(head, teacher.head.weight)
    assert student.layers[0].mlp.fc_in.weight.grad is not None
    # the other protocols train a head that starts at zero
    trained = toy.build_student(ROUND_SHAPE, 3, teacher, seed=1, protocol="released")
    assert trained.head.weight.requires_grad and not trained.head.weight.any()


def liu_lr(step, total, base):
    """Liu et al.'s converged-run schedule, written out: constant for the first 80% of steps,
    then linear from base towards base / 10."""
    if step < 0.8 * total:
        return base
    return base * (total - step) / (0.2 * total) * 0.9 + base * 0.1


@pytest.mark.parametrize("steps", [100, 37])
def test_converged_lr_schedule_matches_the_released_formula(steps):
    teacher = toy.build_teacher(ROUND_SHAPE, 4, "tied", seed=0, protocol="converged")
    student = toy.build_student(ROUND_SHAPE, 16, teacher, seed=1, protocol="converged")
    optimizer, schedule = toy.make_optimizer(student, 2.4e-3, steps, "converged")
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    expected = [liu_lr(step, steps, 2.4e-3 / 4) for step in range(steps)]
    np.testing.assert_allclose(seen, expected, rtol=1e-12)
    assert seen[0] == pytest.approx(6e-4) and seen[-1] < 0.25 * seen[0]
    released, schedule = toy.make_optimizer(student, 2.4e-3, steps, "released")
    assert schedule is None and released.param_groups[0]["lr"] == 2.4e-3


def test_a_tiny_converged_run_has_finite_decreasing_losses():
    settings = {
        **SETTINGS,
        "input_size": None,
        "protocol": "converged",
        "steps": 40,
        "lr": 2e-2,
        "temperatures": [1.0],
    }
    frame, angles = toy.run_teacher_kind("independent", settings, seed=0, log=lambda _: None)
    assert angles["protocol"] == "converged"
    assert np.isfinite(frame["test_loss"]).all() and (frame["test_loss"] > 0).all()
    shape = toy.toy_shape(settings)
    teacher = toy.build_teacher(shape, 8, "independent", seed=0, protocol="converged")
    untrained = toy.build_student(shape, 2, teacher, seed=3, protocol="converged")
    before = toy.evaluate(untrained, teacher, 1.0, 2, 32, seed=5, protocol="converged")
    after = toy.train_students(
        teacher,
        [2],
        [1.0],
        steps=40,
        batch_size=32,
        lr=2e-2,
        seed=3,
        eval_batches=2,
        eval_seed=5,
        protocol="converged",
    )[0]
    assert np.isfinite(after["final_train_loss"])
    assert after["test_loss"] < 0.7 * before


def test_rmsnorm_protocols_need_inputs_of_width():
    with pytest.raises(ValueError, match="toy.input_size: 6 must equal toy.width"):
        toy.build_teacher(SHAPE, 3, "tied", seed=0, protocol="converged")
    with pytest.raises(ValueError, match="toy.protocol: 'fast'"):
        toy.build_teacher(ROUND_SHAPE, 3, "tied", seed=0, protocol="fast")
    config = load_config(ROOT / "config" / "test.yaml")
    config["toy"] = {**config["toy"], "protocol": "converged", "input_size": 4}
    with pytest.raises(ConfigError, match="toy.input_size: 4 must equal toy.width"):
        resolve(config)
    config["toy"]["input_size"] = None
    spec = resolve(config).jobs("fit_toy")["toy"]
    assert spec["protocol"]["name"] == "converged"


def test_exponents_per_replicate_and_their_t_interval():
    depths = np.array([2, 4, 8, 16])
    planted = {0: 1.0, 1: 1.4, 2: 1.2}
    rows = [
        {
            "teacher_kind": "tied",
            "temperature": 1.0,
            "replicate": r,
            "student_depth": d,
            "test_loss": 0.3 * d**-a * (1 + 0.01 * (-1) ** i),
        }
        for r, a in planted.items()
        for i, d in enumerate(depths)
    ]
    (fit,) = toy_fit.fit_toy_exponents(pd.DataFrame(rows))
    got = [r["a"] for r in fit["replicates"]]
    np.testing.assert_allclose(got, list(planted.values()), atol=0.02)
    for one in fit["replicates"]:
        assert one["a_low"] < one["a"] < one["a_high"]
    values = np.array(got)
    half = 4.302653 * values.std(ddof=1) / np.sqrt(3)  # t_0.975 with 2 degrees of freedom
    interval = fit["replicate_interval"]
    assert interval["mean"] == pytest.approx(values.mean())
    assert (interval["low"], interval["high"]) == pytest.approx(
        (values.mean() - half, values.mean() + half)
    )
    assert fit["a_low"] < fit["a"] < fit["a_high"]
