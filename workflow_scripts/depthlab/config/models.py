"""The model registry: declared models, sweeps and seeds expanded into one model per name, the
per-model checks (architecture, training settings, local and hub checkpoints) and the facts
stages read from a model (its layers, LM head, data folder, positions)."""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from depthlab.config.load import REPO_ROOT
from depthlab.config.paths import check_name, seed_model_name, sweep_model_name
from depthlab.core.errors import CheckpointError, ConfigError
from depthlab.core.norm_schemes import check_architecture
from depthlab.models.architectures import config_layer_count, is_causal_lm, resolve_model_path

if TYPE_CHECKING:
    from depthlab.config.resolved import Resolved

SHA256 = re.compile(r"[0-9a-fA-F]{64}\Z")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


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
            raise ConfigError(
                f"{key}.seeds: expanded model name '{member}' (seed {seed}) is "
                f"already declared under models"
            )
        members[member] = {**copy.deepcopy(model), "seed": seed, "seed_group": name}
    return members


def _add_models(models: dict, new: dict, key: str) -> None:
    for name, model in new.items():
        if name in models:
            raise ConfigError(
                f"{key}: expanded model name '{name}' is already declared under models"
            )
        models[name] = model


def expand_sweeps(config: dict) -> dict:
    """Declared models plus every sweep's depth x width grid, each expanded over its `seeds:`."""
    declared = config["models"]
    models = {}
    for name, model in copy.deepcopy(declared).items():
        _add_models(
            models, _expand_seeds(name, model, f"models.{name}", declared), f"models.{name}.seeds"
        )
    for sweep_name, sweep in (config.get("sweeps") or {}).items():
        for depth in sweep["depths"]:
            for width in sweep["widths"]:
                name = sweep_model_name(sweep_name, depth, width)
                check_name(name, f"sweeps.{sweep_name} (expanded model name)")
                if name in declared:
                    raise ConfigError(
                        f"sweeps.{sweep_name}: expanded model name '{name}' is "
                        f"already declared under models"
                    )
                if width % sweep["head_dim"]:
                    raise ConfigError(
                        f"sweeps.{sweep_name}.head_dim: {sweep['head_dim']} does "
                        f"not divide width {width}"
                    )
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
                _add_models(
                    models,
                    _expand_seeds(name, point, f"sweeps.{sweep_name}", declared),
                    f"sweeps.{sweep_name}",
                )
    return models


def seed_groups(resolved: Resolved) -> dict[str, list[str]]:
    """Base model name -> the model names it expands to, in declaration order: a model or sweep
    point with `seeds: [0, 1]` -> [<name>_s0, <name>_s1]; any other model -> [its name]. Stages
    accept a base name wherever they list models and read it as all its seeds."""
    groups: dict[str, list[str]] = {}
    for name, model in resolved.models.items():
        groups.setdefault(model.get("seed_group", name), []).append(name)
    return groups


class ModelOverrides:
    """A stage's `per_model` section: per-model overrides of the stage's settings, keyed by model
    name or by a seeded model's base name (which covers its seeds unless a seed has its own).
    `stage` is the section's key (e.g. "pruning"), `listed` the keys whose models it may name.

    A key naming a declared model that the stage does not run is ignored, with one note in
    `resolved.notes` (an overlay that narrows the stage's model list keeps the base config's
    per_model entries); a key naming no declared model is an error (a misspelling)."""

    def __init__(self, resolved: Resolved, stage: str, per_model: dict, names, listed: str):
        groups = seed_groups(resolved)
        unused = []
        for name in per_model:
            if name not in resolved.models and name not in groups:
                raise undeclared_model(resolved, f"{stage}.per_model.{name}", name)
            if not set(groups.get(name, [name])) & set(names):
                unused.append(name)
        if unused:
            resolved.notes.append(
                f"{stage}.per_model: the settings of {', '.join(unused)} are ignored "
                f"(not in {listed})"
            )
        per_model = {name: settings for name, settings in per_model.items() if name not in unused}
        self.resolved, self.stage, self.per_model = resolved, stage, per_model

    def group(self, name: str) -> str:
        """The per_model key that applies to model `name`."""
        if name in self.per_model:
            return name
        return self.resolved.models[name].get("seed_group", name)

    def of(self, name: str) -> dict:
        """The overrides of model `name` ({} when none)."""
        return self.per_model.get(self.group(name), {})

    def key(self, name: str, *path: str) -> str:
        """The config key that sets `path` for model `name`: its override where one applies, else
        the stage's own key (so an error names what the user would edit)."""
        section = self.of(name)
        for part in path[:-1]:  # the schema makes every level above a setting a mapping
            section = section.get(part, {})
        inside = f"per_model.{self.group(name)}." if path[-1] in section else ""
        return f"{self.stage}.{inside}{'.'.join(path)}"


