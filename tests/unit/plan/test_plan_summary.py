"""plan.py --summary names the longest job (before, it gave only each rule's longest hours, so
finding the job meant reading every job row)."""

from collections import Counter

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
