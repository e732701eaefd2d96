"""plan.py --summary names the longest job (before, it gave only each rule's longest hours, so
finding the job meant reading every job row)."""

from collections import Counter

import pytest
from depthlab.plan.plan_tables import markdown
from depthlab.plan.resource_plan import JobPlan, ResourcePlan


def job(family, name, hours):
    plan = JobPlan(family, name, "pruning", ("m",), 1, {"mem_mb": 1000, "runtime": 60, "gpu": 2},
                   "derived", wall_hours=hours, gpu_hours=2 * hours)  # fmt: skip
    return (family, name), plan


def test_the_summary_names_the_longest_job():
    plan = ResourcePlan(
        None,
        dict(
            [
                job("prune_model", "a", 3.0),
                job("heal_pruned", "b/angular_n2", 7.25),
                job("heal_pruned", "c", 1.0),
            ]
        ),  # fmt: skip
        Counter(),
    )
    text = markdown(plan, per_job=False)
    assert "Longest job: `heal_pruned` `b/angular_n2`, 7.2 h estimated (2 GPUs, time limit" in text


def test_a_toy_jobs_cost_counts_its_flops_and_its_kernel_launches():
    from depthlab.plan.toy_costs import LAUNCH_SECONDS, toy_job_seconds

    settings = {"width": 4, "hidden": 8, "output_size": 5, "teacher_layers": 3,
                "student_depths": [1, 2], "batch_size": 10, "steps": 7, "replicates": 2}  # fmt: skip
    block = 4 * 8 + 8 + 8 * 4  # 72
    teacher = 2 * (3 * block + 20) * 10
    students = 6 * (1 * block + 20) * 10 + 6 * (2 * block + 20) * 10
    flops, seconds = toy_job_seconds(settings, flops_per_second=1e9)
    assert flops == 2 * 7 * (teacher + students)
    assert seconds == pytest.approx(flops / 1e9 + 2 * 7 * (4 * 3 + 16 * 3) * LAUNCH_SECONDS)


def test_the_paper_plan_estimates_its_train_toy_jobs():
    """Before, the paper config's 32 train_toy jobs were left out of the GPU-hour estimate."""
    from pathlib import Path

    from depthlab.config import load_config, resolve

    root = Path(__file__).resolve().parents[3]
    plan = resolve(load_config(root / "config" / "paper.yaml"), root).resource_plan
    toy = [job for (family, _), job in plan.jobs.items() if family == "train_toy"]
    assert len(toy) == 32 and all(job.gpu_hours and job.gpu_hours > 0 for job in toy)
    text = markdown(plan, per_job=False)
    row = next(line for line in text.splitlines() if line.startswith("| `train_toy` |"))
    assert float(row.split("|")[6]) == pytest.approx(sum(j.gpu_hours for j in toy), abs=0.06)
    assert "GPU jobs request their stage's values and are not estimated" not in text
