"""The one config path: YAML -> validated config -> a complete, resolved spec for every job.

Every stage script receives its job's spec from here, whether the workflow starts it (the rule
passes the spec as `--spec JSON`) or a researcher runs it by hand (`--config FILE --job NAME`
resolves the same spec), so a setting has one value however a stage is started.

    load_config(*files)        strict YAML (duplicate keys are errors), files merged left to right
    apply_overrides(c, o)      `snakemake --config key=value` overrides, nested values parsed as YAML
    validate_schema(c)         config/schema.yaml (integers must be integers: `steps: 16.0` fails)
    resolve(c) -> Resolved     defaults filled in, per-item overrides applied, sweeps and grids
                               expanded, cross-references and files checked; `.jobs(family)`
                               gives {job name: spec} for one rule / script

Job families are named after their rule and script (`pretrain` -> workflow_scripts/pretrain.py).
Every name that becomes a path or wildcard matches SAFE_NAME; every output path stays inside
`results/<run_name>/`. Errors are ConfigError with a message that starts with the key.
Light on imports: the Snakefile imports this module at DAG time.
"""

from __future__ import annotations

import copy
import csv
import functools
import glob
import importlib.util
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from .errors import CheckpointError, ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO_ROOT / "config" / "schema.yaml"
DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"

# A name that becomes a folder or wildcard: no separators, no `..`, no shell metacharacters.
SAFE_NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# The stages whose `resources:` the rules read.
RESOURCE_STAGES = ("data", "pretrain", "analysis", "scaling", "toy", "figures", "fits")
TOY_TRAIN_KEYS = ("width", "hidden", "input_size", "output_size", "teacher_layers",
                  "student_depths", "steps", "batch_size", "lr", "eval_batches", "replicates",
                  "angle_samples", "device", "protocol")
ANALYSIS_TEXT_KEYS = ("text_field", "max_samples", "max_tokens", "max_length", "all_token_distance")
NESTED_FIT_KEYS = ("start_grid", "bootstrap", "validation", "columns")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


# ---------------------------------------------------------------------------------------------
# Loading


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (YAML would keep the last)."""


def _construct_strict_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor` keys may be overridden explicitly; that is the point
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise ConfigError(
                f"{loader.name}:{key_node.start_mark.line + 1}: key '{key}' appears twice in "
                f"one mapping (first at line {seen[key] + 1}); YAML would silently keep the last")
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                              _construct_strict_mapping)


def load_yaml(path: str | os.PathLike) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        with open(path, encoding="utf-8") as handle:
            loader = _StrictLoader(handle)
            loader.name = str(path)
            try:
                data = loader.get_single_data()
            finally:
                loader.dispose()
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error})") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 ({error})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config is a mapping of keys, got {type(data).__name__}")
    return data


def merge(base: dict, override: dict) -> dict:
    """`override` merged into a copy of `base` (nested mappings merged, everything else replaced),
    the way Snakemake merges several --configfile files and --config values."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_config(*paths: str | os.PathLike) -> dict:
    """Config files merged left to right (config/default.yaml when none is given)."""
    config: dict = {}
    for path in paths or (DEFAULT_CONFIG,):
        config = merge(config, load_yaml(path))
    return config


def parse_override_value(value):
    """`--config a='{b: 32}'` reaches us as strings (Snakemake parses nested values with YAML's
    BaseLoader); parse every string leaf as YAML so `32` is an integer again."""
    if isinstance(value, dict):
        return {key: parse_override_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [parse_override_value(item) for item in value]
    if isinstance(value, str):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return parse_override_value(parsed) if isinstance(parsed, (dict, list)) else parsed
    return value


def apply_overrides(config: dict, overrides: dict) -> dict:
    return merge(config, parse_override_value(overrides))


# ---------------------------------------------------------------------------------------------
# Schema


@functools.lru_cache(maxsize=1)
def _schema_validator():
    import jsonschema

    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    base = jsonschema.Draft202012Validator
    # JSON Schema counts 16.0 as an integer; the code needs a Python int.
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool))
    return jsonschema.validators.extend(base, type_checker=checker)(schema)


