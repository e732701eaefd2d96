"""The plan priced from measurement: cluster.gpu.utilisation per job family, and
`plan.py --calibrate gpu_check.json --write OVERLAY` (depthlab.plan.calibration), which writes the
GPU and the shares gpu_check.py measured and changes the plan by exactly the measured rates."""

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from depthlab.config import ConfigError, load_config, resolve
from depthlab.plan.calibration import calibration, check_target, read_gpu_check, write_overlay
from depthlab.plan.job_costs import UTILISATION_FAMILIES, Assumptions, Work
from local_snakemake import local_env

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"
# A planted gpu_check.json (the keys gpu_check.py writes): the paper config's own GPU and peaks,
# so that only the utilisation shares change, each family to a different share.
# (A training share of 0.2 would push the 1B pretraining past the paper's 168-hour partition
# limit: the plan then refuses, naming the job.)
SHARES = {"training": 0.3, "analysis": 0.4, "lm_eval": 0.25, "healing": 0.5}


def planted_check(**changes) -> dict:
    check = {
        "device": {"type": "cuda", "name": "A100-SXM4-80GB", "memory_gb": 80.0,
                   "driver": "550.54", "count": 1},
        "versions": {"torch": "2.13.0", "cuda": "12.8"},
        "date": "2026-12-04T10:00:00+00:00",
        "commit": "0123456789ab",
        "peaks": {"bf16_tflops": 312.0, "fp32_tflops": 19.5, "fp64_tflops": 19.5},
        "utilisation": dict(SHARES),
    }  # fmt: skip
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = check
        for parent in parents:
            node = node[parent]
        if value is None:
            del node[key]
        else:
            node[key] = value
    return check


def write_check(tmp_path, check) -> Path:
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps(check))
    return path


def plan_command(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "workflow_scripts" / "plan.py"), *map(str, args)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=local_env(),
    )  # fmt: skip


def calibrate(check_path, target, config, configs) -> dict:
    """What plan.py --calibrate does before it plans: the target checked, the overlay written."""
    target = check_target(target, configs)
    gpu = calibration(check_path, config, configs)
    write_overlay(target, gpu, check_path)
    return gpu


def compute_hours(job, assumptions) -> float:
    """A job's estimated GPU-hours less its GPUs' startup: its compute."""
    startup = assumptions.sizing["startup_minutes"] / 60
    return job.gpu_hours - job.request["gpu"] * startup


@pytest.fixture(scope="module")
def paper():
    return load_config(PAPER)


def test_one_number_is_every_familys_share():
    gpu = {"utilisation": 0.3, "bf16_tflops": 100, "fp32_tflops": 10, "fp64_tflops": 5}
    scalar = Assumptions(gpu=gpu, sizing={})
    per_family = Assumptions(
        gpu={**gpu, "utilisation": dict.fromkeys(UTILISATION_FAMILIES, 0.3)}, sizing={}
    )
    work = Work(
        flops={("training", "bfloat16"): 6e15, ("lm_eval", "float32"): 3e14,
               ("analysis", "float64"): 1.5e14},
        phases=[], weights=0, weights_what="", host=0, disk=0,
    )  # fmt: skip
    expected = 6e15 / 30e12 + 3e14 / 3e12 + 1.5e14 / 1.5e12
    assert scalar.seconds(work) == pytest.approx(expected, rel=1e-12)
    assert per_family.seconds(work) == pytest.approx(expected, rel=1e-12)
    # each family's FLOPs at its own share: halving training's share doubles its part only
    halved = Assumptions(
        gpu={**gpu, "utilisation": {**dict.fromkeys(UTILISATION_FAMILIES, 0.3), "training": 0.15}},
        sizing={},
    )
    assert halved.seconds(work) == pytest.approx(expected + 6e15 / 30e12, rel=1e-12)


def test_the_old_scalar_form_still_plans_the_same_hours(paper):
    """utilisation: 0.4 (the form configs used before) and {every family: 0.4} plan alike."""
    scalar = copy.deepcopy(paper)
    scalar["cluster"]["gpu"]["utilisation"] = 0.4
    families = copy.deepcopy(paper)
    families["cluster"]["gpu"]["utilisation"] = dict.fromkeys(UTILISATION_FAMILIES, 0.4)
    a, b = resolve(scalar).resource_plan, resolve(families).resource_plan
    assert a.jobs.keys() == b.jobs.keys()
    for key, job in a.jobs.items():
        assert job.gpu_hours == b.jobs[key].gpu_hours, key


