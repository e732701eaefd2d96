"""The paper suite fits a cluster: one job per healed variant and per lm-eval set, no job above
cluster.max_runtime, a too-small limit refused naming the job and the key, and the parallel wall
time on N GPUs checked against schedules worked out by hand."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
from depthlab.config import ConfigError, load_config, resolve
from depthlab.plan.plan_tables import parallel_wall_hours
from depthlab.plan.resource_plan import JobPlan
from depthlab.settings.pruning import grid

ROOT = Path(__file__).resolve().parents[3]


def config(name: str) -> dict:
    return load_config(ROOT / "config" / name)


@pytest.fixture(scope="module")
def paper():
    return resolve(config("paper.yaml"))


def test_no_paper_job_exceeds_the_stated_limit_with_the_healing_grid_intact(paper):
    limit = paper.config["cluster"]["max_runtime"]
    assert limit == 168
    longest = max(p.request["runtime"] for p in paper.resource_plan.jobs.values())
    assert longest <= limit * 60
    # the paper's healing grid is every n for angular and deepest: one heal job each
    healing = paper.config["pruning"]["healing"]
    assert healing["n_grid"] is None and healing["strategies"] == ["angular", "deepest"]
    heals = paper.jobs("heal_pruned")
    for name in paper.jobs("prune_model"):
        depth = _depth(paper, name)
        expected = {f"{name}/{s}_n{n}" for s in healing["strategies"] for n in grid(None, depth)}
        assert {job for job in heals if job.split("/")[0] == name} == expected, name
    # the 70B model's healing alone was 10,000 hours in one job; each variant is now its own
    seventy = [p for (f, j), p in paper.resource_plan.jobs.items() if f == "heal_pruned" and j.startswith("llama2_70b/")]  # fmt: skip
    assert len(seventy) == 2 * 79
    longest = max(p.wall_hours for p in seventy)
    assert sum(p.wall_hours for p in seventy) > 50 * longest and longest < limit


def _depth(resolved, name: str) -> int:
    from depthlab.config.shapes import model_shape

    return model_shape(resolved, name, ROOT).num_layers


def test_the_paper_lm_eval_runs_one_job_per_removal_set(paper):
    evaluations = [j for j in paper.jobs("evaluate_pruned") if j.startswith("llama2_70b/")]
    # the full model, angular / deepest / greedy at every n of 80 layers, every single layer
    assert len(evaluations) == 1 + 3 * 79 + 80
    assert "llama2_70b/full" in evaluations and "llama2_70b/single79" in evaluations
    spec = paper.jobs("prune_model")["llama2_70b"]
    assert spec["lm_eval"]["per_set_jobs"] is True
    gather = paper.jobs("gather_pruning")["llama2_70b"]
    assert len(gather["evaluations"]) == len(evaluations) and len(gather["heals"]) == 2 * 79


def test_a_too_small_limit_is_refused_naming_the_job_and_the_key():
    small = copy.deepcopy(config("paper.yaml"))
    small["cluster"]["max_runtime"] = 150
    with pytest.raises(
        ConfigError,
        match=r"^cluster\.max_runtime: job heal_pruned\[llama2_70b/angular_n1\] requests 1\d\d\.\d h, "
        r"above the limit of 150 h; change pruning\.healing\.steps .* or "
        r"models\.llama2_70b\.resources\.runtime, or cluster\.max_runtime",
    ):
        resolve(small)
    small["cluster"]["max_runtime"] = 100  # the 70B model's loss sweep alone is above it
    with pytest.raises(ConfigError, match=r"^cluster\.max_runtime: job prune_model\[llama2_70b\]"):
        resolve(small)
    # lm-eval inside prune_model again: the 13B model's prune job is the first above the limit
    together = copy.deepcopy(config("paper.yaml"))
    together["pruning"]["lm_eval"]["per_set_jobs"] = False
    with pytest.raises(
        ConfigError,
        match=r"^cluster\.max_runtime: job prune_model\[llama2_13b\] requests [\d,.]+ h, above "
        r"the limit of 168 h; change pruning\.lm_eval\.per_set_jobs",
    ):
        resolve(together)
    # no limit stated: nothing refused
    unlimited = copy.deepcopy(together)
    del unlimited["cluster"]["max_runtime"]
    assert resolve(unlimited).resource_plan.jobs[("prune_model", "llama2_70b")].wall_hours > 1_000


def job(hours: float, gpus: int = 1) -> JobPlan:
    return JobPlan("r", f"j{hours}", "s", (), None, {"gpu": gpus, "runtime": 60, "mem_mb": 1}, "derived", wall_hours=hours)  # fmt: skip


def test_parallel_wall_time_against_schedules_by_hand():
    # 5, 4, 3, 3, 3 hours on 2 GPUs, longest first: GPU a 5 + 3 = 8, GPU b 4 + 3 + 3 = 10
    assert parallel_wall_hours([job(h) for h in (3, 5, 3, 4, 3)], 2) == 10
    # one GPU: the sum; enough GPUs: the longest job
    assert parallel_wall_hours([job(h) for h in (3, 5, 4)], 1) == 12
    assert parallel_wall_hours([job(h) for h in (3, 5, 4)], 8) == 5
    # a 2-GPU job waits for two free GPUs: 6 h (2 GPUs) then 2 + 2 beside it on the third GPU,
    # then the 3-GPU job after everything: 6 + 1
    assert parallel_wall_hours([job(6, 2), job(2), job(2), job(1, 3)], 3) == 7
    assert parallel_wall_hours([job(1, 4)], 3) is None


def test_the_plan_command_shows_the_parallel_wall_time():
    result = subprocess.run(
        [sys.executable, str(ROOT / "workflow_scripts" / "plan.py"), "config/paper.yaml",
         "--summary", "--gpus", "64"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    header = next(line for line in result.stdout.splitlines() if line.startswith("| rule |"))
    assert header.endswith("| wall time on 64 GPUs (h) |")
    row = next(line for line in result.stdout.splitlines() if line.startswith("| `heal_pruned` |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    summed, longest, parallel = (float(cells[i].replace(",", "")) for i in (6, 7, 9))
    assert longest <= parallel < summed and parallel >= summed / 64
    refused = subprocess.run(
        [sys.executable, str(ROOT / "workflow_scripts" / "plan.py"), "config/paper.yaml",
         "--summary", "--config", "cluster={max_runtime: 50}"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert refused.returncode == 2 and "cluster.max_runtime: job " in refused.stderr
