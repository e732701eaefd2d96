"""A resource plan (depthlab.plan.resource_plan) as markdown tables: the assumptions, one row per
rule, the totals (the sums of the job rows) and one row per job. GB = 2^30 bytes, as Slurm and
nvidia-smi count."""

from __future__ import annotations

from depthlab.plan.resource_plan import JobPlan, ResourcePlan


def _gb(mb) -> str:
    return "" if mb is None else f"{mb / 1024:,.1f}"


def _hours(value) -> str:
    return "—" if value is None else f"{value:,.1f}"


def _limit_hours(plan: JobPlan) -> float:
    return plan.request["runtime"] / 60


def parallel_wall_hours(jobs: list[JobPlan], gpus: int) -> float | None:
    """Wall time of a rule's jobs on `gpus` GPUs: longest job first, each job starting when as
    many GPUs as it requests are free (list scheduling, within 4/3 of the optimum for jobs of one
    GPU; Graham 1969). None when a job requests more GPUs than there are or has no estimate."""
    import heapq

    timed = [j for j in jobs if j.wall_hours is not None]
    if not timed or any(j.request.get("gpu", 0) > gpus for j in timed):
        return None
    free = [0.0] * gpus  # when each GPU is next free
    heapq.heapify(free)
    end = 0.0
    for job in sorted(timed, key=lambda j: j.wall_hours, reverse=True):
        taken = [heapq.heappop(free) for _ in range(max(1, job.request.get("gpu", 0)))]
        finish = max(taken) + job.wall_hours
        for _ in taken:
            heapq.heappush(free, finish)
        end = max(end, finish)
    return end


def stage_rows(plan: ResourcePlan) -> list[dict]:
    """One row per rule: jobs, GPUs per job, the largest memory requests, summed estimates."""
    rows = {}
    for job in plan.jobs.values():
        row = rows.setdefault(
            job.family,
            {"rule": job.family, "jobs": 0, "gpus": set(), "gpu_memory_mb": 0, "mem_mb": 0,
             "gpu_hours": None, "wall_hours": None, "longest_hours": None, "disk_mb": 0,
             "requested_gpu_hours": 0.0},
        )  # fmt: skip
        request = job.request
        row["jobs"] += 1
        row["gpus"].add(request.get("gpu", 0))
        row["gpu_memory_mb"] = max(row["gpu_memory_mb"], request.get("gpu_memory_mb", 0))
        row["mem_mb"] = max(row["mem_mb"], request["mem_mb"])
        row["disk_mb"] += request.get("disk_mb", 0)
        row["requested_gpu_hours"] += request.get("gpu", 0) * _limit_hours(job)
        if job.gpu_hours is not None:
            row["gpu_hours"] = (row["gpu_hours"] or 0) + job.gpu_hours
            row["wall_hours"] = (row["wall_hours"] or 0) + job.wall_hours
            row["longest_hours"] = max(row["longest_hours"] or 0, job.wall_hours)
    return list(rows.values())


def totals(plan: ResourcePlan) -> dict:
    """The plan's totals: the sums of its job rows."""
    jobs = list(plan.jobs.values())
    estimated = [j for j in jobs if j.gpu_hours is not None]
    return {
        "jobs": len(jobs),
        "gpu_hours": sum(j.gpu_hours for j in estimated),
        "wall_hours": sum(j.wall_hours for j in estimated),
        "requested_gpu_hours": sum(j.request.get("gpu", 0) * _limit_hours(j) for j in jobs),
        "disk_mb": sum(j.request.get("disk_mb", 0) for j in jobs),
        "not_estimated_gpu_jobs": sum(
            1 for j in jobs if j.gpu_hours is None and j.request.get("gpu", 0) > 0
        ),
    }


def _parallel(plan: ResourcePlan, rule: str, gpus: int, parallel: dict) -> str:
    jobs = [j for j in plan.jobs.values() if j.family == rule]
    hours = parallel_wall_hours(jobs, gpus)
    if hours is None:
        if any(j.request.get("gpu", 0) > gpus for j in jobs):
            return f"a job needs more than {gpus} GPUs"
        return "—"
    parallel[rule] = hours
    return _hours(hours)


