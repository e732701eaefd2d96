# Helpers shared by the rules: job specs, scripts and the library code they import, logs,
# resources. Stage-specific logic (which jobs, their inputs) lives in depthlab.config.
import ast
import re

from depthlab.config import ANALYSIS_FIGURES, DEPTH_USE_FIGURES, PRUNING_FIGURES, spec_json

PATHS = RESOLVED.paths
FIGURE_FORMAT = config["figures"]["format"]
ENVIRONMENT = "../environment.yml"  # for --sdm conda; the default is the project venv
SCRIPTS = Path(workflow.basedir) / "workflow_scripts"
# Shapes specs at DAG time: a change that matters changes the specs (params), so no rule lists
# it as an input (otherwise every edit of it would rerun every job).
UNTRACKED_MODULES = {"config"}  # the package with all its submodules (config.load, ...)


def jobs(family):
    """Job names of one rule (= job family of depthlab.config)."""
    return list(RESOLVED.jobs(family))


def job_spec(family):
    """params: the resolved spec (JSON) of the job the rule's wildcards name."""
    return lambda wildcards: spec_json(RESOLVED.spec_for(family, wildcards))


def wildcard_alternatives(names):
    """A wildcard constraint matching exactly these names (nothing when there are none)."""
    return "|".join(re.escape(name) for name in names) or "^$"


def _relative(path):
    # inputs hold no absolute path of the checkout: a moved clone plans nothing new
    return os.path.relpath(path)


def script(name):
    """A stage script, as a rule input (a changed script marks its outputs for rerun)."""
    return _relative(SCRIPTS / name)


def _module_file(dotted):
    """The file of a depthlab module, dotted relative to the package ("adapter",
    "config.load"): depthlab/<a>/<b>.py, or a package's depthlab/<a>/<b>/__init__.py."""
    base = SCRIPTS.joinpath("depthlab", *dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(path):
    """depthlab modules a file imports (anywhere in it: scripts import inside main()), dotted
    relative to the package. Relative imports (`from ..errors import X`, `from .load import y`)
    count from the file's own package; `from pkg import name` counts pkg.name when that is a
    module, else pkg."""
    path = Path(path).resolve()
    package_dir = (SCRIPTS / "depthlab").resolve()
    if path.is_relative_to(package_dir):
        here = list(path.relative_to(package_dir).parent.parts)  # the file's own package
    else:
        here = None  # a script: relative imports do not reach depthlab
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".", 1)[1] for a in node.names
                         if a.name.startswith("depthlab."))
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                if here is None or node.level - 1 > len(here):
                    continue
                parts = here[:len(here) - (node.level - 1)]
                base = ".".join([*parts, *([source] if source else [])])
            elif source == "depthlab" or source.startswith("depthlab."):
                base = source.partition(".")[2]
            else:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                found.add(sub if _module_file(sub) else base)
    return {m for m in found if m and _module_file(m)}


def _untracked(dotted):
    return dotted.split(".")[0] in UNTRACKED_MODULES  # a package with all its submodules


def library(name):
    """The library modules a script imports, transitively: editing one reruns exactly the rules
    whose scripts use it (Snakemake alone only sees the script file). Submodules of a package
    count with the package's __init__.py (which Python runs first)."""
    todo, seen = list(_imported_modules(SCRIPTS / name)), set()
    while todo:
        name_ = todo.pop()
        if name_ in seen or _untracked(name_):
            continue
        seen.add(name_)
        parts = name_.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # enclosing packages
        todo.extend(_imported_modules(_module_file(name_)))
    files = [SCRIPTS / "depthlab" / "__init__.py"] + [_module_file(m) for m in sorted(seen)]
    return [_relative(f) for f in files if f is not None and f.is_file()]


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


def stage_resources(stage, gpu=True):
    """Slurm-facing resources of a stage from config; memory and runtime grow with each retry
    (`retries:` in the Slurm profile), so an out-of-memory or time-limit kill can succeed."""
    spec = config["resources"][stage]
    resources = {
        "mem_mb": lambda wildcards, attempt: spec["mem_mb"] * attempt,
        "runtime": lambda wildcards, attempt: spec["runtime"] * attempt,
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
