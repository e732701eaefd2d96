"""Per-job resources derived from each job's model, and the cost plan of a config.

Every job that loads a model (the families with a cost model in depthlab.plan.job_families:
pretrain_model, analyse_model, prune_model, measure_twin, ..., and the CPU jobs export_pruned and
convert_gguf) is sized from its model's shape (depthlab.plan.model_shapes) and its spec's batch,
sequence length and passes:

  memory   weights (parameters x bytes of the job's dtype); pretraining's training state per
           process (weights, gradients, AdamW moments in the precision's dtypes, replicated by
           DDP); one batch's activations (Korthikanti et al. 2022, eq. 2: 34 bytes per token,
           layer and hidden unit in 16-bit, the attention-score term left out as SDPA keeps no
           score matrix) and logits; what the stage's code keeps besides: the analysis' per-layer
           states of a batch, the pruning loss sweep's cached states of every validation window
           at every layer, QLoRA healing's 4-bit copy, adapters and AdamW state, lm-eval's batch,
           the linear maps' float64 sums
  runtime  FLOPs at the stated GPU's peak rate for the work's precision times the utilisation
           stated for the work's family (training, analysis, lm_eval, healing;
           job_costs.UTILISATION_FAMILIES; measured by gpu_check.py, written by plan.py
           --calibrate, depthlab.plan.calibration): 6 N D for training (PaLM, app. B: 6 N + 12 L H Q T per token), 2 N per
           inference token, 4 N per token for adapters on a frozen base, times the stage's
           passes; N = the matrices a token multiplies through (model_shapes.matmul_parameters)
  disk     the hub download in the stored dtype, checkpoints, temporary exports

A model split over several GPUs (depthlab.core.placement: whole decoder layers per GPU) runs one
GPU at a time, so its wall time is its FLOPs at one GPU's rate; pretraining's DDP processes
share the FLOPs. GPUs per job: the fewest whose memory, less the stated headroom, holds the
job's weights and per-layer states split over them plus one batch's activations on each.

The sizes are estimates to request resources with, not measurements: the plan states its
assumptions (config `cluster.gpu`, `cluster.sizing`) above its tables. Without `cluster.gpu`
every job keeps its stage's `resources:` values (CPU configs: nothing changes); with it, the
model-loading jobs get derived values. `models.<name>.resources` (gpu, gpu_memory_mb, mem_mb,
runtime, disk_mb; any subset) wins over both. A declared value that cannot hold the job's
weights is a ConfigError naming the key, raised while the config is resolved.

depthlab.plan.plan_tables prints a plan; depthlab.plan.job_costs holds the cost model per stage (the
work of one job) that the plan is built from. Torch-free: the Snakefile plans with it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from depthlab.core.errors import ConfigError
from depthlab.plan import job_families
from depthlab.plan.job_costs import Assumptions, GiB, MiB, Phase, Work
from depthlab.plan.job_families import JobInputs
from depthlab.plan.model_shapes import Shape

# --- the plan ----------------------------------------------------------------------------------


@dataclass
class JobPlan:
    """One job's request (`request`: what Snakemake gets) and, where derived, its estimate."""

    family: str
    job: str
    stage: str
    models: tuple[str, ...]
    parameters: int | None
    request: dict
    source: str  # derived | stage | override (over derived or stage)
    wall_hours: float | None = None  # estimated: startup + compute
    gpu_hours: float | None = None
    peak: str = ""  # the phase that needs the most memory, and its largest terms
    flops: float | None = None  # the job's work (every dtype), for a local run's time check
    notes: list[str] = field(default_factory=list)


@dataclass
class ResourcePlan:
    assumptions: Assumptions | None
    jobs: dict  # (family, job) -> JobPlan
    other_jobs: Counter  # family -> jobs that load no model (CPU stages at their stage values)

    def requests(self, family: str) -> dict[str, dict]:
        """{job: request} of one rule's jobs."""
        return {job: plan.request for (f, job), plan in self.jobs.items() if f == family}


def _gpu_count(phases: list[Phase], usable: float) -> int:
    """The fewest GPUs that hold every phase: split parts divided, fixed parts on each."""
    count = 1
    for phase in phases:
        split, fixed = sum(phase.split.values()), sum(phase.fixed.values())
        if split + fixed > usable:
            room = usable - fixed
            count = max(
                count, math.ceil(split / room) if room > 0 else math.ceil((split + fixed) / usable)
            )
    return count


def _per_gpu(phases: list[Phase], gpus: int) -> float:
    return max(sum(p.split.values()) / gpus + sum(p.fixed.values()) for p in phases)


def _peak(phases: list[Phase], gpus: int) -> str:
    """The phase that needs the most memory per GPU: its split and per-GPU parts, each with its
    largest term (GB)."""
    phase = max(phases, key=lambda p: sum(p.split.values()) / gpus + sum(p.fixed.values()))
    parts = []
    for label, terms in (("split", phase.split), ("on each GPU", phase.fixed)):
        if terms:
            name, value = max(terms.items(), key=lambda item: item[1])
            parts.append(f"{sum(terms.values()) / GiB:,.1f} GB {label} ({name} {value / GiB:,.1f})")
    return f"{phase.name}: {' + '.join(parts)}"