def check_pretrain_model(name: str, model: dict, defaults: dict, processes: int) -> None:
    key = (
        f"sweeps.{model['sweep']}"
        if "sweep" in model
        else f"models.{model.get('seed_group', name)}"
    )
    arch = model["architecture"]
    if arch["hidden_size"] % arch["num_heads"]:
        raise ConfigError(
            f"{key}.architecture.num_heads: {arch['num_heads']} does not "
            f"divide hidden_size {arch['hidden_size']}"
        )
    if (arch["hidden_size"] // arch["num_heads"]) % 2:
        raise ConfigError(
            f"{key}.architecture.num_heads: head size "
            f"{arch['hidden_size'] // arch['num_heads']} is odd (RoPE rotates pairs)"
        )
    kv_heads = arch.get("num_kv_heads", arch["num_heads"])
    if arch["num_heads"] % kv_heads:
        raise ConfigError(
            f"{key}.architecture.num_kv_heads: {kv_heads} does not divide "
            f"num_heads {arch['num_heads']}"
        )
    if "mix_ln_post_fraction" in arch and model["norm_scheme"] != "mix_ln":
        raise ConfigError(
            f"{key}.architecture.mix_ln_post_fraction: has no effect for "
            f"norm_scheme {model['norm_scheme']} (only mix_ln)"
        )
    try:
        check_architecture(arch, model["norm_scheme"], f"{key}.architecture")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    own = model.get("train") or {}
    model["train"] = {**defaults, **own}
    train = model["train"]

    def set_by(*fields: str) -> str:
        # the model's effective setting leads the message; a value it takes from the pretrain
        # defaults is named there too, as that is the key to edit
        inherited = [f"pretrain.{field}" for field in fields if field not in own]
        return f" (set by {', '.join(inherited)})" if inherited else ""

    if train["warmup_steps"] > train["steps"]:
        raise ConfigError(
            f"{key}.train.warmup_steps: {train['warmup_steps']} exceeds steps {train['steps']}"
            + set_by("warmup_steps", "steps")
        )
    rows = train["batch_size"]
    if rows % processes:
        raise ConfigError(
            f"{key}.train.batch_size: {rows} is not divisible by the {processes} "
            f"processes of resources.pretrain (gpu / processes)" + set_by("batch_size")
        )
    micro = train["micro_batch_size"]
    if micro is not None and (rows // processes) % micro:
        raise ConfigError(
            f"{key}.train.micro_batch_size: {micro} does not divide the "
            f"{rows // processes} rows each process gets per step (batch_size "
            f"{rows} over {processes} process(es))" + set_by("micro_batch_size", "batch_size")
        )


def check_hf_model(name: str, model: dict, base_dir: Path) -> None:
    path = model["path"]
    key = f"models.{name}.path"
    try:
        local = resolve_model_path(path)
    except FileNotFoundError as error:  # a pkg: path whose package or folder is missing
        raise ConfigError(f"{key}: {error}") from None
    candidate = local_path(local, base_dir)
    looks_local = (
        path.startswith(("pkg:", "/", ".", "~")) or local.count("/") != 1 or not HUB_ID.match(local)
    )
    if candidate is None:
        if looks_local:
            raise ConfigError(
                f"{key}: local model folder '{path}' does not exist (a hub id "
                f"looks like 'org/name')"
            )
        return  # a hub id: checked when downloaded
    if not Path(candidate).is_dir():
        raise ConfigError(f"{key}: '{path}' is not a folder")
    from depthlab.models.architectures import check_local_model  # torch-free checks of the folder

    try:
        check_local_model(candidate)
    except CheckpointError as error:
        raise ConfigError(f"{key}: {error}") from None


def gguf_sources(model: dict, base_dir: Path, key: str) -> list[str]:
    """A gguf model's files as local paths (pkg: sources resolved, relative paths from the working
    directory or the workflow folder); ConfigError naming `key[i]` for one that is missing."""
    sources = []
    for index, source in enumerate(model["files"]):
        try:
            local = resolve_model_path(source, file=True)
        except FileNotFoundError as error:  # a pkg: path whose package or file is missing
            raise ConfigError(f"{key}[{index}]: {error}") from None
        sources.append(local_file(local, base_dir, f"{key}[{index}]"))
    return sources


def check_gguf_model(name: str, model: dict, base_dir: Path) -> None:
    """Every file of a gguf model exists; its layer count comes from the first file's header
    (model["layers"]: None when the header names none); the files joined in order have the
    declared sha256. Checked here, before any job: a convert_gguf job whose spec changed would
    have its converted folder deleted by Snakemake before it could find the checksum wrong."""
    if not SHA256.match(model["sha256"]):
        raise ConfigError(
            f"models.{name}.sha256: {model['sha256']!r} is not a sha256 (64 hex digits)"
        )
    key = f"models.{name}.files"
    sources = gguf_sources(model, base_dir, key)
    from depthlab.models.gguf import gguf_block_count, sources_sha256  # torch-free

    try:
        model["layers"] = gguf_block_count(sources[0])
    except (OSError, ValueError) as error:
        raise ConfigError(f"{key}[0]: {sources[0]}: {error}") from None
    try:
        actual = sources_sha256(sources)
    except OSError as error:
        raise ConfigError(f"{key}: {error}") from None
    if actual != model["sha256"].lower():
        files = model["files"]
        shown = files[0] if len(files) == 1 else f"{files[0]} .. {files[-1]} (joined in order)"
        raise ConfigError(
            f"models.{name}.sha256: declared {model['sha256']}, but {shown} has sha256 "
            f"{actual} (a wrong checksum here, a corrupt download, or chunks out of order); "
            f"no job was started, nothing was deleted"
        )


def local_path(path: str, base_dir: Path) -> str | None:
    """A path as given if it exists from the working directory, else relative to the workflow
    folder; None when neither exists."""
    expanded = os.path.expanduser(path)
    if os.path.exists(expanded):
        return expanded
    candidate = base_dir / expanded
    # os.path.exists, not Path.exists: a name too long for the file system is not there
    # (Path.exists raises OSError for it)
    if not os.path.isabs(expanded) and os.path.exists(candidate):
        return os.path.relpath(candidate)
    return None


def local_file(path: str, base_dir: Path, key: str) -> str:
    """`local_path` of a file the config names; ConfigError naming `key` when it is none."""
    local = local_path(path, base_dir)
    if local is None or not os.path.isfile(local):
        raise ConfigError(f"{key}: '{path}' is not a file")
    return local


def training_data(model: dict) -> str:
    """What a declared model trains on: `corpus` (the data stage; the schema's default) or
    `problems` (depth_use.problems)."""
    return model.get("data", "corpus")


def data_folder(resolved: Resolved, name: str) -> str | None:
    """The data folder a declared pretrain model trains on (None for hf models)."""
    model = resolved.models[name]
    if model["kind"] != "pretrain":
        return None
    if training_data(model) == "problems":
        problems = (resolved.config.get("depth_use") or {}).get("problems")
        if not problems:
            raise ConfigError(f"models.{name}.data: 'problems' needs depth_use.problems")
        from depthlab.data.problem_sets import FAMILIES, has_synthetic_family

        if not has_synthetic_family(problems):
            raise ConfigError(
                f"models.{name}.data: 'problems' needs a synthetic family "
                f"({', '.join(FAMILIES)}) in depth_use.problems.families: "
                f"dataset families have no training data"
            )
        return resolved.paths.problems
    return resolved.paths.data


def corpus_models(resolved: Resolved) -> list:
    """Declared models that read the corpus (every model except those trained on problems)."""
    return [name for name, m in resolved.models.items() if training_data(m) == "corpus"]


def undeclared_model(resolved: Resolved, key: str, name: str) -> ConfigError:
    """The error for `key` naming model `name` that nothing declares: the closest declared names
    (difflib), then the models as the config declares them (a seeded model by its base name with
    its seeds, a sweep by its name pattern), not the expanded names. A name of a sweep's form
    (<sweep>_l<depth>_m<width>) also gets the sweep's depths and widths, the keys that would
    declare it (a depth dropped from a sweep leaves references to its models)."""
    # the names as declared (seed groups' base names) first, then every expanded name
    groups = seed_groups(resolved)
    close = difflib.get_close_matches(name, list(groups), n=3) or difflib.get_close_matches(
        name, list(resolved.models), n=3
    )
    message = f"{key}: '{name}' is not a declared model"
    if close:
        message += f"; did you mean {' or '.join(repr(match) for match in close)}?"
    message += f" (declared: {'; '.join(declared_names(resolved.config))})"
    for sweep_name, sweep in (resolved.config.get("sweeps") or {}).items():
        if re.fullmatch(rf"{re.escape(sweep_name)}_l\d+_m\d+(_s\d+)?", name):
            message += (
                f"; sweeps.{sweep_name}.depths {sweep['depths']} and "
                f"sweeps.{sweep_name}.widths {sweep['widths']} make its models"
            )
    return ConfigError(message)


def declared_names(config: dict) -> list[str]:
    """The models as `config` declares them, in its order: `pre_ln (seeds 0, 1, 2)`, `smollm2`,
    `sweep depth_width: depth_width_l<2|4>_m<64|96>`."""
    names = []
    for name, model in (config.get("models") or {}).items():
        seeds = (model or {}).get("seeds")
        names.append(f"{name} (seeds {', '.join(map(str, seeds))})" if seeds else name)
    for sweep_name, sweep in (config.get("sweeps") or {}).items():
        depths, widths = ("|".join(map(str, sweep[axis])) for axis in ("depths", "widths"))
        seeds = sweep.get("seeds")
        names.append(
            f"sweep {sweep_name}: {sweep_name}_l<{depths}>_m<{widths}>"
            + (f" (seeds {', '.join(map(str, seeds))})" if seeds else "")
        )
    return names


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
            raise undeclared_model(resolved, f"{key}[{index}]", name)
    return list(dict.fromkeys(expanded))


def reads_special_tokens(model: dict) -> bool:
    """Whether text reaches a model with its tokenizer's special tokens: a model pretrained here
    reads documents as its training stream encoded them (none); a declared checkpoint reads them
    as it was trained (its tokenizer's template, e.g. Llama's BOS)."""
    return model["kind"] in ("hf", "gguf")


FIGURE_FACTS = ("kind", "norm_scheme", "sweep", "seed", "seed_group")


def figure_facts(resolved: Resolved, names) -> dict:
    """What figures group and colour models by (depthlab.core.figure_style): {name: facts}."""
    models = resolved.models
    return {name: {k: models[name][k] for k in FIGURE_FACTS if k in models[name]} for name in names}


def model_location(resolved: Resolved, name: str) -> str:
    """Where a declared model's HF folder is: our pretrain or convert_gguf output, or the declared
    path."""
    model = resolved.models[name]
    return resolved.paths.model(name) if model["kind"] in BUILT_HERE else model["path"]


# Kinds whose HF folder a job of this workflow writes to results/<run>/models/<name>/.
BUILT_HERE = ("pretrain", "gguf")


def declared_checkpoint_folder(resolved: Resolved, name: str) -> str | None:
    """The existing local folder of a declared hf model (None for a hub model, and for models
    whose folder a job writes: pretrain, gguf)."""
    model = resolved.models[name]
    if model["kind"] != "hf":
        return None
    return local_path(resolve_model_path(model["path"]), REPO_ROOT)


def _checkpoint_config(resolved: Resolved, name: str) -> tuple[str, dict] | None:
    """(folder, config.json) of a declared hf model's local folder; None for a hub model."""
    local = local_path(resolve_model_path(resolved.models[name]["path"]), REPO_ROOT)
    if local is None:
        return None
    return local, json.loads((Path(local) / "config.json").read_text())


def model_layers(resolved: Resolved, name: str, key: str) -> int | None:
    """A declared model's decoder layers: its architecture, or a local checkpoint's config
    (None for a hub model: its layer settings are checked when the job has downloaded it)."""
    model = resolved.models[name]
    if model["kind"] == "pretrain":
        return model["architecture"]["num_layers"]
    if model["kind"] == "gguf":
        return model.get("layers")  # from the GGUF header (check_gguf_model)
    checkpoint = _checkpoint_config(resolved, name)
    if checkpoint is None:
        return None
    local, config = checkpoint
    layers = config_layer_count(config)
    if layers is None:
        raise ConfigError(f"{key}: {local}/config.json names no layer count")
    return layers


def check_positions(resolved: Resolved, name: str, length: int, key: str) -> None:
    """A sequence length a stage feeds to a model trained here must not exceed the positions it
    was trained on (its RoPE never saw more)."""
    model = resolved.models[name]
    if model["kind"] == "pretrain" and length > model["train"]["seq_len"]:
        raise ConfigError(
            f"{key}: {length} tokens exceed the {model['train']['seq_len']} "
            f"positions '{name}' was trained on (its train.seq_len)"
        )


def has_lm_head(resolved: Resolved, name: str) -> bool:
    """Whether a declared model has an LM head: ours do; a local checkpoint's config.json says
    (depthlab.models.architectures.is_causal_lm); a hub model is taken to be a causal LM (checked when
    downloaded)."""
    if resolved.models[name]["kind"] in BUILT_HERE:
        return True  # a gguf model is loaded with AutoModelForCausalLM, so it has one
    checkpoint = _checkpoint_config(resolved, name)
    return checkpoint is None or is_causal_lm(checkpoint[1].get("architectures"))
