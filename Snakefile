# depthlab: how large language models use their depth, rebuilt as one reproducible workflow.
#
# Config: config/default.yaml unless --configfile names others (merged left to right); then
# `--config key=value` overrides, nested ones too: --config 'analysis={max_samples: 32}'.
# depthlab.config validates it against config/schema.yaml and resolves every job's complete
# spec; the rules only read those specs (RESOLVED.jobs(<rule name>)).
import importlib.util
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# This checkout's library, whatever the active venv installs: the venv's `pip install -e .` may
# be another checkout's (a shared or symlinked .venv), while the jobs (`python
# workflow_scripts/<x>.py`) always run this one's. So `depthlab` is loaded from this checkout's
# folder before anything imports it (its submodules follow the package's __path__; sys.path is
# left as it is); jobs record it as `library` in their provenance.
LIBRARY = Path(workflow.basedir).resolve() / "workflow_scripts" / "depthlab"
if "depthlab" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "depthlab", LIBRARY / "__init__.py", submodule_search_locations=[str(LIBRARY)]
    )
    sys.modules["depthlab"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["depthlab"])
elif Path(sys.modules["depthlab"].__file__).resolve().parent != LIBRARY:
    raise SystemExit(
        f"error: this process imported depthlab from {Path(sys.modules['depthlab'].__file__).parent}"
        f", not from this workflow's checkout ({LIBRARY}); start snakemake in its own process"
    )

from depthlab.config import DEFAULT_CONFIG, ConfigError  # noqa: E402
from depthlab.config.command_line import workflow_config  # noqa: E402
from depthlab.core.provenance import export_config_source  # noqa: E402

CONFIG_FILES = workflow.overwrite_configfiles or [DEFAULT_CONFIG]
# `--configfile=a.yaml --configfile=b.yaml`: Snakemake keeps b.yaml alone, without a word. Only
# on snakemake's own command line (`snakemake ...`, `python -m snakemake ...`).
LAUNCHER = Path(sys.argv[0]) if sys.argv else Path()
ARGV = (
    sys.argv
    if workflow.is_main_process and "snakemake" in (LAUNCHER.name, LAUNCHER.parent.name)
    else None
)
try:
    RESOLVED = workflow_config(
        CONFIG_FILES, dict(workflow.config_settings.config), workflow.basedir, ARGV
    )
except ConfigError as error:
    # Raised, it would print after Snakemake's `WorkflowError in file "Snakefile", line N:`;
    # exiting with it makes depthlab's one line the first (status 1, no traceback)
    raise SystemExit(f"error: {error}") from None
# Settings the run does not use (per_model entries of models a narrowed stage does not run): one
# line each, once, in the process that plans the run.
if workflow.is_main_process:
    for note in RESOLVED.notes:
        print(f"depthlab: note: {note}", file=sys.stderr)
config.clear()
config.update(RESOLVED.config)
# The jobs' provenance records name these files and their checksums; they travel in the
# environment (jobs inherit it; Slurm jobs parse this file again), not in params, so editing a
# comment in a config file reruns nothing.
export_config_source(CONFIG_FILES, dict(workflow.config_settings.config))


# Jobs call `python` from the environment Snakemake runs in (the project's venv), also on Slurm.
envvars:
    "PATH",


os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/pretrain.smk"
include: "rules/analysis.smk"
include: "rules/lens_swaps.smk"
include: "rules/scaling.smk"
include: "rules/toy.smk"
include: "rules/pruning.smk"
include: "rules/depth_use.smk"
include: "rules/finetune.smk"
include: "rules/twins.smk"
include: "rules/claims.smk"
include: "rules/targets.smk"


rule all:
    input:
        [path for targets in STAGE_TARGETS.values() for path in targets],
    default_target: True
    localrule: True


# Before any job (real runs only; a dry run plans offline): a run that cannot succeed stops here,
# one line per cause, instead of failing job by job (depthlab.plan.preflight).
onstart:
    from depthlab.plan.preflight import (
        evaluates_harness_tasks,
        hub_items,
        hub_problems,
        needed_items,
        slurm_controller_problem,
    )

    problems = []
    if workflow.executor_plugin is not None and workflow.executor_plugin.name == "slurm":
        problems.append(slurm_controller_problem())
    specs = [job.params.spec for job in workflow.dag.needrun_jobs() if "spec" in job.params.keys()]
    # lm-eval's task index (seconds to build) only when a planned job evaluates its tasks
    items = needed_items(hub_items(RESOLVED.config, evaluates_harness_tasks(specs)), specs)
    if items:
        problems.extend(hub_problems(items))
    problems = [problem for problem in problems if problem]
    if workflow.executor_plugin is None or workflow.executor_plugin.name != "slurm":
        # a local run has no time limit to check a job against: name the jobs that would take
        # far longer than the suite's (depthlab.plan.local_pace), then go on
        from depthlab.plan.local_pace import SLOW_JOB_HOURS, slow_local_jobs

        planned = [
            (job.rule.name, RESOLVED.job_for(job.rule.name, job.wildcards), job.threads)
            for job in workflow.dag.needrun_jobs()
            if job.rule.name in RESOLVED.families
        ]
        slow = slow_local_jobs(RESOLVED.resource_plan, planned)
        if slow:
            print(
                f"depthlab: warning: planned jobs that would take over {SLOW_JOB_HOURS:g} h "
                f"each on this machine's cores (the default suite's longest: under 2 min):",
                file=sys.stderr,
            )
            for line in slow:
                print(f"depthlab:   {line}", file=sys.stderr)
    if problems:
        for problem in problems:
            print(f"depthlab: {problem}", file=sys.stderr)
        raise SystemExit(1)
