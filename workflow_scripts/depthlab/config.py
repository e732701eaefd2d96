"""Config resolution beyond the JSON schema: sweep expansion, training defaults, cross-references.

The JSON schema (config/schema.yaml) checks types, ranges and enums; this module checks what a
schema cannot: that every model a stage names is declared, that heads divide the width, that
sweep names do not clash. Errors name the offending key. Light on imports: the Snakefile uses it.
"""

from __future__ import annotations

import copy

STAGE_SECTIONS_WITHOUT_MODEL_LISTS = ("models", "sweeps", "resources")


class ConfigError(ValueError):
    """A config value that is well-typed but inconsistent; the message starts with its key."""


def sweep_model_name(sweep: str, depth: int, width: int) -> str:
    return f"{sweep}_l{depth}_m{width}"


def _expand_sweeps(config: dict) -> dict:
    models = copy.deepcopy(config["models"])
    for sweep_name, sweep in (config.get("sweeps") or {}).items():
        for depth in sweep["depths"]:
            for width in sweep["widths"]:
                name = sweep_model_name(sweep_name, depth, width)
                if name in models:
                    raise ConfigError(f"sweeps.{sweep_name}: expanded model name '{name}' is "
                                      f"already declared under models")
                if width % sweep["head_dim"]:
                    raise ConfigError(f"sweeps.{sweep_name}.head_dim: {sweep['head_dim']} does "
                                      f"not divide width {width}")
                # SwiGLU hidden size ~ (8/3) m in LLaMA, rounded to a multiple of 32
                intermediate = int(round(sweep["mlp_ratio"] * width / 32)) * 32
                models[name] = {
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
    return models


def _resolve_pretrain(name: str, model: dict, defaults: dict) -> None:
    arch = model["architecture"]
    if arch["hidden_size"] % arch["num_heads"]:
        raise ConfigError(f"models.{name}.architecture.num_heads: {arch['num_heads']} does not "
                          f"divide hidden_size {arch['hidden_size']}")
    kv_heads = arch.get("num_kv_heads", arch["num_heads"])
    if arch["num_heads"] % kv_heads:
        raise ConfigError(f"models.{name}.architecture.num_kv_heads: {kv_heads} does not divide "
                          f"num_heads {arch['num_heads']}")
    unknown = sorted(set(model.get("train") or {}) - set(defaults))
    if unknown:
        raise ConfigError(f"models.{name}.train.{unknown[0]}: unknown training key "
                          f"(known: {', '.join(sorted(defaults))})")
    model["train"] = {**defaults, **(model.get("train") or {})}
    train = model["train"]
    if train["warmup_steps"] > train["steps"]:
        raise ConfigError(f"models.{name}.train.warmup_steps: {train['warmup_steps']} exceeds "
                          f"steps {train['steps']}")


def _model_references(section, path: str):
    """Yield (key path, model name) for every `models:` list inside a stage section."""
    if isinstance(section, dict):
        for key, value in section.items():
            if key == "models" and isinstance(value, list):
                for index, name in enumerate(value):
                    yield f"{path}.models[{index}]", name
            else:
                yield from _model_references(value, f"{path}.{key}")


def resolve_models(config: dict) -> dict:
    """All declared models (sweeps expanded), pretrain models with their full training settings."""
    models = _expand_sweeps(config)
    for name, model in models.items():
        if model["kind"] == "pretrain":
            _resolve_pretrain(name, model, config["pretrain"])
    return models


def check_references(config: dict, models: dict) -> None:
    for section_name, section in config.items():
        if section_name in STAGE_SECTIONS_WITHOUT_MODEL_LISTS:
            continue
        for key, name in _model_references(section, section_name):
            if name not in models:
                raise ConfigError(f"{key}: '{name}' is not a declared model "
                                  f"(declared: {', '.join(sorted(models))})")
        if isinstance(section, dict) and "sweep" in section:
            if section["sweep"] not in (config.get("sweeps") or {}):
                raise ConfigError(f"{section_name}.sweep: '{section['sweep']}' is not a "
                                  f"declared sweep")


def resolve_config(config: dict) -> dict:
    """Validate cross-references; return the derived keys the workflow adds to its config."""
    models = resolve_models(config)
    check_references(config, models)
    return {"resolved_models": models}
