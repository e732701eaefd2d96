"""A local run's time check: each planned job's work (the plan's FLOPs, depthlab.plan.job_costs)
at a CPU thread's pace, so a config that would keep a laptop busy for days (`pretrain: {steps:
1000000000000}`) is named job by job before the first one starts, not discovered after hours.

LOCAL_FLOPS_PER_THREAD is deliberately fast: on the default suite's jobs (a 2-core AMD EPYC, one
thread per job) the plan's FLOPs ran at 1e9-7e10 FLOP/s per thread (small jobs are dominated by
start-up), so an estimate at 1e11 is a lower bound on the time, and a warning is a job that
takes at least that long.
"""

from __future__ import annotations

LOCAL_FLOPS_PER_THREAD = 1e11
SLOW_JOB_HOURS = 1.0  # the default suite's longest job takes under 2 min
SHOWN = 5


def local_hours(flops: float, threads: int) -> float:
    return flops / (LOCAL_FLOPS_PER_THREAD * max(threads, 1)) / 3600


def slow_local_jobs(plan, planned, limit_hours: float = SLOW_JOB_HOURS) -> list[str]:
    """Lines naming the planned jobs whose work takes more than `limit_hours` locally, slowest
    first (the first SHOWN, then how many more). `planned`: (rule, job name, threads) of each job
    the run will start; `plan`: the config's ResourcePlan."""
    slow = []
    for family, job, threads in planned:
        job_plan = plan.jobs.get((family, job))
        if job_plan is None or not job_plan.flops:
            continue
        hours = local_hours(job_plan.flops, threads)
        if hours > limit_hours:
            slow.append((hours, family, job, threads))
    slow.sort(reverse=True)
    lines = [
        f"{family} {job}: at least {hours:,.1f} h on {threads} thread(s) here "
        f"({flops_text(plan.jobs[(family, job)].flops)} FLOPs at {LOCAL_FLOPS_PER_THREAD:.0e} "
        f"FLOP/s per thread)"
        for hours, family, job, threads in slow[:SHOWN]
    ]
    if len(slow) > SHOWN:
        lines.append(f"... and {len(slow) - SHOWN} more job(s) over {limit_hours:g} h")
    return lines


def flops_text(flops: float) -> str:
    return f"{flops:.2e}"
