# Helpers shared by the rules: job specs, scripts and the library code they import, logs,
# resources. Stage-specific logic (which jobs, their inputs) lives in depthlab.config.
import json
import math
import re

from depthlab.core.audit import record_for
from depthlab.core.code_fingerprint import (
    SPEC_MODULES,
    code_changes,
    code_fingerprint,
    import_closure,
    script_code,
)
from depthlab.config import ANALYSIS_FIGURES, DEPTH_USE_FIGURES, PRUNING_FIGURES, spec_json
from depthlab.plan.job_families import FAMILIES, family as declared_family
from depthlab.config.spec_changes import recorded_spec, spec_change_lines
from snakemake.io import IOFile
from snakemake.logging import logger
from snakemake.settings.enums import RerunTrigger

PATHS = RESOLVED.paths
FIGURE_FORMAT = config["figures"]["format"]
ENVIRONMENT = "../environment.yml"  # for --sdm conda; the default is the project venv
SCRIPTS = Path(workflow.basedir) / "workflow_scripts"
# Shapes specs at DAG time, so no rule tracks it (depthlab.core.code_fingerprint.SPEC_MODULES)
UNTRACKED_MODULES = SPEC_MODULES


def jobs(family):
    """Job names of one rule (= job family of depthlab.config)."""
    return list(RESOLVED.jobs(family))


def job_spec(family):
    """params: the resolved spec (JSON) of the job the rule's wildcards name. Snakemake reads it
    while it plans (dry runs too); a job whose output was made with another spec is logged then,
    one line per changed key (log_spec_changes)."""

    def spec(wildcards):
        text = spec_json(RESOLVED.spec_for(family, wildcards))
        log_spec_changes(family, wildcards, text)
        return text

    return spec


_SPEC_CHANGES_LOGGED = set()


def log_spec_changes(family, wildcards, text):
    """One line per key of the job's spec that differs from the spec Snakemake recorded with its
    existing output (the params change that reruns it), e.g. `choose_depth[lns]:
    auto_depth.tolerances.val_loss 0.5 -> 0.6`; Snakemake's own reason prints both whole specs."""
    job = RESOLVED.job_for(family, wildcards)
    persistence = workflow.persistence
    if (
        (family, job) in _SPEC_CHANGES_LOGGED
        or persistence is None  # not planning (e.g. --list-target-rules)
        or RerunTrigger.PARAMS not in workflow.rerun_triggers
        or not rules.has(family)
    ):
        return
    _SPEC_CHANGES_LOGGED.add((family, job))
    outputs = expand(list(getattr(rules, family).output), **dict(wildcards.items()))
    recorded = next(
        (
            params
            for path in outputs
            if os.path.exists(path) and (params := persistence.params(IOFile(path)))
        ),
        None,
    )
    old = recorded_spec(recorded)
    if old is not None:
        for line in spec_change_lines(f"{family}[{job}]", old, json.loads(text)):
            logger.info(line)
    if recorded:
        made = next(path for path in outputs if os.path.exists(path))
        log_code_changes(family, job, made, recorded)


# Scheduling: the longest chains of a run are the data -> the pruned models' pretraining (or a
# real LM's conversion) -> their analysis -> pruning, and a real LM's skip interventions; their
# jobs go first and the many short jobs fill the other core, instead of a chain starting late
# and running alone at the end.
PRUNED_MODELS = set(RESOLVED.jobs("prune_model"))


def pruning_path_priority(priority, model_wildcard):
    """priority: `priority` for a job of a pruned model (its `model_wildcard` names it), 0 else."""
    return lambda wildcards: priority if wildcards[model_wildcard] in PRUNED_MODELS else 0


def wildcard_alternatives(names):
    """A wildcard constraint matching exactly these names (nothing when there are none)."""
    return "|".join(re.escape(name) for name in names) or "^$"


def _relative(path):
    # inputs hold no absolute path of the checkout: a moved clone plans nothing new
    return os.path.relpath(path)


def script(name):
    """A stage script's path (a param: the rule's `code` param tracks what it runs)."""
    return _relative(SCRIPTS / name)


def library(name):
    """The library files a script imports, transitively (config, which shapes specs, excluded)."""
    closure = import_closure(SCRIPTS / name, SCRIPTS / "depthlab", UNTRACKED_MODULES)
    return [_relative(path) for path in closure]


CODE_VERSIONS = {}  # script name -> its code fingerprint (log_code_changes compares with it)


def code_version(name):
    """params: a fingerprint of the code a script runs (the script and its library closure,
    parsed, without docstrings): any code edit reruns exactly the rules whose scripts import
    it; an edit of a comment or docstring reruns nothing. A plain value, not a function of the
    job's output: Snakemake does not rerun a job for a param derived from its output. A job
    whose output was made by other code is logged while the workflow plans, naming the files
    that changed (log_code_changes, from log_spec_changes)."""
    CODE_VERSIONS[name] = code_fingerprint([SCRIPTS / name, *library(name)], workflow.basedir)
    return CODE_VERSIONS[name]