def _key_path(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def validate_schema(config: dict) -> None:
    import jsonschema

    errors = sorted(_schema_validator().iter_errors(config),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        where = _key_path(error.absolute_path)
        message = error.message
        if error.validator == "additionalProperties":
            message = f"unknown key ({message})"
        elif error.validator == "pattern" and isinstance(error.instance, str):
            message = (f"{error.instance!r} is not a safe name (letters, digits, _ . -; no "
                       f"'..', separators or shell characters)")
        raise ConfigError(f"{where}: {message}")


# ---------------------------------------------------------------------------------------------
# Paths of one run


def check_name(name, key: str) -> str:
    if not isinstance(name, str) or not SAFE_NAME.match(name):
        raise ConfigError(f"{key}: {name!r} is not a safe name (letters, digits, _ . -, at most "
                          f"100 characters; no '..', separators or shell characters)")
    return name


@dataclass(frozen=True)
class RunPaths:
    """Every path a run writes, spelled once; names may be wildcard templates like "{model}"."""

    run_name: str

    @property
    def root(self) -> str:
        return f"results/{self.run_name}"

    @property
    def data(self) -> str:
        return f"{self.root}/data"

    def model(self, name: str) -> str:
        return f"{self.root}/models/{name}"

    def train_state(self, name: str) -> str:
        return f"{self.root}/train_state/{name}"

    def analysis(self, text_set: str, model: str) -> str:
        return f"{self.root}/analysis/{text_set}/{model}"

    @property
    def sweep_points(self) -> str:
        return f"{self.root}/scaling/sweep_points.csv"

    def fit(self, name: str) -> str:
        return f"{self.root}/scaling/{name}/fit.json"

    def fit_samples(self, name: str) -> str:
        return f"{self.root}/scaling/{name}/bootstrap.csv"

    def toy_run(self, kind: str, index) -> str:
        return f"{self.root}/toy/{kind}/T{index}"

    @property
    def toy_fit(self) -> str:
        return f"{self.root}/toy/fit.json"

    @property
    def problems(self) -> str:
        return f"{self.root}/depth_use/problems"

    def skip(self, model: str) -> str:
        return f"{self.root}/depth_use/skip/{model}"

    def linear_map(self, pair: str) -> str:
        return f"{self.root}/depth_use/linear_maps/{pair}"

    @property
    def lm_tasks(self) -> str:
        return f"{self.root}/pruning/tasks"

    def pruning(self, model: str) -> str:
        return f"{self.root}/pruning/{model}"

    def datasets_cache(self, model: str) -> str:
        return f"{self.root}/pruning/.datasets_cache/{model}"

    def figure(self, name: str, fmt: str) -> str:
        return f"{self.root}/figures/{name}.{fmt}"

    def claims(self, suffix: str) -> str:
        return f"{self.root}/claims.{suffix}"

    def log(self, family: str, job: str) -> str:
        return f"{self.root}/logs/{family}/{job}.log"

    def benchmark(self, family: str, job: str) -> str:
        return f"{self.root}/benchmarks/{family}/{job}.tsv"

    def contains(self, path: str) -> bool:
        """Whether `path` (relative to the working directory) stays inside results/<run>/."""
        normal = os.path.normpath(path)
        return normal == self.root or normal.startswith(self.root + os.sep)


# ---------------------------------------------------------------------------------------------
# Models


def sweep_model_name(sweep: str, depth: int, width: int) -> str:
    return f"{sweep}_l{depth}_m{width}"


def mix_ln_post_layers(fraction: float, num_layers: int) -> int:
    """Post-LN layers of a Mix-LN model: round half up (the paper's 25% of 12 layers = 3)."""
    return math.floor(fraction * num_layers + 0.5)


def seed_model_name(name: str, seed: int) -> str:
    return f"{name}_s{seed}"


def _expand_seeds(name: str, model: dict, key: str, declared) -> dict:
    """A pretrain model with `seeds:` -> one model per seed named <name>_s<seed>, carrying its
    `seed` and `seed_group` (the base name); a model without `seeds:` stays as it is."""
    seeds = model.pop("seeds", None)
    if seeds is None:
        return {name: model}
    members = {}
    for seed in seeds:
        member = seed_model_name(name, seed)
        check_name(member, f"{key}.seeds (expanded model name)")
        if member in declared:
            raise ConfigError(f"{key}.seeds: expanded model name '{member}' (seed {seed}) is "
                              f"already declared under models")
        members[member] = {**copy.deepcopy(model), "seed": seed, "seed_group": name}
    return members


def _add_models(models: dict, new: dict, key: str) -> None:
    for name, model in new.items():
        if name in models:
            raise ConfigError(f"{key}: expanded model name '{name}' is already declared under "
                              f"models")
        models[name] = model


def _expand_sweeps(config: dict) -> dict:
    """Declared models plus every sweep's depth x width grid, each expanded over its `seeds:`."""
    declared = config["models"]
    models = {}
    for name, model in copy.deepcopy(declared).items():
        _add_models(models, _expand_seeds(name, model, f"models.{name}", declared),
                    f"models.{name}.seeds")
    for sweep_name, sweep in (config.get("sweeps") or {}).items():
        check_name(sweep_name, f"sweeps.{sweep_name}")
        for depth in sweep["depths"]:
            for width in sweep["widths"]:
                name = sweep_model_name(sweep_name, depth, width)
                check_name(name, f"sweeps.{sweep_name} (expanded model name)")
                if name in declared:
                    raise ConfigError(f"sweeps.{sweep_name}: expanded model name '{name}' is "
                                      f"already declared under models")
                if width % sweep["head_dim"]:
                    raise ConfigError(f"sweeps.{sweep_name}.head_dim: {sweep['head_dim']} does "
                                      f"not divide width {width}")
                # SwiGLU hidden size ~ (8/3) m in LLaMA, rounded to a multiple of 32
                intermediate = int(round(sweep["mlp_ratio"] * width / 32)) * 32
                point = {
                    "kind": "pretrain",
                    "norm_scheme": sweep["norm_scheme"],
                    "architecture": {
                        "hidden_size": width,
                        "num_layers": depth,
                        "num_heads": width // sweep["head_dim"],
                        "intermediate_size": max(intermediate, 32),
                    },
                    "train": copy.deepcopy(sweep.get("train") or {}),
                    "sweep": sweep_name,
                }
                if "seeds" in sweep:
                    point["seeds"] = sweep["seeds"]
                _add_models(models, _expand_seeds(name, point, f"sweeps.{sweep_name}", declared),
                            f"sweeps.{sweep_name}")
    return models


def seed_groups(resolved: Resolved) -> dict[str, list[str]]:
    """Base model name -> the model names it expands to, in declaration order: a model or sweep
    point with `seeds: [0, 1]` -> [<name>_s0, <name>_s1]; any other model -> [its name]. Stages
    accept a base name wherever they list models and read it as all its seeds."""
    groups: dict[str, list[str]] = {}
    for name, model in resolved.models.items():
        groups.setdefault(model.get("seed_group", name), []).append(name)
    return groups


def _resolve_pretrain(name: str, model: dict, defaults: dict, processes: int) -> None:
    key = (f"sweeps.{model['sweep']}" if "sweep" in model
           else f"models.{model.get('seed_group', name)}")
    arch = model["architecture"]
    if arch["hidden_size"] % arch["num_heads"]:
        raise ConfigError(f"{key}.architecture.num_heads: {arch['num_heads']} does not "
                          f"divide hidden_size {arch['hidden_size']}")
    if (arch["hidden_size"] // arch["num_heads"]) % 2:
        raise ConfigError(f"{key}.architecture.num_heads: head size "
                          f"{arch['hidden_size'] // arch['num_heads']} is odd (RoPE rotates pairs)")
    kv_heads = arch.get("num_kv_heads", arch["num_heads"])
    if arch["num_heads"] % kv_heads:
        raise ConfigError(f"{key}.architecture.num_kv_heads: {kv_heads} does not divide "
                          f"num_heads {arch['num_heads']}")
    if model["norm_scheme"] == "mix_ln":
        fraction = arch.get("mix_ln_post_fraction")
        if fraction is None:
            raise ConfigError(f"{key}.architecture.mix_ln_post_fraction: required for "
                              f"norm_scheme mix_ln (the paper uses 0.25)")
        if mix_ln_post_layers(fraction, arch["num_layers"]) < 1:
            raise ConfigError(f"{key}.architecture.mix_ln_post_fraction: {fraction} of "
                              f"{arch['num_layers']} layers rounds to no Post-LN layer "
                              f"(that is pre_ln)")
    elif "mix_ln_post_fraction" in arch:
        raise ConfigError(f"{key}.architecture.mix_ln_post_fraction: has no effect for "
                          f"norm_scheme {model['norm_scheme']} (only mix_ln)")
    if "deepnorm_variant" in arch and model["norm_scheme"] != "deepnorm":
        raise ConfigError(f"{key}.architecture.deepnorm_variant: has no effect for "
                          f"norm_scheme {model['norm_scheme']} (only deepnorm)")
    model["train"] = {**defaults, **(model.get("train") or {})}
    train = model["train"]
    if train["warmup_steps"] > train["steps"]:
        raise ConfigError(f"{key}.train.warmup_steps: {train['warmup_steps']} exceeds "
                          f"steps {train['steps']}")
    rows = train["batch_size"]
    if rows % processes:
        raise ConfigError(f"{key}.train.batch_size: {rows} is not divisible by the {processes} "
                          f"processes of resources.pretrain (gpu / processes)")
    micro = train["micro_batch_size"]
    if micro is not None and (rows // processes) % micro:
        raise ConfigError(f"{key}.train.micro_batch_size: {micro} does not divide the "
                          f"{rows // processes} rows each process gets per step (batch_size "
                          f"{rows} over {processes} process(es))")


def resolve_model_path(path: str) -> str:
    """A `pkg:<package>/<folder>` path -> the folder inside the installed package."""
    if not path.startswith("pkg:"):
        return path
    package, _, sub = path[len("pkg:"):].partition("/")
    spec = importlib.util.find_spec(package) if package else None
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package '{package}' (from {path}) is not installed")
    return str(Path(list(spec.submodule_search_locations)[0]) / sub)


def _check_hf_model(name: str, model: dict, base_dir: Path) -> None:
    path = model["path"]
    key = f"models.{name}.path"
    try:
        local = resolve_model_path(path)
    except ConfigError as error:
        raise ConfigError(f"{key}: {error}") from None
    candidate = _local_path(local, base_dir)
    looks_local = (path.startswith(("pkg:", "/", ".", "~")) or local.count("/") != 1
                   or not HUB_ID.match(local))
    if candidate is None:
        if looks_local:
            raise ConfigError(f"{key}: local model folder '{path}' does not exist (a hub id "
                              f"looks like 'org/name')")
        return  # a hub id: checked when downloaded
    if not Path(candidate).is_dir():
        raise ConfigError(f"{key}: '{path}' is not a folder")
    from .adapter import check_local_model  # torch-free checks of the folder

    try:
        check_local_model(candidate)
    except CheckpointError as error:
        raise ConfigError(f"{key}: {error}") from None


def _local_path(path: str, base_dir: Path) -> str | None:
    """A path as given if it exists from the working directory, else relative to the workflow
    folder; None when neither exists."""
    expanded = os.path.expanduser(path)
    if os.path.exists(expanded):
        return expanded
    candidate = base_dir / expanded
    if not os.path.isabs(expanded) and candidate.exists():
        return os.path.relpath(candidate)
    return None


def _local_file(path: str, base_dir: Path, key: str) -> str:
    """`_local_path` of a file the config names; ConfigError naming `key` when it is none."""
    local = _local_path(path, base_dir)
    if local is None or not os.path.isfile(local):
        raise ConfigError(f"{key}: '{path}' is not a file")
    return local


# ---------------------------------------------------------------------------------------------
# Resolution


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

    def jobs(self, family: str) -> dict:
        return self.families.get(family, {})

    def add(self, family: str, job: str, spec: dict, outputs=(), wildcards=None,
            inputs=None) -> None:
        for output in outputs:
            if not self.paths.contains(output):
                raise ConfigError(f"{family}.{job}: output {output} would leave "
                                  f"{self.paths.root}/")
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
        for job, values in jobs.items():
            if {key: str(value) for key, value in values.items()} == wanted:
                return job
        raise KeyError(f"{family}: no job has wildcards {wanted}")

    def spec_for(self, family: str, wildcards) -> dict:
        return self.jobs(family)[self.job_for(family, wildcards)]

    def inputs_for(self, family: str, wildcards) -> dict:
        return self.inputs[family][self.job_for(family, wildcards)]

    def model_inputs(self, name: str) -> list:
        """Workflow inputs for a declared model: our pretrain output, or an existing local
        folder (hub ids and pkg: paths are not files of this workflow)."""
        model = self.models[name]
        if model["kind"] == "pretrain":
            return [self.paths.model(name)]
        path = model["path"]
        return [path] if not path.startswith("pkg:") and os.path.exists(path) else []


def _resources(config: dict) -> dict:
    resources = config["resources"]
    missing = [stage for stage in RESOURCE_STAGES if stage not in resources]
    if missing:
        raise ConfigError(f"resources.{missing[0]}: missing (every stage needs threads, "
                          f"mem_mb, runtime; stages: {', '.join(RESOURCE_STAGES)})")
    # cluster: {partition, account, qos} applies to every stage unless the stage names its own
    cluster = config.get("cluster") or {}
    resolved = {stage: {"gpu": 0, "gpu_model": "", **cluster, **spec}
                for stage, spec in resources.items()}
    for stage, spec in resolved.items():
        if "processes" not in spec:
            continue
        if stage != "pretrain":
            raise ConfigError(f"resources.{stage}.processes: only the pretrain stage runs "
                              f"several processes (torchrun)")
        if spec["gpu"] and spec["processes"] != spec["gpu"]:
            raise ConfigError(f"resources.pretrain.processes: {spec['processes']} differs from "
                              f"gpu {spec['gpu']} (one process per GPU)")
    # torchrun processes of a pretraining job: one per GPU, or as set (several on CPU: gloo)
    resolved["pretrain"].setdefault("processes", max(1, resolved["pretrain"]["gpu"]))
    return resolved


def resolve(config: dict, base_dir: str | os.PathLike = REPO_ROOT) -> Resolved:
    """Validate `config` and resolve every job's spec (see the module docstring)."""
    validate_schema(config)
    base_dir = Path(base_dir)
    paths = RunPaths(check_name(config["run_name"], "run_name"))
    config = copy.deepcopy(config)
    config["resources"] = _resources(config)
    models = _expand_sweeps(config)
    processes = config["resources"]["pretrain"]["processes"]
    for name, model in models.items():
        check_name(name, f"models.{name}")
        if model["kind"] == "pretrain":
            _resolve_pretrain(name, model, config["pretrain"], processes)
        else:
            _check_hf_model(name, model, base_dir)
    resolved = Resolved(config=config, paths=paths, models=models)
    _resolve_data(resolved, base_dir)
    _resolve_pretrain_jobs(resolved)
    _resolve_analysis(resolved, base_dir)
    _resolve_scaling(resolved, base_dir)
    _resolve_toy(resolved)
    _resolve_pruning(resolved, base_dir)
    _resolve_depth_use(resolved, base_dir)
    _resolve_claims(resolved)
    return resolved


def _resolve_data(resolved: Resolved, base_dir: Path) -> None:
    config = resolved.config
    data = copy.deepcopy(config["data"])
    if data["source"] == "text_files":
        patterns = (data.get("text_files") or {}).get("paths") or []
        if not patterns:
            raise ConfigError("data.text_files.paths: source text_files needs at least one "
                              "file or glob pattern")
        for index, pattern in enumerate(patterns):
            if not glob.glob(os.path.expanduser(pattern), recursive=True) and not glob.glob(
                    str(base_dir / pattern), recursive=True):
                raise ConfigError(f"data.text_files.paths[{index}]: '{pattern}' matches no file")
    elif data["source"] == "hf_dataset" and not (data.get("hf_dataset") or {}).get("name"):
        raise ConfigError("data.hf_dataset.name: source hf_dataset needs a dataset name")
    resolved.add("prepare_data", "data",
                 {"data": data, "seed": config["seed"], "out": resolved.paths.data},
                 outputs=[resolved.paths.data])


def data_folder(resolved: Resolved, name: str) -> str | None:
    """The data folder a declared pretrain model trains on (None for hf models)."""
    model = resolved.models[name]
    if model["kind"] != "pretrain":
        return None
    if model.get("data", "corpus") == "problems":
        problems = (resolved.config.get("depth_use") or {}).get("problems")
        if not problems:
            raise ConfigError(f"models.{name}.data: 'problems' needs depth_use.problems")
        from .problems import FAMILIES, has_synthetic_family

        if not has_synthetic_family(problems):
            raise ConfigError(f"models.{name}.data: 'problems' needs a synthetic family "
                              f"({', '.join(FAMILIES)}) in depth_use.problems.families: "
                              f"dataset families have no training data")
        return resolved.paths.problems
    return resolved.paths.data


def corpus_models(resolved: Resolved) -> list:
    """Declared models that read the corpus (every model except those trained on problems)."""
    return [name for name, m in resolved.models.items() if m.get("data", "corpus") == "corpus"]


def tracking_settings(config: dict) -> dict:
    """The `tracking:` section with its defaults: TensorBoard on, progress lines every ~5%, no
    W&B; a W&B run (offline unless `mode: online`) keeps its files in the run folder."""
    settings = {"tensorboard": True, "progress_every": None, "wandb": None,
                **(config.get("tracking") or {})}
    if settings["wandb"] is not None:
        settings["wandb"] = {"mode": "offline", "entity": None, **settings["wandb"],
                             "dir": RunPaths(config["run_name"]).root}
    return settings


def _resolve_pretrain_jobs(resolved: Resolved) -> None:
    paths = resolved.paths
    for name, model in resolved.models.items():
        if model["kind"] != "pretrain":
            continue
        data = data_folder(resolved, name)
        resolved.add("pretrain_model", name, {
            "model_name": name, "model": model, "data": data, "seed":
            model.get("seed", resolved.config["seed"]), "out": paths.model(name),
            "state_dir": paths.train_state(name),
            "processes": resolved.config["resources"]["pretrain"]["processes"],
            "tracking": tracking_settings(resolved.config),
        }, outputs=[paths.model(name), paths.train_state(name)], inputs={"data": [data]})
    pretrained = [name for name, m in resolved.models.items() if m["kind"] == "pretrain"
                  and name in corpus_models(resolved)]
    if pretrained:
        fmt = resolved.config["figures"]["format"]
        resolved.add("plot_loss_curves", "loss_curves", {
            "models": [paths.model(name) for name in pretrained],
            "labels": {name: resolved.models[name]["norm_scheme"] for name in pretrained},
            "sweeps": {name: resolved.models[name]["sweep"] for name in pretrained
                       if "sweep" in resolved.models[name]},
            "facts": figure_facts(resolved, pretrained),
            "out": paths.figure("loss_curves", fmt),
        }, outputs=[paths.figure("loss_curves", fmt)])


def declared_models(resolved: Resolved, names, key: str) -> list:
    """A stage's model list, checked, with a seeded model's base name standing for all its
    seeds (null: every model that reads the corpus)."""
    if names is None:
        return corpus_models(resolved)
    groups = seed_groups(resolved)
    expanded = []
    for index, name in enumerate(names):
        if name in resolved.models:
            expanded.append(name)
        elif name in groups:
            expanded.extend(groups[name])
        else:
            raise ConfigError(f"{key}[{index}]: '{name}' is not a declared model "
                              f"(declared: {', '.join(sorted(resolved.models))})")
    return list(dict.fromkeys(expanded))


def reads_special_tokens(model: dict) -> bool:
    """Whether text reaches a model with its tokenizer's special tokens: a model pretrained here
    reads documents as its training stream encoded them (none); a declared checkpoint reads them
    as it was trained (its tokenizer's template, e.g. Llama's BOS)."""
    return model["kind"] == "hf"


FIGURE_FACTS = ("kind", "norm_scheme", "sweep", "seed", "seed_group")


def figure_facts(resolved: Resolved, names) -> dict:
    """What figures group and colour models by (depthlab.figure_style): {name: facts}."""
    models = resolved.models
    return {name: {k: models[name][k] for k in FIGURE_FACTS if k in models[name]}
            for name in names}


def model_location(resolved: Resolved, name: str) -> str:
    """Where a declared model's HF folder is: our pretrain output, or the declared path."""
    model = resolved.models[name]
    return resolved.paths.model(name) if model["kind"] == "pretrain" else model["path"]


def _resolve_analysis(resolved: Resolved, base_dir: Path) -> None:
    analysis = resolved.config.get("analysis")
    if not analysis:
        return
    paths = resolved.paths
    names = declared_models(resolved, analysis["models"], "analysis.models")
    fmt = resolved.config["figures"]["format"]
    for text_set, spec in analysis["text_sets"].items():
        check_name(text_set, f"analysis.text_sets.{text_set}")
        settings = {k: spec.get(k, analysis[k]) for k in ANALYSIS_TEXT_KEYS}
        texts = text_set_texts(resolved, text_set, base_dir, "analysis.text_sets")
        for name in names:
            model = resolved.models[name]
            out = paths.analysis(text_set, name)
            resolved.add("analyse_model", f"{text_set}/{name}", {
                "model_name": name, "model_path": model_location(resolved, name),
                "dtype": model.get("dtype", "float32"), "revision": model.get("revision"),
                "text_set": text_set, "texts": texts, **settings,
                "batch_size": analysis["batch_size"], "logit_lens": analysis["logit_lens"],
                "logit_lens_stride": analysis["logit_lens_stride"],
                "add_special_tokens": reads_special_tokens(model),
                "device": analysis["device"], "out": out,
            }, outputs=[out], wildcards={"text_set": text_set, "model": name}, inputs={
                "model": resolved.model_inputs(name),
                "texts": [texts["input"]] if texts["input"] else []})
        figures = {figure: paths.figure(f"analysis/{text_set}/{figure}", fmt)
                   for figure in ANALYSIS_FIGURES}
        resolved.add("plot_analysis", text_set, {
            "analyses": [paths.analysis(text_set, name) for name in names],
            "out_dir": f"{paths.root}/figures/analysis/{text_set}", "format": fmt,
            "figures": figures, "facts": figure_facts(resolved, names),
        }, outputs=list(figures.values()))


def text_set_texts(resolved: Resolved, text_set: str, base_dir: Path, key: str,
                   model: str | None = None) -> dict:
    """Where a text set's documents come from: {source: jsonl, path, input} or {source:
    hf_dataset, name, config_name, split, input: None}. `val` is the held-out split of the data
    folder `model` trained on (the run's corpus for every other model)."""
    if text_set == "val" and (resolved.config.get("analysis") or {}).get(
            "text_sets", {}).get("val", {"source": "val"})["source"] == "val":
        folder = (data_folder(resolved, model) if model else None) or resolved.paths.data
        return {"source": "jsonl", "path": f"{folder}/val.jsonl", "input": folder}
    spec = ((resolved.config.get("analysis") or {}).get("text_sets") or {}).get(text_set)
    if spec is None:
        raise ConfigError(f"{key}: '{text_set}' is not a text set of analysis.text_sets")
    if spec["source"] == "val":
        return {"source": "jsonl", "path": f"{resolved.paths.data}/val.jsonl",
                "input": resolved.paths.data}
    if spec["source"] == "jsonl":
        local = _local_file(spec["path"], base_dir, f"analysis.text_sets.{text_set}.path")
        return {"source": "jsonl", "path": local, "input": local}
    # a pinned revision joins the spec only when given: unpinned specs stay as they were
    pinned = {"revision": spec["revision"]} if spec.get("revision") else {}
    return {"source": "hf_dataset", "name": spec["name"], "config_name": spec.get("config_name"),
            "split": spec["split"], **pinned, "input": None}


def model_layers(resolved: Resolved, name: str, key: str) -> int | None:
    """A declared model's decoder layers: its architecture, or a local checkpoint's config
    (None for a hub model: its layer settings are checked when the job has downloaded it)."""
    model = resolved.models[name]
    if model["kind"] == "pretrain":
        return model["architecture"]["num_layers"]
    local = _local_path(resolve_model_path(model["path"]), REPO_ROOT)
    if local is None:
        return None
    config = json.loads((Path(local) / "config.json").read_text())
    for field_name in ("num_hidden_layers", "n_layer", "num_layers"):
        if isinstance(config.get(field_name), int):
            return config[field_name]
    raise ConfigError(f"{key}: {local}/config.json names no layer count")


def check_positions(resolved: Resolved, name: str, length: int, key: str) -> None:
    """A sequence length a stage feeds to a model trained here must not exceed the positions it
    was trained on (its RoPE never saw more)."""
    model = resolved.models[name]
    if model["kind"] == "pretrain" and length > model["train"]["seq_len"]:
        raise ConfigError(f"{key}: {length} tokens exceed the {model['train']['seq_len']} "
                          f"positions '{name}' was trained on (its train.seq_len)")


def _has_lm_head(resolved: Resolved, name: str) -> bool:
    model = resolved.models[name]
    if model["kind"] == "pretrain":
        return True
    local = _local_path(resolve_model_path(model["path"]), REPO_ROOT)
    if local is None:
        return True  # a hub causal LM (checked when downloaded)
    architectures = json.loads((Path(local) / "config.json").read_text()).get("architectures") or []
    return any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures)


def _library_check(check, *args, **kwargs) -> None:
    """Run a stage library's config-time check; its ValueError (message starts with the key)
    becomes a ConfigError."""
    try:
        check(*args, **kwargs)
    except ValueError as error:
        raise ConfigError(str(error)) from None


ANALYSIS_FIGURES = ("angular_distance", "variance_growth", "contributions", "logit_lens",
                    "angles")


def merge_fit_spec(defaults: dict, fit: dict, name: str = "<name>") -> dict:
    """`scaling.fit` defaults overridden by one `scaling.fits` entry (nested mappings merged)."""
    merged = {**defaults, **fit}
    for key in NESTED_FIT_KEYS:
        if isinstance(defaults.get(key), dict) and isinstance(fit.get(key), dict):
            merged[key] = {**defaults[key], **fit[key]}
    if "law" not in merged:
        raise ConfigError(f"scaling.fits.{name}.law: missing (decomposed or reference)")
    lo, hi = merged.get("exponent_bounds", (0.0, 5.0))
    if not lo < hi:
        raise ConfigError(f"scaling.fits.{name}.exponent_bounds: {[lo, hi]} is not an interval "
                          f"(low < high); check scaling.fit.exponent_bounds too")
    if merged.get("law") != "decomposed" and merged.get("depth_offset"):
        raise ConfigError(f"scaling.fits.{name}.depth_offset: only applies to the decomposed law")
    return merged


LAW_COLUMNS = {"decomposed": ("width", "depth", "tokens", "loss"),
               "reference": ("params", "tokens", "loss")}


def _check_points_csv(path: str, columns: dict, law: str, key: str) -> None:
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{key}: cannot read '{path}' ({error})") from None
    for canonical in LAW_COLUMNS[law]:
        column = (columns or {}).get(canonical, canonical)
        if column not in header:
            raise ConfigError(f"scaling.fits.{key.split('.')[2]}.columns.{canonical}: column "
                              f"'{column}' is not in {path} (columns: {', '.join(header)})")


def _resolve_scaling(resolved: Resolved, base_dir: Path) -> None:
    scaling = resolved.config.get("scaling")
    if not scaling:
        return
    paths, config = resolved.paths, resolved.config
    sweep = scaling.get("sweep")
    if sweep is not None and sweep not in (config.get("sweeps") or {}):
        raise ConfigError(f"scaling.sweep: '{sweep}' is not a declared sweep")
    sweep_models = [name for name, m in resolved.models.items()
                    if sweep is not None and m.get("sweep") == sweep]
    fmt = config["figures"]["format"]
    if sweep_models:
        resolved.add("collect_sweep", "sweep_points", {
            "models": [paths.model(name) for name in sweep_models], "min_tokens": 1,
            "out": paths.sweep_points}, outputs=[paths.sweep_points])
    for name, fit in scaling["fits"].items():
        check_name(name, f"scaling.fits.{name}")
        spec = merge_fit_spec(scaling.get("fit") or {}, fit, name)
        if spec["source"] == "sweep":
            if not sweep_models:
                raise ConfigError(f"scaling.fits.{name}.source: 'sweep' needs scaling.sweep to "
                                  f"name a declared sweep with models")
            points = paths.sweep_points
        else:
            points = _local_file(spec["source"], base_dir, f"scaling.fits.{name}.source")
            _check_points_csv(points, spec.get("columns"), spec["law"],
                              f"scaling.fits.{name}.source")
        outputs = [paths.fit(name), paths.fit_samples(name)]
        resolved.add("fit_scaling", name, {
            "name": name, "points": points, "fit": spec, "seed": config["seed"],
            "out_json": outputs[0], "out_samples": outputs[1]}, outputs=outputs)
        figure = paths.figure(f"scaling/{name}", fmt)
        resolved.add("plot_scaling", name, {"fit": outputs[0], "samples": outputs[1],
                                            "out": figure}, outputs=[figure])


def temperature_grid(spec, key: str = "toy.temperatures") -> list[float]:
    """A list of temperatures, or {min, max, count}: `count` values log-spaced in [min, max]."""
    if isinstance(spec, dict):
        if not 0 < spec["min"] <= spec["max"]:
            raise ConfigError(f"{key}: min {spec['min']} must not exceed max {spec['max']}")
        if spec["count"] > 1 and spec["min"] == spec["max"]:
            raise ConfigError(f"{key}: {spec['count']} temperatures between equal bounds")
        import numpy as np

        return [float(t) for t in np.geomspace(spec["min"], spec["max"], spec["count"])]
    return [float(t) for t in spec]


def _resolve_toy(resolved: Resolved) -> None:
    toy = resolved.config.get("toy")
    if not toy:
        return
    paths, config = resolved.paths, resolved.config
    temperatures = temperature_grid(toy["temperatures"])
    lo, hi = toy.get("exponent_bounds", [0.0, 10.0])
    if not lo < hi:
        raise ConfigError(f"toy.exponent_bounds: {[lo, hi]} is not an interval (low < high)")
    if toy["fit_form"] == "power_offset" and len(toy["student_depths"]) < 3:
        raise ConfigError("toy.student_depths: the power_offset form needs at least 3 depths")
    protocol = toy.get("protocol", "embedding")
    if protocol != "embedding" and toy.get("input_size") not in (None, toy["width"]):
        raise ConfigError(f"toy.input_size: {toy['input_size']} must equal toy.width "
                          f"({toy['width']}) or be null in the {protocol} protocol (the inputs "
                          f"are rmsnorm-ed Gaussians of dimension width)")
    settings = {key: toy[key] for key in TOY_TRAIN_KEYS if key in toy}
    runs = []
    for kind in toy["teacher_kinds"]:
        for index, temperature in enumerate(temperatures):
            out = paths.toy_run(kind, index)
            runs.append(out)
            resolved.add("train_toy", f"{kind}/T{index}", {
                "teacher_kind": kind, "temperature_index": index, "settings": {
                    **settings, "temperatures": temperatures}, "seed": config["seed"],
                "out": out}, outputs=[out], wildcards={"kind": kind, "index": index})
    figure = paths.figure("toy_loss_vs_depth", config["figures"]["format"])
    resolved.add("fit_toy", "toy", {
        "runs": runs, "form": toy["fit_form"], "exponent_bounds": [lo, hi],
        "protocol": {"name": protocol, **{key: toy[key] for key in (
            "steps", "lr", "batch_size", "teacher_layers", "replicates")}},
        "out_json": paths.toy_fit, "figure": figure}, outputs=[paths.toy_fit, figure])


def spec_json(spec: dict) -> str:
    """A spec as the rules pass it: compact, key-sorted JSON (stable for rerun triggers)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


PRUNING_FIGURES = ("delta_p", "sweep", "speedup")
PRUNING_SETTINGS = ("strategies", "n_grid", "val", "lm_eval", "healing", "auto_depth", "export",
                    "speed", "device", "dtype")


def _resolve_pruning(resolved: Resolved, base_dir: Path) -> None:
    pruning = resolved.config.get("pruning")
    if not pruning:
        return
    from .lm_tasks import MAX_TOKENS_PER_WORD, validate_task_names, validate_task_settings
    from .pruning import validate_pruning_settings

    paths, config = resolved.paths, resolved.config
    _require_resources(config, "pruning")
    tasks = pruning["tasks"]
    _library_check(validate_task_settings, tasks, "pruning.tasks")
    lm_eval = pruning["lm_eval"]
    if lm_eval["enabled"]:
        _library_check(validate_task_names, lm_eval["tasks"], tasks["kinds"],
                       "pruning.lm_eval.tasks")
    names = declared_models(resolved, pruning["models"], "pruning.models")
    text_set = pruning["text_set"]
    analysis_jobs = resolved.jobs("analyse_model")
    resolved.add("build_lm_tasks", "tasks", {
        "data": paths.data, "tokenizer": f"{paths.data}/tokenizer", "out": paths.lm_tasks,
        **{key: tasks[key] for key in ("kinds", "examples", "words", "context_tokens",
                                       "max_per_document")},
        "seed": config["seed"]}, outputs=[paths.lm_tasks])
    settings = {key: pruning[key] for key in PRUNING_SETTINGS}
    for index, name in enumerate(names):
        key = f"pruning.models[{index}]"
        if not _has_lm_head(resolved, name):
            raise ConfigError(f"{key}: model '{name}' has no LM head (a bare encoder); layer "
                              f"removal is scored by validation loss and lm-eval, which need one")
        if name not in corpus_models(resolved):
            raise ConfigError(f"{key}: model '{name}' is not trained on the run's corpus, which "
                              f"the validation loss and tasks are built from")
        model = resolved.models[name]
        if model["kind"] == "pretrain":
            longest = tasks["context_tokens"] + MAX_TOKENS_PER_WORD * max(
                tasks["words"].get(kind, 1) for kind in tasks["kinds"])
            if longest > model["train"]["seq_len"]:
                raise ConfigError(
                    f"pruning.tasks.context_tokens: {tasks['context_tokens']} context tokens plus "
                    f"a choice of up to {longest - tasks['context_tokens']} tokens exceed the "
                    f"{model['train']['seq_len']} positions '{name}' was trained on")
        check_positions(resolved, name, pruning["val"]["seq_len"], "pruning.val.seq_len")
        if pruning["healing"]["enabled"]:
            check_positions(resolved, name, pruning["healing"].get("seq_len", 0),
                            "pruning.healing.seq_len")
        if pruning["speed"]["enabled"]:
            speed = pruning["speed"]
            check_positions(resolved, name, speed.get("prompt_length", 0)
                            + speed.get("new_tokens", 0), "pruning.speed.new_tokens")
        layers = model_layers(resolved, name, key)
        if layers is not None:
            _library_check(validate_pruning_settings, settings, layers, "pruning")
        if f"{text_set}/{name}" not in analysis_jobs:
            raise ConfigError(f"{key}: the angular block choice needs the analysis of '{name}' "
                              f"on text set '{text_set}' (pruning.text_set); add it to "
                              f"analysis.models / analysis.text_sets")
        out = paths.pruning(name)
        resolved.add("prune_model", name, {
            "model_name": name, "model": model_location(resolved, name),
            "analysis": paths.analysis(text_set, name), "data": paths.data,
            "tasks": paths.lm_tasks, "datasets_cache": paths.datasets_cache(name), "out": out,
            "seed": config["seed"], **settings, "revision": model.get("revision"),
            "dtype": model.get("dtype", settings["dtype"]),
            # healing's curves; without healing the tracking settings cannot change the job
            **({"tracking": tracking_settings(config)} if pruning["healing"]["enabled"] else {})},
            outputs=[out, paths.datasets_cache(name)], inputs={
                "model": resolved.model_inputs(name), "analysis": [paths.analysis(text_set, name)],
                "data": [paths.data], "tasks": [paths.lm_tasks]})
    fmt = config["figures"]["format"]
    figures = {figure: paths.figure(f"pruning/{figure}", fmt) for figure in PRUNING_FIGURES}
    resolved.add("plot_pruning", "pruning", {
        "prunings": {name: paths.pruning(name) for name in names},
        "labels": {name: _seeded_label(resolved.models[name], name) for name in names},
        "metric": lm_eval["metric"], "chance": 0.25, "run_name": config["run_name"],
        "figures": figures}, outputs=list(figures.values()))


def _seeded_label(model: dict, name: str) -> str:
    """A model's legend label: its norm scheme (name for hf models), plus its seed if seeded."""
    label = model.get("norm_scheme", name)
    return f"{label} s{model['seed']}" if "seed_group" in model else label


DEPTH_USE_FIGURES = ("skip_effects", "output_effect", "depth_score", "linear_maps")


def _require_resources(config: dict, stage: str) -> None:
    if stage not in config["resources"]:
        raise ConfigError(f"resources.{stage}: missing (the {stage} stage is on; give it "
                          f"threads, mem_mb, runtime)")


def _resolve_depth_use(resolved: Resolved, base_dir: Path) -> None:
    depth_use = resolved.config.get("depth_use")
    if not depth_use:
        return
    from .interventions import validate_intervention_settings
    from .linear_maps import validate_linear_map_settings
    from .problems import validate_problem_settings

    paths, config = resolved.paths, resolved.config
    _require_resources(config, "depth_use")
    problems = depth_use["problems"]
    if problems:
        _library_check(validate_problem_settings, problems, "depth_use.problems")
        problems = copy.deepcopy(problems)
        local_datasets = []
        for family, settings in problems["families"].items():
            dataset = settings.get("dataset") or {}
            if dataset.get("source") == "jsonl":   # a local dataset file, found as text sets are
                dataset["path"] = _local_file(
                    dataset["path"], base_dir, f"depth_use.problems.families.{family}.dataset.path")
                local_datasets.append(dataset["path"])   # an edited file rebuilds the set
        resolved.add("make_problems", "problems", {"out": paths.problems, "seed": config["seed"],
                                                   **problems}, outputs=[paths.problems],
                     inputs={"datasets": local_datasets})
    skip, score = depth_use["skip"], depth_use["depth_score"]
    skip_models = declared_models(resolved, skip["models"], "depth_use.skip.models")
    score_models = declared_models(resolved, score["models"], "depth_use.depth_score.models")
    if score_models and not problems:
        raise ConfigError("depth_use.depth_score.models: a depth score needs problems "
                          "(depth_use.problems)")
    per_model = skip.get("per_model") or {}
    groups = seed_groups(resolved)
    for name in per_model:
        if not set(groups.get(name, [name])) & set(skip_models + score_models):
            raise ConfigError(f"depth_use.skip.per_model.{name}: not a model of "
                              f"depth_use.skip.models or depth_use.depth_score.models")
    skip_folders = []
    for name in dict.fromkeys(skip_models + score_models):
        key = (f"depth_use.skip.models[{skip_models.index(name)}]" if name in skip_models
               else f"depth_use.depth_score.models[{score_models.index(name)}]")
        # a seeded model takes its base name's per_model settings unless it has its own
        own = name if name in per_model else resolved.models[name].get("seed_group", name)
        settings = {**{k: skip[k] for k in ("max_samples", "max_length", "batch_size", "variants",
                                            "layers", "no_skip_front", "future_positions",
                                            "future_min_position", "max_rows")},
                    **per_model.get(own, {})}
        scored = name in score_models
        _library_check(validate_intervention_settings,
                       {**settings, "depth_score_variant": score["variant"]},
                       model_layers(resolved, name, key), "depth_use.skip")
        check_positions(resolved, name, settings["max_length"],
                        f"depth_use.skip.per_model.{own}.max_length" if "max_length" in
                        per_model.get(own, {}) else "depth_use.skip.max_length")
        texts = text_set_texts(resolved, skip["text_set"], base_dir, "depth_use.skip.text_set",
                               model=name)
        model = resolved.models[name]
        out = paths.skip(name)
        skip_folders.append(out)
        resolved.add("skip_interventions", name, {
            "model_name": name, "model_path": model_location(resolved, name),
            "revision": model.get("revision"), "out": out, "texts": texts,
            "text_field": (config.get("analysis") or {}).get("text_field", "text"),
            "text_set": skip["text_set"], **settings, "seed": config["seed"],
            "problems": f"{paths.problems}/problems.jsonl" if scored else None,
            "add_special_tokens": reads_special_tokens(model),
            "depth_score_variant": score["variant"], "prepend_bos": score["prepend_bos"],
            "bootstrap": score["bootstrap"], "dtype": model.get("dtype", depth_use["dtype"]),
            "device": depth_use["device"]}, outputs=[out], inputs={
                "model": resolved.model_inputs(name),
                "texts": [texts["input"]] if texts["input"] else [],
                "problems": [paths.problems] if scored else []})
    maps = depth_use["linear_maps"]
    _library_check(validate_linear_map_settings, maps, "depth_use.linear_maps")
    map_folders = []
    for key, pair, ends in _seeded_pairs(resolved, maps["pairs"]):
        _check_same_tokens(resolved, ends["source"], ends["target"], key)
        for end in ("source", "target"):
            check_positions(resolved, ends[end], maps["max_length"],
                            "depth_use.linear_maps.max_length")
        texts = text_set_texts(resolved, maps["text_set"], base_dir,
                               "depth_use.linear_maps.text_set", model=ends["source"])
        out = paths.linear_map(pair)
        map_folders.append(out)
        source, target = resolved.models[ends["source"]], resolved.models[ends["target"]]
        resolved.add("linear_maps", pair, {
            "pair": pair, "source_name": ends["source"],
            "source_path": model_location(resolved, ends["source"]),
            "target_name": ends["target"], "target_path": model_location(resolved, ends["target"]),
            "source_revision": source.get("revision"),
            "target_revision": target.get("revision"), "out": out,
            "texts": texts, "text_field": (config.get("analysis") or {}).get("text_field", "text"),
            "add_special_tokens": reads_special_tokens(source),
            **{k: maps[k] for k in ("max_documents", "max_length", "batch_size", "skip_first",
                                    "val_fraction", "test_fraction", "alphas", "max_memory_mb",
                                    "error")},
            "dtype": depth_use["dtype"], "device": depth_use["device"]}, outputs=[out], inputs={
                "models": resolved.model_inputs(ends["source"])
                + resolved.model_inputs(ends["target"]),
                "texts": [texts["input"]] if texts["input"] else []})
    fmt = config["figures"]["format"]
    figures = {figure: paths.figure(f"depth_use/{figure}", fmt) for figure in DEPTH_USE_FIGURES}
    resolved.add("plot_depth_use", "depth_use", {
        "skip": skip_folders, "linear_maps": map_folders,
        "out_dir": f"{paths.root}/figures/depth_use", "format": fmt},
        outputs=list(figures.values()))


def _seeded_pairs(resolved: Resolved, pairs: dict) -> list:
    """(config key, pair name, {source, target}) for every linear-map pair; a pair with a seeded
    end is one pair per seed, <pair>_s<seed> (seed i of the source to seed i of the target when
    both are seeded; each seed against the one model when only one end is)."""
    groups = seed_groups(resolved)
    expanded = []
    for pair, ends in pairs.items():
        key = f"depth_use.linear_maps.pairs.{pair}"
        check_name(pair, key)
        by_seed = {}
        for end in ("source", "target"):
            name = ends[end]
            if name in resolved.models:
                by_seed[end] = {None: name}
            elif name in groups:
                by_seed[end] = {resolved.models[m]["seed"]: m for m in groups[name]}
            else:
                raise ConfigError(f"{key}.{end}: '{name}' is not a declared model")
        seeded = [by_seed[end] for end in ("source", "target") if None not in by_seed[end]]
        if not seeded:
            expanded.append((key, pair, dict(ends)))
            continue
        if len(seeded) == 2 and set(seeded[0]) != set(seeded[1]):
            raise ConfigError(f"{key}: '{ends['source']}' and '{ends['target']}' are trained "
                              f"with different seeds ({sorted(seeded[0])} vs {sorted(seeded[1])})")
        for seed in seeded[0]:
            name = seed_model_name(pair, seed)
            check_name(name, f"{key} (expanded pair name)")
            if name in pairs:
                raise ConfigError(f"{key}: expanded pair name '{name}' is already a pair")
            expanded.append((key, name, {end: by_seed[end].get(seed, by_seed[end].get(None))
                                         for end in ("source", "target")}))
    return expanded


def _check_same_tokens(resolved: Resolved, source: str, target: str, key: str) -> None:
    """Two models of a linear map must read the same token ids."""
    folders = {name: data_folder(resolved, name) for name in (source, target)}
    if all(folders.values()):
        if folders[source] != folders[target]:
            raise ConfigError(f"{key}: '{source}' and '{target}' are trained on different data "
                              f"folders ({folders[source]}, {folders[target]}), so their tokens "
                              f"differ")
        return
    if any(folders.values()):
        raise ConfigError(f"{key}: '{source}' and '{target}' do not share a tokenizer (one is "
                          f"trained here on the run's BPE, the other is a declared checkpoint)")
    from .linear_maps import check_same_tokenizer

    locations = [_local_path(resolve_model_path(resolved.models[n]["path"]), REPO_ROOT)
                 for n in (source, target)]
    if all(locations):
        _library_check(check_same_tokenizer, *locations, where=key)


def _resolve_claims(resolved: Resolved) -> None:
    """The claims table (depthlab.claims): which outputs test which claim. Pre-LN and LNS seed
    groups trained on the corpus outside sweeps are compared when their architecture and
    training match; every pruned, depth-scored and linearly mapped model, every fit and the toy
    fit contribute their own claims."""
    paths, models, groups = resolved.paths, resolved.models, seed_groups(resolved)

    def group_of(name):
        return models[name].get("seed_group", name)

    def scheme_groups(scheme):
        return [g for g, members in groups.items() if all(
            models[m]["kind"] == "pretrain" and models[m].get("norm_scheme") == scheme
            and "sweep" not in models[m] and m in corpus_models(resolved) for m in members)]

    cod_pairs = [[base, groups[base], treat, groups[treat]]
                 for base in scheme_groups("pre_ln") for treat in scheme_groups("lns")
                 if all(models[groups[base][0]][k] == models[groups[treat][0]][k]
                        for k in ("architecture", "train"))]
    analysis = resolved.config.get("analysis") or {}
    text_set = (resolved.config.get("pruning") or {}).get(
        "text_set", next(iter(analysis.get("text_sets") or {}), None))
    cod_members = [m for pair in cod_pairs for m in pair[1] + pair[3]]
    analysed = {m: paths.analysis(text_set, m) for m in cod_members
                if f"{text_set}/{m}" in resolved.jobs("analyse_model")}
    pruned = {m: paths.pruning(m) for m in resolved.jobs("prune_model")}
    scored = {m: spec["out"] for m, spec in resolved.jobs("skip_interventions").items()
              if spec["problems"]}
    maps = {pair: paths.linear_map(pair) for pair in resolved.jobs("linear_maps")}
    map_groups = {}
    if maps:
        for key, pair, _ in _seeded_pairs(resolved, resolved.config["depth_use"]["linear_maps"]
                                          ["pairs"]):
            map_groups.setdefault(key.rsplit(".", 1)[1], []).append(pair)
    map_ends = [e for spec in resolved.jobs("linear_maps").values()
                for e in (spec["source_name"], spec["target_name"])]
    read = [m for m in dict.fromkeys(cod_members + list(pruned) + list(scored) + map_ends)
            if models[m]["kind"] == "pretrain"]
    fits = {name: {"fit": spec["out_json"], "exponent_bounds": spec["fit"]["exponent_bounds"]}
            for name, spec in resolved.jobs("fit_scaling").items()}
    toy = resolved.jobs("fit_toy").get("toy")
    if not (cod_pairs or pruned or scored or maps or fits or toy):
        return
    bootstrap = ((resolved.config.get("depth_use") or {}).get("depth_score") or {}).get(
        "bootstrap", {"resamples": 1000})
    spec = {
        "run_name": resolved.config["run_name"],
        "models": {m: {"dir": paths.model(m), "data": data_folder(resolved, m)} for m in read},
        "data": sorted({data_folder(resolved, m) for m in read}),
        "cod_pairs": cod_pairs, "analysis": analysed, "pruning": pruned,
        "pruning_groups": _grouped(pruned, group_of), "depth_score": scored,
        "depth_groups": _grouped(scored, group_of), "linear_maps": maps,
        "map_groups": map_groups, "fits": fits,
        "toy": {"fit": toy["out_json"], "exponent_bounds": toy["exponent_bounds"]}
        if toy else None,
        "bootstrap": {"resamples": bootstrap["resamples"], "seed": resolved.config["seed"]},
        "out_csv": paths.claims("csv"), "out_md": paths.claims("md"),
    }
    folders = ([paths.model(m) for m in read] + spec["data"] + list(analysed.values())
               + list(pruned.values()) + list(scored.values()) + list(maps.values()))
    files = [fit["fit"] for fit in fits.values()] + ([toy["out_json"]] if toy else [])
    resolved.add("make_claims", "claims", spec, outputs=[spec["out_csv"], spec["out_md"]],
                 inputs={"folders": folders, "files": files})


def _grouped(names, group_of) -> dict:
    """{seed group: its members among `names`}."""
    grouped = {}
    for name in names:
        grouped.setdefault(group_of(name), []).append(name)
    return grouped
