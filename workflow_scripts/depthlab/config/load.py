"""Loading a config: strict YAML, files merged left to right, `--config` overrides, and the
JSON-schema check against config/schema.yaml (which owns every type, range and enum; the enums
of the extensible names, norm schemes and block-ranking criteria, are filled in from their
registries by `schema_document`).

    load_config(*files)        strict YAML (duplicate keys are errors), files merged left to right
    apply_overrides(c, o)      `snakemake --config key=value` overrides, nested values parsed as YAML
    validate_schema(c)         config/schema.yaml (integers must be integers: `steps: 16.0` fails)
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import yaml

from depthlab.core.errors import ConfigError
from depthlab.settings.defaults import SCHEMA_PATH, schema

REPO_ROOT = Path(__file__).resolve().parents[3]  # workflow_scripts/depthlab/config/load.py


DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"


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
                f"one mapping (first at line {seen[key] + 1}); YAML would silently keep the last"
            )
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_strict_mapping
)


def load_yaml(path: str | os.PathLike) -> dict:
    """One config file as a mapping; every way it can be unusable is one ConfigError line that
    names the file (and the line, where YAML knows it)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a config file")
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
        raise ConfigError(_yaml_error(path, error)) from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 ({error})") from None
    if data is None:
        raise ConfigError(f"{path}: empty (a config is a mapping of keys, e.g. `run_name: mine`)")
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a string"}.get(type(data), type(data).__name__)
        raise ConfigError(f"{path}:1: a config is a mapping of keys, got {kind}")
    return data


def _yaml_error(path: Path, error: yaml.YAMLError) -> str:
    """`path:line: not valid YAML: <problem>` on one line (YAML's own message spans several)."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
    problem = getattr(error, "problem", None) or str(error)
    context, context_mark = getattr(error, "context", None), getattr(error, "context_mark", None)
    text = problem
    if context and context_mark is not None and mark is not None:
        text += f" ({context} started at line {context_mark.line + 1})"
    elif context:
        text += f" ({context})"
    if mark is not None and "\t" in _line(path, mark.line):
        text = "a tab indents this line (YAML indents with spaces only)"
    return f"{where}: not valid YAML: {' '.join(text.split())}"


def _line(path: Path, index: int) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return lines[index] if 0 <= index < len(lines) else ""


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
    """`overrides` merged into `config`; a dotted key (`pretrain.steps`, which plan.py accepts
    but Snakemake's --config does not) sets that nested key."""
    nested: dict = {}
    for key, value in overrides.items():
        parts = key.split(".")
        if not all(parts):
            raise ConfigError(f"--config {key}: an empty part in a dotted key")
        nested = merge(
            nested, functools.reduce(lambda inner, part: {part: inner}, parts[::-1], value)
        )
    return merge(config, parse_override_value(nested))


# Mappings keyed by names the user chooses (a model, a text set, a sweep): an overlay merges into
# them, so `null` as an entry's value is how it removes one (`per_model: {smollm2: null}`).
NAMED_ENTRIES = (
    ("sweeps",),
    ("analysis", "text_sets"),
    ("analysis", "per_model"),
    ("lens_swaps", "per_model"),
    ("pruning", "per_model"),
    ("depth_use", "skip", "per_model"),
    ("depth_use", "depth_score", "families"),
)


def drop_removed_entries(config: dict) -> dict:
    """A copy of `config` without the named entries an overlay set to null (NAMED_ENTRIES); a
    whole stage set to null (`pruning: null`) stays: the stage is off."""
    config = copy.deepcopy(config)
    for path in NAMED_ENTRIES:
        section = config
        for part in path:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict):
            for name in [name for name, value in section.items() if value is None]:
                del section[name]
    return config


def schema_document(path: Path = SCHEMA_PATH) -> dict:
    """config/schema.yaml with the enums declared elsewhere filled in: `norm_scheme` and
    `architecture.deepnorm_variant` from the norm-scheme registry (depthlab.core.norm_schemes),
    `strategy` from the block-ranking criteria (depthlab.settings.block_criteria)."""
    from depthlab.core import norm_schemes
    from depthlab.settings.block_criteria import STRATEGIES

    document = schema() if path == SCHEMA_PATH else yaml.safe_load(path.read_text())
    document["definitions"]["norm_scheme"]["enum"] = list(norm_schemes.names())
    variant = document["definitions"]["architecture"]["properties"]["deepnorm_variant"]
    variant["enum"] = list(norm_schemes.deepnorm_variants())
    document["definitions"]["strategy"]["enum"] = list(STRATEGIES)
    return document


@functools.lru_cache(maxsize=1)
def _schema_validator():
    import jsonschema

    schema = schema_document()
    base = jsonschema.Draft202012Validator
    # JSON Schema counts 16.0 as an integer; the code needs a Python int.
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(base, type_checker=checker)(schema)


def _key_path(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def validate_schema(config: dict) -> None:
    import jsonschema

    errors = sorted(
        _schema_validator().iter_errors(config),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        where = _key_path(error.absolute_path)
        message = error.message
        if error.validator == "additionalProperties":
            message = f"unknown key ({message})"
        elif error.validator == "pattern" and isinstance(error.instance, str):
            message = (
                f"{error.instance!r} is not a safe name (letters, digits, _ . -; no "
                f"'..', separators or shell characters)"
            )
        raise ConfigError(f"{where}: {message}")
