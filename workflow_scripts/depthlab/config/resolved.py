"""The resolved config (`Resolved`: models, paths and every job's spec by job family) and the
helpers every stage resolver shares."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from depthlab.config.paths import RunPaths
from depthlab.core.errors import ConfigError
from depthlab.plan.job_families import BY_NAME


@dataclass
class Resolved:
    """The resolved config: models, paths and every job's spec, by job family.

    A job family is one rule and its script. Each job has a spec (what the script gets), the
    rule's wildcard values that name it, and the workflow inputs beyond the spec's own paths.
    """

    config: dict
    paths: RunPaths
    models: dict
    families: dict = field(default_factory=dict)
    wildcards: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    model_resources: dict = field(default_factory=dict)  # models.<name>.resources
    resource_plan: object = None  # depthlab.plan.resource_plan.ResourcePlan, set by resolve()
    # settings the config gives but the run does not use (one line each, printed before a run)
    notes: list = field(default_factory=list)
    _indexes: dict = field(default_factory=dict, repr=False, compare=False)

    def jobs(self, family: str) -> dict:
        return self.families.get(family, {})

    def add(
        self, family: str, job: str, spec: dict, outputs=(), wildcards=None, inputs=None
    ) -> None:
        if family not in BY_NAME:  # every list of families reads the declarations
            raise ConfigError(
                f"{family}.{job}: job family {family!r} is not declared in "
                f"depthlab/plan/job_families.py"
            )
        for output in outputs:
            if not self.paths.contains(output):
                raise ConfigError(f"{family}.{job}: output {output} would leave {self.paths.root}/")
        self.families.setdefault(family, {})[job] = spec
        self.wildcards.setdefault(family, {})[job] = wildcards or {"job": job}
        self.inputs.setdefault(family, {})[job] = inputs or {}

    def wildcard_values(self, family: str, key: str) -> list:
        """One wildcard's value for every job of a family, in job order (for expand(zip))."""
        return [values[key] for values in self.wildcards.get(family, {}).values()]

    def job_for(self, family: str, wildcards) -> str:
        """The job a rule's wildcards name."""
        wanted = {key: str(value) for key, value in dict(wildcards.items()).items()}
        jobs = self.wildcards.get(family, {})
        if not wanted and len(jobs) == 1:
            return next(iter(jobs))  # a rule without wildcards: its family's one job
        job = self._job_index(family).get(frozenset(wanted.items()))
        if job is None:
            raise KeyError(f"{family}: no job has wildcards {wanted}")
        return job

    def _job_index(self, family: str) -> dict:
        """{wildcard items: job} of a family, built once its jobs are all added (Snakemake asks
        for thousands of jobs while it plans a cluster config: a scan per call is quadratic)."""
        jobs = self.wildcards.get(family, {})
        index = self._indexes.get(family)
        if index is None or len(index) != len(jobs):
            index = {
                frozenset((key, str(value)) for key, value in values.items()): job
                for job, values in jobs.items()
            }
            self._indexes[family] = index
        return index

    def spec_for(self, family: str, wildcards) -> dict:
        return self.jobs(family)[self.job_for(family, wildcards)]

    def inputs_for(self, family: str, wildcards) -> dict:
        return self.inputs[family][self.job_for(family, wildcards)]

    def model_inputs(self, name: str) -> list:
        """Workflow inputs for a declared model: our pretrain output, or an existing local
        folder (hub ids and pkg: paths are not files of this workflow); a gguf model's converted
        folder (convert_gguf)."""
        model = self.models[name]
        if model["kind"] in ("pretrain", "gguf"):
            return [self.paths.model(name)]
        path = model["path"]
        return [path] if not path.startswith("pkg:") and os.path.exists(path) else []


def stage_resources(config: dict) -> dict:
    resources = config["resources"]  # the schema requires every always-on stage's entry
    # cluster: {partition, account, qos} applies to every stage unless the stage names its own
    # (cluster.gpu and cluster.sizing size the model jobs: depthlab.plan.resource_plan)
    cluster = {
        key: value
        for key, value in (config.get("cluster") or {}).items()
        if key in ("partition", "account", "qos")
    }
    resolved = {
        stage: {"gpu": 0, "gpu_model": "", **cluster, **spec} for stage, spec in resources.items()
    }
    for stage, spec in resolved.items():
        if "processes" not in spec:
            continue
        if stage != "pretrain":
            raise ConfigError(
                f"resources.{stage}.processes: only the pretrain stage runs "
                f"several processes (torchrun)"
            )
        if spec["gpu"] and spec["processes"] != spec["gpu"]:
            raise ConfigError(
                f"resources.pretrain.processes: {spec['processes']} differs from "
                f"gpu {spec['gpu']} (one process per GPU)"
            )
    # torchrun processes of a pretraining job: one per GPU, or as set (several on CPU: gloo)
    resolved["pretrain"].setdefault("processes", max(1, resolved["pretrain"]["gpu"]))
    return resolved


def require_resources(config: dict, stage: str) -> None:
    if stage not in config["resources"]:
        raise ConfigError(
            f"resources.{stage}: missing (the {stage} stage is on; give it "
            f"threads, mem_mb, runtime)"
        )


def library_check(check, *args, model: str | None = None, **kwargs) -> None:
    """Run a stage library's config-time check; its ValueError (message starts with the key)
    becomes a ConfigError, naming `model` when the check was of one model's settings."""
    try:
        check(*args, **kwargs)
    except ValueError as error:
        raise ConfigError(named_model(str(error), model)) from None


def named_model(message: str, model: str | None) -> str:
    """`message` with the model it concerns named (unless it names it already)."""
    if model is None or f"'{model}'" in message:
        return message
    return f"{message} (model '{model}')"


def spec_json(spec: dict) -> str:
    """A spec as the rules pass it: compact, key-sorted JSON (stable for rerun triggers)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))