def markdown(plan: ResourcePlan, per_job: bool = True, gpu_count: int | None = None) -> str:
    """The plan as markdown: assumptions, a table per rule, the totals, then (per_job) a row per
    job. GB = 2^30 bytes, as Slurm and nvidia-smi count. `gpu_count`: a column with each rule's wall
    time when its jobs share that many GPUs (parallel_wall_hours)."""
    lines = ["## Assumptions", ""]
    if plan.assumptions is None:
        lines.append(
            "- no `cluster.gpu` in the config: every job requests its stage's `resources:` "
            "values (and `models.<name>.resources` where given); nothing is estimated"
        )
    else:
        lines += plan.assumptions.lines()
    lines += [
        "- estimates: GPU-hours and wall time from FLOPs (training 6 N D, inference 2 N per token, "
        "times each stage's passes); documents taken to fill max_length; a model split over "
        "GPUs runs one GPU at a time; the toy models also by their kernel launches "
        "(depthlab/plan/toy_costs.py)",
        "",
        "## Per rule",
        "",
        "| rule | jobs | GPUs per job | GPU memory per GPU (GB, max) | host memory (GB, max) "
        "| est. GPU-hours | est. wall time (h, sum) | longest job (h) | disk (GB, sum) |"
        + (f" wall time on {gpu_count} GPUs (h) |" if gpu_count else ""),
        "|---|---:|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if gpu_count else ""),
    ]
    parallel = {}
    for row in stage_rows(plan):
        gpus = sorted(row["gpus"])
        span = str(gpus[0]) if len(gpus) == 1 else f"{gpus[0]}-{gpus[-1]}"
        lines.append(
            f"| `{row['rule']}` | {row['jobs']} | {span} | {_gb(row['gpu_memory_mb'] or None)} "
            f"| {_gb(row['mem_mb'])} | {_hours(row['gpu_hours'])} | {_hours(row['wall_hours'])} "
            f"| {_hours(row['longest_hours'])} | {_gb(row['disk_mb'] or None)} |"
            + (f" {_parallel(plan, row['rule'], gpu_count, parallel)} |" if gpu_count else "")
        )
    total = totals(plan)
    estimated = plan.assumptions is not None
    lines += [
        f"| **total** | {total['jobs']} | | | "
        f"| **{_hours(total['gpu_hours'] if estimated else None)}** "
        f"| {_hours(total['wall_hours'] if estimated else None)} | "
        f"| {_gb(total['disk_mb'] or None)} |"
        + (f" {_hours(sum(parallel.values()))} |" if gpu_count else ""),
        "",
        f"Requested (GPUs x time limit): {total['requested_gpu_hours']:,.1f} GPU-hours"
        + (
            f"; {total['not_estimated_gpu_jobs']} GPU jobs request their stage's values and "
            f"are not estimated"
            if total["not_estimated_gpu_jobs"]
            else ""
        )
        + ". Other jobs (no model; their stage's `resources:`): "
        + (
            ", ".join(f"{count} {family}" for family, count in sorted(plan.other_jobs.items()))
            or "none"
        )
        + ".",
    ]
    estimated_jobs = [j for j in plan.jobs.values() if j.wall_hours is not None]
    if estimated_jobs:
        longest = max(estimated_jobs, key=lambda j: j.wall_hours)
        lines += [
            "",
            f"Longest job: `{longest.family}` `{longest.job}`, {_hours(longest.wall_hours)} h "
            f"estimated ({longest.request.get('gpu', 0)} GPUs, time limit "
            f"{_limit_hours(longest):,.1f} h).",
        ]
    if gpu_count:
        lines += [
            "",
            f"Wall time on {gpu_count} GPUs: each rule's jobs side by side (longest first), the rules "
            f"one after another: {_hours(sum(parallel.values()))} h in all (rules with a job "
            f"wider than {gpu_count} GPUs or no estimate not counted).",
        ]
    notes = [j for j in plan.jobs.values() if j.notes]
    if notes:
        lines += ["", "Jobs that do not fit the stated GPU:", ""]
        lines += [f"- `{j.family}` {j.job}: {'; '.join(j.notes)}" for j in notes]
    if per_job:
        lines += [
            "",
            "## Per job",
            "",
            "| rule | job | parameters | GPUs | GPU memory per GPU (GB) | host memory (GB) "
            "| time limit (h) | est. wall time (h) | est. GPU-hours | disk (GB) | from "
            "| peak memory (GB) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for job in plan.jobs.values():
            request = job.request
            parameters = "" if job.parameters is None else f"{job.parameters / 1e9:.3g}B"
            lines.append(
                f"| `{job.family}` | {job.job} | {parameters} | {request.get('gpu', 0)} "
                f"| {_gb(request.get('gpu_memory_mb'))} | {_gb(request['mem_mb'])} "
                f"| {_limit_hours(job):,.1f} | {_hours(job.wall_hours)} | {_hours(job.gpu_hours)} "
                f"| {_gb(request.get('disk_mb'))} | {job.source} | {job.peak} |"
            )
    return "\n".join(lines) + "\n"