def test_calibrate_writes_the_measured_values_and_the_plan_changes_by_them(tmp_path, paper):
    check = write_check(tmp_path, planted_check())
    overlay = tmp_path / "calibrated.yaml"
    result = plan_command(PAPER, "--summary", "--calibrate", check, "--write", overlay)
    assert result.returncode == 0, result.stderr[-3000:]
    gpu = yaml.safe_load(overlay.read_text())["cluster"]["gpu"]
    assert gpu["utilisation"] == SHARES
    assert (gpu["bf16_tflops"], gpu["fp32_tflops"], gpu["fp64_tflops"]) == (312.0, 19.5, 19.5)
    assert "gpu_check.py on one A100-SXM4-80GB" in gpu["source"]
    assert "2026-12-04" in gpu["source"] and "0123456789ab" in gpu["source"]
    assert "per_node" not in gpu  # the cluster's, kept from the config

    before = resolve(paper).resource_plan
    after = resolve(load_config(PAPER, overlay)).resource_plan
    a = after.assumptions
    assert a.gpu["per_node"] == paper["cluster"]["gpu"]["per_node"]
    # one family's jobs: compute scales by the old share over the new one (0.4 everywhere before)
    for family, share in (("evaluate_pruned", "lm_eval"), ("analyse_model", "analysis")):
        jobs = [k for k in before.jobs if k[0] == family]
        assert jobs
        for key in jobs:
            old, new = before.jobs[key], after.jobs[key]
            assert new.request["gpu"] == old.request["gpu"]
            assert compute_hours(new, a) == pytest.approx(
                compute_hours(old, before.assumptions) * 0.4 / SHARES[share], rel=1e-9
            ), key
    # healing at 0.5 of the peak (0.4 assumed) and training at 0.3: shorter and longer jobs
    heal = [k for k in before.jobs if k[0] == "heal_pruned"]
    assert all(after.jobs[k].gpu_hours < before.jobs[k].gpu_hours for k in heal)
    pretrain = [k for k in before.jobs if k[0] == "pretrain_model"]
    assert all(after.jobs[k].gpu_hours > before.jobs[k].gpu_hours for k in pretrain)
    # the printed plan is the calibrated one, and stderr states both totals
    printed = re.search(
        r"^\| \*\*total\*\* \| \d+ \| \| \| \| \*\*([\d,.]+)\*\*", result.stdout, re.M
    )
    total_after = sum(j.gpu_hours for j in after.jobs.values() if j.gpu_hours is not None)
    total_before = sum(j.gpu_hours for j in before.jobs.values() if j.gpu_hours is not None)
    assert float(printed.group(1).replace(",", "")) == pytest.approx(total_after, abs=0.06)
    assert f"{total_before:,.1f} with the config's values, {total_after:,.1f} calibrated" in (
        result.stderr
    )
    assert total_after < total_before  # healing dominates the paper's GPU-hours
    assert "training 30%, analysis 40%, lm_eval 25%, healing 50%" in result.stdout


def test_calibrating_with_a_faster_gpu_shortens_every_estimated_job(tmp_path, paper):
    """An H200-like check (twice the peaks, same shares as assumed): every compute part halves."""
    faster = planted_check(
        device__name="NVIDIA H200", device__memory_gb=139.8,
        peaks={"bf16_tflops": 624.0, "fp32_tflops": 39.0, "fp64_tflops": 39.0},
        utilisation=dict.fromkeys(UTILISATION_FAMILIES, 0.4),
    )  # fmt: skip
    overlay = tmp_path / "h200.yaml"
    calibrate(write_check(tmp_path, faster), overlay, paper, [PAPER])
    before = resolve(paper).resource_plan
    after = resolve(load_config(PAPER, overlay)).resource_plan
    assert after.assumptions.gpu["name"] == "NVIDIA H200"
    for key, old in before.jobs.items():
        new = after.jobs[key]
        if old.gpu_hours is None or new.request.get("gpu") != old.request.get("gpu"):
            continue  # more memory per GPU may pack a job onto fewer GPUs
        if key[0] == "train_toy":  # its kernel launches (plan/toy_costs.py) take the same time
            continue
        assert compute_hours(new, after.assumptions) == pytest.approx(
            compute_hours(old, before.assumptions) / 2, rel=1e-9
        ), key


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"device__type": "cpu"}, "measured without a GPU"),
        (
            {f"utilisation__{family}": None for family in UTILISATION_FAMILIES},
            "measured no job family's share",
        ),
        ({"utilisation__training": 1.7}, "`utilisation.training` is 1.7, not in (0, 1]"),
        ({"peaks__fp64_tflops": "fast"}, "`peaks.fp64_tflops` is 'fast', not a number"),
    ],
)
def test_a_check_that_cannot_calibrate_is_refused_naming_the_key(tmp_path, changes, message):
    path = write_check(tmp_path, planted_check(**changes))
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_gpu_check(path)


