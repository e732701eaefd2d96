"""Where a config value came from, and the check every number of a config passes.

    LoadedConfig            the merged mapping load_config returns: a dict that also remembers its
                            files and the `--config` overrides applied to it (`apply_overrides`)
    value_source(c, path)   `file:line` of the file that set the value at `path` (a key path), or
                            None (set by `--config`, changed in memory since, or not a loaded config)
    source_of(c, path)      value_source, or `--config` where the command line set the value
    with_source(c, message) a ConfigError message that starts with a key, with `(in file:line)`
                            appended where value_source finds the file, `(in --config)` where
                            the command line set the key
    check_numbers(data)     every number finite and every integer within 64 bits (numpy and torch
                            hold no larger); ConfigError naming the key otherwise

Reading a file again happens only on the way to an error, so a valid config costs nothing here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml

from depthlab.core.errors import ConfigError

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


class LoadedConfig(dict):
    """A merged config that remembers the files it was loaded from (`files`, in merge order) and
    the parsed `--config` overrides merged into it (`overrides`); a plain dict otherwise (copies
    keep both)."""

    files: tuple[Path, ...] = ()
    overrides: dict | None = None


# `yaml.safe_dump(load_config(...))` writes it as the mapping it is
yaml.SafeDumper.add_representer(LoadedConfig, yaml.SafeDumper.represent_dict)
yaml.Dumper.add_representer(LoadedConfig, yaml.Dumper.represent_dict)


def key_text(path) -> str:
    """A key path as the messages write it: `models.x.seeds[0]`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _yaml_number(value) -> str:
    if isinstance(value, float) and math.isnan(value):
        return ".nan"
    if isinstance(value, float) and math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return repr(value)


def number_problem(value) -> str | None:
    """Why `value` cannot stand in a config (None: it can, or it is not a number)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{_yaml_number(value)} is not a finite number (NaN and infinities are refused)"
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return (
            f"{value} does not fit in 64 bits (a config's integers lie within "
            f"±{INT64_MAX:,}; numpy and torch hold no larger)"
        )
    return None


def bad_numbers(data, path: tuple = ()):
    """(key path, problem) of each number in `data` that number_problem refuses."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from bad_numbers(value, (*path, key))
    elif isinstance(data, (list, tuple)):
        for index, value in enumerate(data):
            yield from bad_numbers(value, (*path, index))
    else:
        problem = number_problem(data)
        if problem is not None:
            yield path, problem


def check_numbers(data, where=lambda path: None) -> None:
    """ConfigError `key: problem` for the first bad number in `data`; `where(path)`: the source
    to append (`file:line`, `--config`), or None."""
    for path, problem in bad_numbers(data):
        source = where(path)
        raise ConfigError(f"{key_text(path)}: {problem}" + (f" (in {source})" if source else ""))


# ---- where a value came from


def _find_entry(node, path):
    """(key node or None, value node) of the entry at key path `path` under `node` (merge keys
    `<<` followed): the key node where the last part is a mapping's key; None where no such
    entry is."""
    key = None
    for part in path:
        found = _child(node, part)
        if found is None:
            return None
        key, node = found
    return key, node


def _child(node, part):
    """(key node or None, value node) of `node`'s child `part`, or None."""
    if isinstance(node, yaml.SequenceNode):
        ok = isinstance(part, int) and 0 <= part < len(node.value)
        return (None, node.value[part]) if ok else None
    if not isinstance(node, yaml.MappingNode) or isinstance(part, int):
        return None
    merged = []
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            merged.extend(
                value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            )
        elif isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
            return key_node, value_node
    for mapping in merged:  # explicit keys win over merged ones
        found = _child(mapping, part)
        if found is not None:
            return found
    return None


_MISSING = object()


def _lookup(data, path):
    for part in path:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return _MISSING
    return data


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def file_line(file: Path, path) -> tuple[int, object] | None:
    """(line, value) of the entry at key path `path` in the YAML file `file` (the line of its
    key; of the item, in a list), or None."""
    try:
        text = Path(file).read_text(encoding="utf-8")
        found = _find_entry(yaml.compose(text, Loader=yaml.SafeLoader), path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if found is None:
        return None
    # the key's line: a mapping or a list under its key starts on the next line
    key, node = found
    value = _lookup(yaml.safe_load(text), path)
    return (key or node).start_mark.line + 1, value


def value_source(config, path) -> str | None:
    """`file:line` of the last file of a LoadedConfig that set the value at `path`, when that
    value is still the config's; None otherwise (a `--config` override, a value changed in
    memory, a plain dict)."""
    path = tuple(path)
    if not isinstance(config, LoadedConfig) or not path:
        return None
    value = _lookup(config, path)
    if value is _MISSING:
        return None
    if config.overrides and _lookup(config.overrides, path) is not _MISSING:
        return None  # the command line set it: the key is what the user typed
    for file in reversed(config.files):
        found = file_line(file, path)
        if found is not None:
            line, in_file = found
            return f"{file}:{line}" if _same(in_file, value) else None
    return None


def source_of(config, path) -> str | None:
    """Where the value at key path `path` of a LoadedConfig came from: `file:line`, `--config`,
    or None (a default, a value merged from several files, not a loaded config)."""
    source = value_source(config, path)
    if source is None and _set_on_command_line(config, tuple(path)):
        return "--config"
    return source


def _set_on_command_line(config, path) -> bool:
    """Whether `--config` set the value at `path` of a LoadedConfig, or replaced a value above it
    (a list, a number: only mappings merge, so a mapping may hold the files' keys too)."""
    overrides = getattr(config, "overrides", None) or {}
    for end in range(1, len(path) + 1):
        value = _lookup(overrides, path[:end])
        if value is _MISSING:
            return False
        if not isinstance(value, dict):
            return True
    return False


# A message's leading key: `models.x.path: ...`, `analysis.text_sets.val.models[0]: ...`
_LEADING_KEY = re.compile(r"^([A-Za-z0-9_.\-]+(?:\[\d+\])*(?:\.[A-Za-z0-9_.\-]+(?:\[\d+\])*)*): ")


def key_path(config, text: str) -> tuple | None:
    """The key path a dotted key names in `config` (names may hold dots: the longest key that
    matches wins), or None."""
    path, node, rest = [], config, text
    while rest:
        if rest.startswith("["):
            match = re.match(r"\[(\d+)\]", rest)
            if not match or not isinstance(node, list) or int(match[1]) >= len(node):
                return None
            path.append(int(match[1]))
            node, rest = node[int(match[1])], rest[match.end() :]
        else:
            if not isinstance(node, dict):
                return None
            keys = [
                k
                for k in node
                if isinstance(k, str) and re.match(re.escape(k) + r"($|[.\[])", rest)
            ]
            if not keys:
                return None
            key = max(keys, key=len)
            path.append(key)
            node, rest = node[key], rest[len(key) :]
        rest = rest[1:] if rest.startswith(".") else rest
    return tuple(path)


def with_source(config, message: str) -> str:
    """`message` (a ConfigError's, starting with a key) with `(in file:line)` appended where the
    key's value came from a file of `config` (a LoadedConfig), `(in --config)` where the command
    line set it (or replaced a list or value above it); unchanged otherwise."""
    match = _LEADING_KEY.match(message)
    if not match or " (in " in message.splitlines()[0]:
        return message
    path = key_path(config, match[1])
    source = source_of(config, path) if path else None
    if source is None:
        return message
    first, _, rest = message.partition("\n")
    return f"{first} (in {source})" + (f"\n{rest}" if rest else "")
