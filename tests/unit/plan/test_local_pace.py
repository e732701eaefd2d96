"""A local run names the planned jobs that would take far longer than the suite's, before the
first starts (the Snakefile's onstart prints these lines). Before, `pretrain: {steps: 10^12}`
was accepted and 115 jobs planned with no word of how long they would take."""

from pathlib import Path

from depthlab.config import apply_overrides, load_config, resolve
from depthlab.plan.local_pace import local_hours, slow_local_jobs

ROOT = Path(__file__).resolve().parents[3]


def planned(resolved, threads=1):
    return [(family, job, threads) for family in resolved.families for job in resolved.jobs(family)]


def test_the_default_suite_has_no_slow_job():
    resolved = resolve(load_config(ROOT / "config" / "default.yaml"), ROOT)
    assert slow_local_jobs(resolved.resource_plan, planned(resolved)) == []


def test_a_huge_step_count_names_each_slow_job_and_its_estimate():
    config = apply_overrides(
        load_config(ROOT / "config" / "default.yaml"), {"pretrain": "{steps: 1000000000}"}
    )
    resolved = resolve(config, ROOT)
    lines = slow_local_jobs(resolved.resource_plan, planned(resolved))
    plan = resolved.resource_plan.jobs[("pretrain_model", "pre_ln_s0")]
    hours = local_hours(plan.flops, 1)
    assert hours > 100  # the schema's largest step count (1e9) still takes days here
    assert lines[0].startswith("pretrain_model ")
    assert f"at least {hours:,.1f} h on 1 thread(s) here" in "\n".join(lines)
    assert len(lines) == 6 and lines[-1].startswith("... and ")
    # more threads, proportionally less time
    two = slow_local_jobs(resolved.resource_plan, planned(resolved, threads=2))
    assert f"at least {hours / 2:,.1f} h on 2 thread(s)" in "\n".join(two)