def test_a_family_the_check_did_not_measure_keeps_the_configs_share(tmp_path, paper):
    """A check whose time budget cut the `training` row calibrates the other families; training
    keeps the config's share (0.4 in paper.yaml), and `source` says so."""
    check = write_check(tmp_path, planted_check(utilisation__training=None))
    gpu = calibrate(check, tmp_path / "overlay.yaml", paper, [PAPER])
    assert gpu["utilisation"] == {
        **SHARES,
        "training": paper["cluster"]["gpu"]["utilisation"]["training"],
    }
    assert gpu["source"].endswith("except training: not measured, the calibrated config's share")
    scalar = copy.deepcopy(paper)
    scalar["cluster"]["gpu"]["utilisation"] = 0.35  # one number: every family's share
    gpu = calibration(check, scalar, [PAPER])
    assert gpu["utilisation"]["training"] == 0.35 and gpu["utilisation"]["healing"] == 0.5


def test_calibrate_never_overwrites_a_config(tmp_path, paper):
    check = write_check(tmp_path, planted_check())
    with pytest.raises(ConfigError, match="is a config being calibrated"):
        calibrate(check, PAPER, paper, [PAPER])
    handwritten = tmp_path / "mine.yaml"
    handwritten.write_text("cluster: {}\n")
    with pytest.raises(ConfigError, match="was not written by --calibrate"):
        calibrate(check, handwritten, paper, [PAPER])
    assert handwritten.read_text() == "cluster: {}\n"
    with pytest.raises(ConfigError, match="has no cluster.gpu"):
        calibrate(check, tmp_path / "new.yaml", load_config(ROOT / "config" / "test.yaml"),
                  [ROOT / "config" / "test.yaml"])  # fmt: skip
    # an overlay --calibrate wrote is rewritten
    overlay = tmp_path / "calibrated.yaml"
    calibrate(check, overlay, paper, [PAPER])
    calibrate(write_check(tmp_path, planted_check(utilisation__training=0.3)), overlay, paper,
              [PAPER])  # fmt: skip
    assert yaml.safe_load(overlay.read_text())["cluster"]["gpu"]["utilisation"]["training"] == 0.3


def test_a_calibration_the_plan_refuses_is_not_written(tmp_path):
    """Training at 0.2 of the peak pushes the 1B pretraining past the paper's 168-hour limit:
    the plan's one-line refusal names the job, and no overlay is written."""
    check = write_check(tmp_path, planted_check(utilisation__training=0.2))
    overlay = tmp_path / "slow.yaml"
    result = plan_command(PAPER, "--summary", "--calibrate", check, "--write", overlay)
    assert result.returncode != 0
    assert "cluster.max_runtime: job pretrain_model[llama1b_" in result.stderr
    assert not overlay.exists()
    # a longer partition limit (--config, as Snakemake's) makes it plannable, and written
    result = plan_command(PAPER, "--summary", "--calibrate", check, "--write", overlay,
                          "--config", "cluster={max_runtime: 336}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert yaml.safe_load(overlay.read_text())["cluster"]["gpu"]["utilisation"]["training"] == 0.2


def test_the_cli_error_is_one_line(tmp_path):
    result = plan_command(
        PAPER, "--calibrate", write_check(tmp_path, planted_check(device__type="cpu")),
        "--write", tmp_path / "x.yaml",
    )  # fmt: skip
    assert result.returncode != 0
    assert "measured without a GPU" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.yaml").exists()