def log_code_changes(family, job, output, recorded_params):
    """`<rule>[<job>]: code changed since its output was made: <file>, <file>`: the files of
    the script's closure whose code differs from what the output's provenance record says its
    job ran (every rule runs workflow_scripts/<rule>.py)."""
    name = f"{family}.py"
    fingerprint = CODE_VERSIONS.get(name)
    if fingerprint is None or repr(fingerprint) in recorded_params:
        return  # not a script rule, or made by this code
    record = record_for(output)
    try:
        ran = json.loads(Path(record).read_text()).get("code") if record else None
    except (OSError, ValueError):
        ran = None
    label = f"{family}[{job}]: code changed since its output was made"
    if not ran:
        logger.info(f"{label} (its provenance record names no code files)")
        return
    changed = code_changes(ran, script_code(SCRIPTS / name))
    logger.info(f"{label}: {', '.join(changed) or '(no file differs from its record)'}")


def log_file(family, job="{job}"):
    return PATHS.log(family, job)


def benchmark_file(family, job="{job}"):
    return PATHS.benchmark(family, job)


def stage_threads(stage):
    return config["resources"][stage]["threads"]


SLURM_RESOURCES = {"partition": "slurm_partition", "account": "slurm_account", "qos": "qos"}


def stage_launcher(stage):
    """How a stage's script starts: under torchrun when the stage runs several processes
    (resources.<stage>.processes: one per GPU, or set for CPU runs), with python otherwise."""
    processes = RESOLVED.config["resources"][stage].get("processes", 1)
    if processes > 1:
        return ["torchrun", "--standalone", "--nproc_per_node", str(processes)]
    return ["python"]


MAX_RUNTIME = (config.get("cluster") or {}).get("max_runtime")


def retry_runtime(minutes, attempt):
    """A job's time limit on its `attempt`-th try: grown with each retry, never above
    cluster.max_runtime (hours), which the partition would refuse."""
    grown = minutes * attempt
    return grown if MAX_RUNTIME is None else min(grown, math.ceil(MAX_RUNTIME * 60))


def stage_resources(stage, gpu=True):
    """Slurm-facing resources of a stage from config; memory and runtime grow with each retry
    (`retries:` in the Slurm profile), so an out-of-memory or time-limit kill can succeed."""
    spec = config["resources"][stage]
    resources = {
        "mem_mb": lambda wildcards, attempt: spec["mem_mb"] * attempt,
        "runtime": lambda wildcards, attempt: retry_runtime(spec["runtime"], attempt),
    }
    if gpu and spec["gpu"] > 0:
        resources["gpu"] = spec["gpu"]
        if spec["gpu_model"]:
            resources["gpu_model"] = spec["gpu_model"]
    # the Slurm executor plugin's own resource names (--partition, --account, --qos)
    for key, resource in SLURM_RESOURCES.items():
        if spec.get(key):
            resources[resource] = spec[key]
    return resources


def job_resources(family):
    """Per-job resources of the jobs that load a model (a family with a cost model in
    depthlab.plan.job_families), by job family: GPUs, GPU memory, host memory, runtime and disk derived from the job's model
    when the config names its GPU (cluster.gpu), a model's own `resources` winning, else the
    stage's values; gpu_model, partition, account and QoS as stage_resources gives them.
    Memory and runtime grow with each retry."""
    plan = RESOLVED.resource_plan
    declared = declared_family(family)
    resources = stage_resources(declared.resources, gpu=declared.gpu)
    requests = plan.requests(family)

    def request(wildcards):
        return requests[RESOLVED.job_for(family, wildcards)]

    resources["mem_mb"] = lambda wildcards, attempt: request(wildcards)["mem_mb"] * attempt
    resources["runtime"] = lambda wildcards, attempt: retry_runtime(
        request(wildcards)["runtime"], attempt
    )
    for key in ("gpu", "gpu_memory_mb", "disk_mb"):
        if any(r.get(key) for r in requests.values()):
            resources[key] = lambda wildcards, key=key: request(wildcards).get(key, 0)
    return resources


def family_targets(declared):
    """The declared target outputs (depthlab.plan.job_families) of every job of one family;
    none when it has no jobs."""
    if not declared.targets or not rules.has(declared.name):
        return []
    outputs = getattr(rules, declared.name).output
    return [
        path
        for wildcards in RESOLVED.wildcards.get(declared.name, {}).values()
        for key in declared.targets
        for path in expand(getattr(outputs, key), **wildcards)
    ]


def figure_target_name(path):
    """A figure's target name, from its path under the run's figures/ (loss_curves,
    analysis_val_contributions, ...); None for a path that is not a figure."""
    relative = Path(path).relative_to(PATHS.root)
    if relative.parts[0] != "figures":
        return None
    return "_".join(relative.with_suffix("").parts[1:])
