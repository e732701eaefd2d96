"""workflow_scripts/gpu_check.py's smoke run (CI): on a machine without a GPU it says so and runs
the same checks at tiny shapes, with a narrowed DAG of config/test.yaml, in a fresh copy of the
checkout. Its gpu_check.json is what `plan.py --calibrate` reads: refused as a CPU measurement,
and, marked as a GPU's, written into the overlay value for value."""

import json
import math
import subprocess
import sys

import pytest
import yaml
from depthlab.plan.calibration import read_gpu_check
from depthlab.plan.job_costs import UTILISATION_FAMILIES
from local_snakemake import fresh_checkout, local_env

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    checkout = fresh_checkout(tmp_path_factory.mktemp("gpu_check") / "depthlab")
    out = checkout / "results" / "gpu_check"
    result = subprocess.run(
        [sys.executable, "workflow_scripts/gpu_check.py", "--out", str(out), "--cores", "2"],
        # no GPU visible, also on a GPU machine: the smoke run's result is the same everywhere
        cwd=checkout, capture_output=True, text=True, timeout=600,
        env={**local_env(), "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    return checkout, out, result


def test_the_smoke_run_says_there_is_no_gpu_and_runs_every_check(smoke):
    checkout, out, result = smoke
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "no GPU is visible" in result.stdout
    record = json.loads((out / "gpu_check.json").read_text())
    assert record["device"]["type"] == "cpu"
    # the narrowed DAG ran: data, one model's pretraining and its analysis
    assert record["dag"]["returncode"] == 0 and "narrowed" in record["dag"]["what"]
    assert (checkout / "results" / "gpu_check" / "analysis" / "val" / "pre_ln").is_dir()
    assert all(record["peaks"][k] > 0 for k in ("bf16_tflops", "fp32_tflops", "fp64_tflops"))
    rows = [r for r in record["throughput"] if "tokens_per_s" in r]
    assert {(r["loop"], r["norm_scheme"]) for r in rows} >= {
        ("plain", "pre_ln"), ("depthlab", "pre_ln"), ("depthlab", "lns")
    }  # fmt: skip
    for row in rows:
        assert row["tokens_per_s"] > 0 and 0 < row["share_of_peak"] < 1
        assert math.isfinite(row["final_loss"])
        if row["loop"] == "depthlab":
            assert row["vs_plain"] > 0
    assert set(record["utilisation"]) == set(UTILISATION_FAMILIES)
    assert all(0 < share < 1 for share in record["utilisation"].values())
    # the analysis in float32 against float64, on the CPU here: the same blocks, a small gap
    check = record["analysis_check"]
    assert check["same_block_for_every_n"] and check["max_abs_difference"] < 1e-4
    assert "no GPU visible" in record["cuda_tests"]["skipped"]
    page = (out / "gpu_check.md").read_text()
    assert "no GPU visible" in page and record["commit"] in page and "torch " in page
    assert "| utilisation `healing`" in page and "| QLoRA healing on cpu | ran;" in page


def test_calibrate_refuses_the_cpu_run_and_takes_a_gpu_runs_values(smoke, tmp_path):
    checkout, out, result = smoke
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    plan = [sys.executable, "workflow_scripts/plan.py", "config/paper.yaml", "--summary"]
    refused = subprocess.run(
        [*plan, "--calibrate", str(out / "gpu_check.json"), "--write", str(tmp_path / "a.yaml")],
        cwd=checkout, capture_output=True, text=True, timeout=300, env=local_env(),
    )  # fmt: skip
    assert refused.returncode != 0 and "measured without a GPU" in refused.stderr
    # the same record as a GPU's (its format is what --calibrate reads); at a CPU's peaks the
    # paper's jobs need years, so the partition limit is lifted
    record = json.loads((out / "gpu_check.json").read_text())
    record["device"].update(type="cuda", memory_gb=80.0, driver="test")
    record["utilisation"] = {
        f: round(0.3 + 0.1 * i, 4) for i, f in enumerate(UTILISATION_FAMILIES)
    }  # fmt: skip
    as_gpu = tmp_path / "gpu_check.json"
    as_gpu.write_text(json.dumps(record))
    read_gpu_check(as_gpu)
    overlay = tmp_path / "calibrated.yaml"
    taken = subprocess.run(
        [*plan, "--calibrate", str(as_gpu), "--write", str(overlay),
         "--config", "cluster={max_runtime: 1.0e+9}"],
        cwd=checkout, capture_output=True, text=True, timeout=300, env=local_env(),
    )  # fmt: skip
    assert taken.returncode == 0, taken.stderr[-3000:]
    gpu = yaml.safe_load(overlay.read_text())["cluster"]["gpu"]
    assert gpu["utilisation"] == record["utilisation"]
    assert gpu["bf16_tflops"] == pytest.approx(record["peaks"]["bf16_tflops"], rel=1e-3)
    assert record["commit"] in gpu["source"]


def test_the_gpu_run_plans_the_whole_test_dag_with_every_device_cuda():
    """On a GPU the DAG command has no target (the whole DAG) and its --config overrides, read as
    Snakemake reads them, put every job that names a device on cuda and pretraining on
    precision auto; the check's own copy of the config (for the analysis comparison) agrees."""
    from pathlib import Path

    from depthlab.config import apply_overrides, load_config, resolve
    from depthlab.gpu_check import dag_command, filter_config

    root = Path(__file__).resolve().parents[2]
    command, _ = dag_command(root, cuda=True, cores=16)
    assert command[1:3] == ["-m", "snakemake"]  # this interpreter's snakemake
    assert command[3].startswith("--configfile=")  # no target before it: the default, all
    overrides = dict(item.split("=", 1) for item in command[command.index("--config") + 1 :])
    config = apply_overrides(load_config(root / "config" / "test.yaml"), overrides)
    assert config == filter_config(root, cuda=True)
    resolved = resolve(config)
    devices = {
        (family, where["device"])
        for family in resolved.families
        for spec in resolved.jobs(family).values()
        for where in (spec, spec.get("settings") or {})  # train_toy's sits in its settings
        if "device" in where
    }
    assert {"analyse_model", "prune_model", "heal_pruned", "train_toy"} <= {f for f, _ in devices}
    assert {d for _, d in devices} == {"cuda"}, sorted(devices)
    pretrain = resolved.jobs("pretrain_model")
    assert {spec["model"]["train"]["precision"] for spec in pretrain.values()} == {"auto"}


def test_the_page_of_a_gpu_record_names_the_gpu_and_its_stack(smoke):
    """The page's GPU branch, on the smoke record marked as a GPU's: GPU, memory, capability,
    driver, CUDA, date and commit, and no smoke-run note."""
    from depthlab.gpu_check import markdown

    _, out, result = smoke
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    record = json.loads((out / "gpu_check.json").read_text())
    record["device"] = {"type": "cuda", "name": "NVIDIA H200", "memory_gb": 139.8,
                        "capability": "9.0", "driver": "570.86", "count": 1}  # fmt: skip
    record["versions"]["cuda"] = "12.8"
    page = markdown(record)
    assert "- device: NVIDIA H200, 139.8 GB, compute capability 9.0, driver 570.86" in page
    assert "- CUDA 12.8, python " in page and f"commit {record['commit']}" in page
    assert "smoke run" not in page and "| check | NVIDIA H200 (cuda) |" in page


def test_the_gpu_run_times_every_registered_norm_scheme():
    """The GPU run's throughput plan names each scheme of the norm-scheme registry once (a
    scheme added there, as Peri-LN was, is timed without another list to edit), Pre-LN and LNS
    first so that a time budget cuts the others."""
    from depthlab.core import norm_schemes
    from depthlab.gpu_check import Sizes, throughput_plan

    sizes = Sizes.for_device(cuda=True)
    timed = [r["norm_scheme"] for r in throughput_plan(sizes) if r["shape"] == "cod_130m"]
    assert set(timed) == set(norm_schemes.names())
    assert sizes.norm_schemes[:2] == ("pre_ln", "lns")
    assert sorted(sizes.norm_schemes) == sorted(norm_schemes.names())


def test_a_time_budget_cuts_no_row_the_calibration_needs():
    """The GPU run's order: the 1B shape's depthlab Pre-LN row (the `training` family's share,
    without which `plan.py --calibrate` refuses the record) comes before any LNS or other-scheme
    row, each of which compiles for 30-100 s (LNS 103 s on an H200); the first H200 run's budget
    cut it when LNS came first."""
    from depthlab.gpu_check import Sizes, throughput_plan

    sizes = Sizes.for_device(cuda=True)
    plan = throughput_plan(sizes)
    needed = {"shape": "1b", "loop": "depthlab", "norm_scheme": "pre_ln", "precision": "pure_bf16"}
    first_other_scheme = next(i for i, r in enumerate(plan) if r["norm_scheme"] != "pre_ln")
    assert plan.index(needed) < first_other_scheme
    assert plan[: plan.index(needed)] == [
        {**needed, "shape": "cod_130m", "loop": "plain"},
        {**needed, "shape": "cod_130m"},
        {**needed, "loop": "plain"},
    ]


def test_a_copied_checkout_is_named_by_depthlab_commit(tmp_path, monkeypatch):
    """A checkout copied to a node (no .git there, or a stale one) records the commit its copier
    names, not unknown or the stale .git's."""
    from depthlab.gpu_check import machine_facts

    monkeypatch.setenv("DEPTHLAB_COMMIT", "0123456789abcdef0123")
    assert machine_facts(tmp_path)["commit"] == "0123456789ab"
    monkeypatch.delenv("DEPTHLAB_COMMIT")
    assert machine_facts(tmp_path)["commit"] == "unknown"