class _Planner:
    """Builds the ResourcePlan of a resolved config (see plan_resources)."""

    def __init__(self, resolved, shapes: dict):
        self.resolved, self.shapes = resolved, shapes
        self.config = resolved.config
        self.assumptions = Assumptions.from_config(self.config)

    # model facts
    def model_key(self, name: str) -> str:
        return f"models.{self.resolved.models[name].get('seed_group', name)}"

    def shape(self, name: str) -> Shape | None:
        return self.shapes[name]

    def download(self, name: str) -> float:
        """Bytes a job downloads for a hub model (0 for local folders and models built here)."""
        shape = self.shapes[name]
        return shape.weight_bytes() if shape.hub else 0

    # the work of one job: its family's cost model (depthlab.plan.job_families)
    def work(self, family: str, job: str, spec: dict, names: tuple[str, ...]) -> Work:
        inputs = JobInputs(
            spec, names, tuple(self.shape(n) for n in names),
            tuple(self.download(n) for n in names), self.config,
        )  # fmt: skip
        return job_families.family(family).work(inputs)

    # one job's plan
    def plan_job(self, family: str, job: str, spec: dict, stage: str, gpu_rule: bool) -> JobPlan:
        stage_spec = self.config["resources"][stage]
        names = job_families.family(family).models(job, spec)
        overrides = {}
        for name in names:  # a pair job takes the larger of its models' overrides
            for key, value in (self.resolved.model_resources.get(name) or {}).items():
                if value >= overrides.get(key, (0, ""))[0]:
                    overrides[key] = (value, f"{self.model_key(name)}.resources.{key}")
        on_gpu = gpu_rule and overrides.get("gpu", (stage_spec["gpu"],))[0] > 0
        request = {"mem_mb": stage_spec["mem_mb"], "runtime": stage_spec["runtime"]}
        if gpu_rule and stage_spec["gpu"] > 0:
            request["gpu"] = stage_spec["gpu"]
        if (
            family == "pretrain_model"
            and "gpu" in overrides
            and overrides["gpu"][0] != (spec["processes"] if stage_spec["gpu"] > 0 else 0)
        ):
            raise ConfigError(
                f"{overrides['gpu'][1]}: pretraining runs one process per GPU "
                f"(resources.pretrain.gpu / processes: {spec['processes']}); set the GPUs there"
            )
        shapes = [self.shape(n) for n in names]
        known = all(s is not None for s in shapes)
        plan = JobPlan(
            family, job, stage, names, sum(s.parameters for s in shapes) if known else None,
            request, "stage",
        )  # fmt: skip
        if self.assumptions is not None and not known:
            missing = {"gpu", "mem_mb", "runtime"} - set(overrides) if on_gpu else set()
            if missing or not on_gpu and "mem_mb" not in overrides:
                unknown = next(n for n, s in zip(names, shapes) if s is None)
                raise ConfigError(
                    f"{self.model_key(unknown)}.path: hub model "
                    f"'{self.resolved.models[unknown]['path']}' has no row in "
                    f"depthlab/plan/hub_architectures.yaml (its config.json values size its "
                    f"jobs): add one, or give {self.model_key(unknown)}.resources"
                    f"{' (gpu, mem_mb, runtime)' if on_gpu else '.mem_mb'}"
                )
        work = self.work(family, job, spec, names) if known else None
        plan.flops = sum(work.flops.values()) if work is not None else None
        if work is not None and self.assumptions is not None:
            self.derive(plan, work, on_gpu, overrides.get("gpu", (None,))[0])
        for key, (value, _) in overrides.items():
            request[key] = value
        if overrides:
            plan.source = f"override over {plan.source}"
        if work is not None:
            self.check(plan, work, on_gpu, overrides, stage)
        return plan

    def derive(self, plan: JobPlan, work: Work, on_gpu: bool, gpus: int | None) -> None:
        """The derived request; `gpus`: a declared GPU count (the rest is sized for it)."""
        a, sizing, request = self.assumptions, self.assumptions.sizing, plan.request
        gpu_bytes = _per_gpu(work.phases, 1)
        host = work.host if on_gpu else work.host + gpu_bytes  # a CPU job holds it all
        request["mem_mb"] = math.ceil(
            (sizing["host_base_mb"] * MiB + host) * (1 + sizing["host_memory_headroom"]) / MiB
        )
        request["disk_mb"] = math.ceil(sizing["disk_base_mb"] + work.disk / MiB)
        plan.source = "derived"
        if not on_gpu:
            plan.peak = _peak(work.phases, 1)
            return
        if work.data_parallel:
            gpus = request["gpu"]  # resources.pretrain.gpu: one DDP process per GPU
        elif not gpus:
            gpus = _gpu_count(work.phases, a.usable_bytes)
        seconds = a.seconds(work) / (gpus if work.data_parallel else 1)
        request["gpu"] = gpus
        request["gpu_memory_mb"] = math.ceil(_per_gpu(work.phases, gpus) / MiB)
        plan.peak = _peak(work.phases, gpus)
        request["runtime"] = math.ceil(
            sizing["startup_minutes"] + seconds / 60 * (1 + sizing["runtime_headroom"])
        )
        plan.wall_hours = sizing["startup_minutes"] / 60 + seconds / 3600
        plan.gpu_hours = gpus * plan.wall_hours
        if request["gpu_memory_mb"] * MiB > a.usable_bytes:
            plan.notes.append(
                f"needs {request['gpu_memory_mb'] / 1024:.0f} GB per GPU, more than "
                f"{a.gpu['name']} holds ({plan.peak})"
            )
        if gpus > a.gpu["per_node"]:
            plan.notes.append(
                f"needs {gpus} GPUs, more than one node's {a.gpu['per_node']} ({plan.peak})"
            )

    def check(self, plan: JobPlan, work: Work, on_gpu: bool, overrides: dict, stage: str):
        """The declared request must hold the job's weights (the module docstring)."""
        request, need = plan.request, work.weights
        what = f"{plan.family}'s ~{need / GiB:.3g} GB of {work.weights_what}"
        if not on_gpu:
            if request["mem_mb"] * MiB < need:
                key = overrides.get("mem_mb", (0, f"resources.{stage}.mem_mb"))[1]
                raise ConfigError(
                    f"{key}: {request['mem_mb']} MB of host memory cannot hold {what}"
                )
            return
        if "gpu_memory_mb" in overrides:
            per_gpu, key = request["gpu_memory_mb"] * MiB, overrides["gpu_memory_mb"][1]
        elif self.assumptions is not None:
            per_gpu, key = self.assumptions.gpu["memory_gb"] * GiB, "cluster.gpu.memory_gb"
        else:
            return  # the GPU's memory is not stated
        if work.data_parallel:
            if per_gpu < need:
                raise ConfigError(
                    f"{key}: a GPU of {per_gpu / GiB:.3g} GB cannot hold {what} (each DDP "
                    f"process holds all of it)"
                )
            return
        gpus = request["gpu"]
        if gpus * per_gpu < need:
            key = overrides["gpu"][1] if "gpu" in overrides else key
            raise ConfigError(
                f"{key}: {gpus} GPU{'s' if gpus != 1 else ''} of {per_gpu / GiB:.3g} GB "
                f"cannot hold {what}"
            )


