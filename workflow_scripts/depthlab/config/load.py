"""Loading a config: strict YAML, files merged left to right, `--config` overrides, and the
JSON-schema check against config/schema.yaml (which owns every type, range and enum; the enums
of the extensible names, norm schemes and block-ranking criteria, are filled in from their
registries by `schema_document`).

    load_config(*files)        strict YAML (duplicate keys are errors), files merged left to right;
                               merged, they must be a whole config (an overlay alone is refused)
    repeated_configfile(argv)  the problem with a command line that gives --configfile twice
    apply_overrides(c, o)      `snakemake --config key=value` overrides, nested values parsed as YAML
    validate_schema(c)         config/schema.yaml (integers must be integers: `steps: 16.0` fails)
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import yaml

from depthlab.config import switch_off
from depthlab.config.sources import (
    LoadedConfig,
    check_numbers,
    file_line,
    key_text,
    source_of,
    value_source,
    with_source,
)
from depthlab.core.errors import ConfigError
from depthlab.core.repo_files import REPO_ROOT
from depthlab.settings.defaults import SCHEMA_PATH, schema

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
    except UnicodeDecodeError:
        raise ConfigError(_not_utf8(path)) from None
    if data is None:
        raise ConfigError(f"{path}: empty (a config is a mapping of keys, e.g. `run_name: mine`)")
    if not isinstance(data, dict):
        kind = {list: "a list", str: "a string"}.get(type(data), type(data).__name__)
        raise ConfigError(f"{path}:1: a config is a mapping of keys, got {kind}")
    # every number finite, every integer within 64 bits: `lr: .nan` or a 20-digit seed would
    # otherwise pass the schema and fail deep inside a job, naming no key
    check_numbers(data, lambda key: f"{path}:{(file_line(path, key) or ('?',))[0]}")
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


def _not_utf8(path: Path) -> str:
    """`path:line: not UTF-8 (...)`, the line of the first byte that is not (the reader decodes
    in chunks, so its error's position is within a chunk: decoded again whole here)."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        column = error.start - data.rfind(b"\n", 0, error.start)
        return f"{path}:{line}: not UTF-8 (byte 0x{data[error.start]:02x} at column {column})"
    return f"{path}: not UTF-8"


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
    """Config files merged left to right (config/default.yaml when none is given); ConfigError
    when together they lack a key every whole config has (`check_whole_config`)."""
    paths = paths or (DEFAULT_CONFIG,)
    config: dict = {}
    for path in paths:
        config = merge(config, load_yaml(path))
    check_whole_config(config, paths)
    # a dict that remembers its files, so that a later error can name the file of a key
    loaded = LoadedConfig(config)
    loaded.files = tuple(Path(path) for path in paths)
    return loaded


def check_whole_config(config: dict, paths) -> None:
    """An overlay given alone (or files that together lack what the schema requires at the top,
    `run_name` first) is refused naming the files and the command that works: the base config
    first, all files after one --configfile. Without this, the schema's `'run_name' is a
    required property` would not say that the base config is missing."""
    missing = [key for key in schema().get("required", []) if key not in config]
    if not missing:
        return
    names = [str(path) for path in paths]
    lacking = f"no {', '.join(missing)}"
    if len(names) == 1:
        what = f"{names[0]}: an overlay, not a whole config ({lacking})"
    else:
        what = f"{' + '.join(names)}: not a whole config together ({lacking})"
    raise ConfigError(
        f"{what}; give the config it changes first, all files after one --configfile: "
        f"snakemake --configfile config/default.yaml {' '.join(names)} (plan.py "
        f"config/default.yaml {' '.join(names)}). Snakemake keeps only the last of several "
        f"--configfile options"
    )


CONFIGFILE_OPTIONS = ("--configfile", "--configfiles")


def _whole(path: str) -> bool:
    """Whether the file at `path` is a whole config (False for an overlay or an unreadable file)."""
    try:
        data = load_yaml(path)
    except ConfigError:
        return False
    return all(key in data for key in schema().get("required", []))


def repeated_configfile(argv) -> str | None:
    """The problem with a snakemake command line (`argv`, sys.argv) that gives --configfile more
    than once, or None. Snakemake keeps only the last one's files without a word, so
    `--configfile=base.yaml --configfile=overlay.yaml` would run the overlay alone and
    `--configfile=overlay.yaml --configfile=base.yaml` the base alone."""
    groups: list[list[str]] = []
    current: list[str] | None = None
    for token in argv[1:]:
        if token == "--":
            break  # targets follow
        option, equals, value = token.partition("=")
        # argparse accepts an unambiguous prefix (`--configf`); `--config` is its own option
        if option.startswith("--configf") and any(o.startswith(option) for o in CONFIGFILE_OPTIONS):
            groups.append([value] if equals else [])
            current = None if equals else groups[-1]
        elif token.startswith("-"):
            current = None
        elif current is not None:
            current.append(token)
    if len(groups) < 2:
        return None
    # the whole configs first (an overlay given before its base is moved after it)
    files = sorted((name for group in groups for name in group), key=lambda n: not _whole(n))
    kept = " ".join(groups[-1]) or "none"
    return (
        f"--configfile given {len(groups)} times: Snakemake keeps only the last ({kept}) and "
        f"drops the others without a word; give all files after one --configfile, the whole "
        f"config first: snakemake --configfile {' '.join(files)} (add `--` before targets)"
    )


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
            raise ConfigError(
                f"--config {key}={value}: the key {key!r} is empty or has an empty part"
                f" (KEY=VALUE, e.g. pretrain.steps=100)"
            )
        nested = merge(
            nested, functools.reduce(lambda inner, part: {part: inner}, parts[::-1], value)
        )
    parsed = parse_override_value(nested)
    check_numbers(parsed, lambda key: f"--config {key_text(key)}")
    merged = merge(config, parsed)
    if isinstance(merged, LoadedConfig):  # the keys the command line set name no file
        merged.overrides = merge(config.overrides or {}, parsed)
    return merged


# What `null` switches off or removes (a stage, a model, a named entry, an optional sub-section),
# read from the schema: depthlab.config.switch_off; resolve() calls it before the schema check.
drop_removed_entries = switch_off.drop_removed_entries


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


_key_path = key_text


def validate_schema(config: dict) -> None:
    """ConfigError `key: problem` for the first number that is not finite or exceeds 64 bits,
    or the first value config/schema.yaml refuses; `(in file:line)` appended where `config` is
    a LoadedConfig whose file set that value."""
    import jsonschema

    check_numbers(config, lambda key: value_source(config, key))
    errors = sorted(
        _schema_validator().iter_errors(config),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        where = _key_path(error.absolute_path)
        message = error.message
        if error.validator == "additionalProperties":
            raise ConfigError(_unknown_key(config, error))
        if error.validator == "pattern" and isinstance(error.instance, str):
            message = (
                f"{error.instance!r} is not a safe name (letters, digits, _ . -; no "
                f"'..', separators or shell characters)"
            )
            if "propertyNames" in error.schema_path:
                # a key's name: its own line, not the mapping's (merged from several files)
                raise ConfigError(
                    f"{where}: {message}" + _key_source(config, error, error.instance)
                )
        if error.validator == "type":
            message = _type_message(error)
        raise ConfigError(with_source(config, f"{where}: {message}"))


def _type_message(error) -> str:
    """A type error as the user wrote the value: YAML's null / true / false (not Python's None /
    True / False), and a hint where YAML read something other than what was meant: a `{...}` or
    `[...]` it could not parse (so it stayed a string), a number where text is expected (a
    checksum or an id of digits)."""
    value, expected = error.instance, error.validator_value
    expected = [expected] if isinstance(expected, str) else list(expected)
    message = error.message
    if value is None or isinstance(value, bool):
        spelled = {None: "null", True: "true", False: "false"}[value]
        message = spelled + message.removeprefix(repr(value))
    if (
        isinstance(value, str)
        and value.lstrip()[:1] in ("{", "[")
        and ({"object", "array"} & set(expected))
    ):
        message += (
            " (YAML could not read it as a mapping or a list, so it stayed text: check its"
            " brackets, commas and quotes)"
        )
    if isinstance(value, (int, float)) and not isinstance(value, bool) and expected == ["string"]:
        message += ' (YAML read a number: quote it to keep it text, e.g. "0123")'
    return message


def _unknown_key(config, error) -> str:
    """The message of an additionalProperties error: the mapping's key first (as every schema
    error), then the unknown key, a close known one, and where the unknown key was set (the
    mapping itself merges several files, so only the key's own line names one)."""
    import difflib
    import re

    known = list(error.schema.get("properties", {}))
    patterns = list(error.schema.get("patternProperties", {}))
    unknown = [
        key
        for key in error.instance
        if key not in known and not any(re.search(p, str(key)) for p in patterns)
    ]
    where = _key_path(error.absolute_path)
    if not unknown:
        return f"{where}: unknown key ({error.message})"
    close = difflib.get_close_matches(str(unknown[0]), known, n=1)
    hint = f", did you mean {close[0]!r}?" if close else ""
    # jsonschema's "'bogus' does not match any of the regexes: '^x-'" names the free-form keys
    # as a regex; said plainly
    why = (
        f"not a key of this section; free-form keys match {' or '.join(patterns)}"
        if patterns
        else error.message
    )
    return f"{where}: unknown key {unknown[0]!r}{hint} ({why})" + _key_source(
        config, error, unknown[0]
    )


def _key_source(config, error, key) -> str:
    """` (in file:line)` of the key `key` inside the mapping an error is about (the mapping
    itself merges several files, so only the key's own line names one); '' where none."""
    source = source_of(config, (*error.absolute_path, key))
    return f" (in {source})" if source else ""
