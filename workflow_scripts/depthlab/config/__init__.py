"""The one config path: YAML -> validated config -> a complete, resolved spec for every job.

Every stage script receives its job's spec from here, whether the workflow starts it (the rule
passes the spec as `--spec JSON`) or a researcher runs it by hand (`--config FILE --job NAME`
resolves the same spec), so a setting has one value however a stage is started.

    load_config(*files)        strict YAML (duplicate keys are errors), files merged left to right
    apply_overrides(c, o)      `snakemake --config key=value` overrides, nested values parsed as YAML
    drop_removed_entries(c)    a named entry set to null by an overlay (a per_model model, a text
                               set, a sweep) removed; a stage set to null is off
    validate_schema(c)         config/schema.yaml (integers must be integers: `steps: 16.0` fails)
    resolve(c) -> Resolved     per-item overrides applied, sweeps and grids expanded,
                               cross-references and files checked; `.jobs(family)` gives
                               {job name: spec} for one rule / script

The job planner. One validation layer per fact: config/schema.yaml owns every type, range, enum,
name pattern and the default of each optional key; what the schema cannot check (one key against
another) is each stage's in depthlab.settings, and the Python here checks the facts read from
model folders and files. The package:

    load.py          loading, merging, overrides, the schema check
    command_line.py  a `snakemake` command line's config, its errors as one line (the Snakefile)
    switch_off.py    what a null in an overlay switches off or removes (read from the schema)
    paths.py         safe names and RunPaths (every path a run writes)
    models.py        the model registry: sweeps, seeds, per-model and checkpoint checks
    resolved.py      Resolved, the stage resources, shared helpers
    spec_changes.py  a job's changed spec as one line per key (logged while the workflow plans)
    shapes.py        every declared model's shape, which the resource plan sizes jobs from
    stages/<stage>   one resolver per stage, listed in order in stages/__init__.py's
                     STAGE_RESOLVERS; every family it adds is declared in
                     depthlab.plan.job_families

Job families are named after their rule and script (`pretrain` -> workflow_scripts/pretrain_model.py).
Every name that becomes a path or wildcard matches SAFE_NAME; every output path stays inside
`results/<run_name>/`. Errors are ConfigError with a message that starts with the key.
Light on imports: the Snakefile imports this package at DAG time.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from depthlab.config.load import (
    DEFAULT_CONFIG,
    REPO_ROOT,
    SCHEMA_PATH,
    apply_overrides,
    drop_removed_entries,
    load_config,
    load_yaml,
    merge,
    parse_override_value,
    repeated_configfile,
    validate_schema,
)
from depthlab.config.models import (
    check_gguf_model,
    check_hf_model,
    check_positions,
    check_pretrain_model,
    corpus_models,
    data_folder,
    declared_models,
    expand_sweeps,
    figure_facts,
    model_layers,
    model_location,
    reads_special_tokens,
    seed_groups,
)
from depthlab.config.paths import SAFE_NAME, RunPaths, check_name, seed_model_name, sweep_model_name
from depthlab.config.resolved import Resolved, spec_json, stage_resources
from depthlab.config.shapes import declared_shapes
from depthlab.config.sources import with_source
from depthlab.config.stages import STAGE_RESOLVERS
from depthlab.config.stages.analysis import ANALYSIS_FIGURES, text_set_texts
from depthlab.config.stages.depth_use import DEPTH_USE_FIGURES
from depthlab.config.stages.pretrain import tracking_settings
from depthlab.config.stages.pruning import PRUNING_FIGURES
from depthlab.config.work_size import size_work
from depthlab.core.errors import ConfigError
from depthlab.core.norm_schemes import mix_ln_post_layers
from depthlab.plan.resource_plan import plan_resources
from depthlab.settings.scaling import merge_fit_spec
from depthlab.settings.toy import temperature_grid

__all__ = [
    "ANALYSIS_FIGURES",
    "DEFAULT_CONFIG",
    "DEPTH_USE_FIGURES",
    "PRUNING_FIGURES",
    "REPO_ROOT",
    "SAFE_NAME",
    "SCHEMA_PATH",
    "ConfigError",
    "Resolved",
    "RunPaths",
    "apply_overrides",
    "drop_removed_entries",
    "check_name",
    "check_positions",
    "corpus_models",
    "data_folder",
    "declared_models",
    "figure_facts",
    "load_config",
    "repeated_configfile",
    "load_yaml",
    "merge",
    "merge_fit_spec",
    "mix_ln_post_layers",
    "model_layers",
    "model_location",
    "parse_override_value",
    "reads_special_tokens",
    "resolve",
    "seed_groups",
    "seed_model_name",
    "spec_json",
    "sweep_model_name",
    "temperature_grid",
    "text_set_texts",
    "tracking_settings",
    "validate_schema",
]


def resolve(config: dict, base_dir: str | os.PathLike = REPO_ROOT) -> Resolved:
    """Validate `config` and resolve every job's spec (see the module docstring). A ConfigError
    whose key a file of `config` set (a LoadedConfig, as load_config returns) names that file
    and line: `pretrain.steps: ... (in overlay.yaml:3)`."""
    try:
        return _resolve(config, base_dir)
    except ConfigError as error:
        raise ConfigError(with_source(config, str(error))) from None


def _resolve(config: dict, base_dir: str | os.PathLike) -> Resolved:
    removal_notes: list = []  # what a null removed besides itself, printed before a run
    config = drop_removed_entries(config, removal_notes)
    config = size_work(config, base_dir)  # `work:` sizes the keys a config leaves out
    validate_schema(config)
    base_dir = Path(base_dir)
    paths = RunPaths(config["run_name"])  # a safe name: the schema's run_name pattern
    config = dict(copy.deepcopy(config))  # a plain dict from here: the specs carry no files
    config["resources"] = stage_resources(config)
    models = expand_sweeps(config)
    # per-model resources are requests, not settings: kept out of the models (and every spec)
    model_resources = {
        name: model.pop("resources") for name, model in models.items() if "resources" in model
    }
    processes = config["resources"]["pretrain"]["processes"]
    for name, model in models.items():
        if model["kind"] == "pretrain":
            check_pretrain_model(name, model, config["pretrain"], processes)
        elif model["kind"] == "gguf":
            check_gguf_model(name, model, base_dir)
        else:
            check_hf_model(name, model, base_dir)
    resolved = Resolved(
        config=config,
        paths=paths,
        models=models,
        model_resources=model_resources,
        notes=removal_notes,
    )
    for _, resolve_stage in STAGE_RESOLVERS:
        resolve_stage(resolved, base_dir)
    resolved.resource_plan = plan_resources(resolved, declared_shapes(resolved, base_dir))
    return resolved