def check_max_runtime(plan: ResourcePlan, config: dict, model_keys: dict) -> None:
    """Every job's time limit within cluster.max_runtime (hours): a ConfigError naming the first
    job above it and the keys that shorten it (the rule's settings, the model's resources, the
    limit itself), raised before any job runs."""
    limit = (config.get("cluster") or {}).get("max_runtime")
    if limit is None:
        return
    for plan_job in plan.jobs.values():
        hours = plan_job.request["runtime"] / 60
        if hours <= limit:
            continue
        keys = [
            job_families.family(plan_job.family).shorten or f"resources.{plan_job.stage}.runtime"
        ]
        keys += [f"{model_keys[name]}.resources.runtime" for name in plan_job.models]
        raise ConfigError(
            f"cluster.max_runtime: job {plan_job.family}[{plan_job.job}] requests "
            f"{hours:,.1f} h, above the limit of {limit:g} h; change {' or '.join(keys)}, or "
            f"cluster.max_runtime"
        )


def plan_resources(resolved, shapes: dict[str, Shape | None]) -> ResourcePlan:
    """The resource plan of a resolved config (depthlab.config.Resolved): every model-loading
    job's request, derived where `cluster.gpu` is given, overrides applied and checked
    (ConfigError naming the key of a request that cannot hold its job's weights)."""
    planner = _Planner(resolved, shapes)
    jobs, other = {}, Counter()
    for name in resolved.families:
        declared = job_families.family(name)
        stage, gpu_rule = declared.resources, declared.gpu
        if declared.work is not None:
            for job, spec in resolved.jobs(name).items():
                jobs[(name, job)] = planner.plan_job(name, job, spec, stage, gpu_rule)
        elif declared.estimate is not None:
            values = resolved.config["resources"][stage]
            for job, spec in resolved.jobs(name).items():
                request = {"mem_mb": values["mem_mb"], "runtime": values["runtime"]}
                if gpu_rule and values["gpu"] > 0:
                    request["gpu"] = values["gpu"]
                jobs[(name, job)] = JobPlan(name, job, stage, (), None, request, "stage")
                declared.estimate(jobs[(name, job)], spec, planner.assumptions)
        else:
            other[name] += len(resolved.jobs(name))
    plan = ResourcePlan(planner.assumptions, jobs, other)
    model_keys = {name: planner.model_key(name) for name in resolved.models}
    check_max_runtime(plan, resolved.config, model_keys)
    return plan
