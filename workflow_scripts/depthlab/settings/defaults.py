"""The defaults of optional config keys, read from config/schema.yaml: a key's `default:` there is
the one place its value is written, and the code that fills in an omitted key reads it with
`default(...)` instead of restating it. (JSON Schema does not apply defaults itself; the loader
does not fill them in either, so a config that omits a key keeps its job specs as they were.)

    default("pruning", "retokenize", "val_tokens")   -> 1000000
    defaults("pruning", "retokenize")                -> {"val_tokens": 1000000, "train_tokens": ...}
"""

from __future__ import annotations

import copy
import functools

import yaml

from depthlab.core.repo_files import SCHEMA as SCHEMA_PATH


@functools.cache
def _schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))


def schema() -> dict:
    """config/schema.yaml as written (a copy; parsed once per process)."""
    return copy.deepcopy(_schema())


def _resolve(node: dict) -> dict:
    """A schema node with its `$ref` and `allOf` parts merged in (their properties too)."""
    parts = [node]
    while True:
        refs = [part for part in parts if "$ref" in part or "allOf" in part]
        if not refs:
            break
        expanded = []
        for part in parts:
            if "$ref" in part:
                name = part["$ref"].removeprefix("#/definitions/")
                expanded.append({k: v for k, v in part.items() if k != "$ref"})
                expanded.append(_schema()["definitions"][name])
            elif "allOf" in part:
                expanded.append({k: v for k, v in part.items() if k != "allOf"})
                expanded.extend(part["allOf"])
            else:
                expanded.append(part)
        parts = expanded
    merged: dict = {}
    for part in parts:
        for key, value in part.items():
            if key == "properties":
                merged.setdefault("properties", {}).update(value)
            else:
                merged.setdefault(key, value)
    return merged


def _node(keys: tuple[str, ...]) -> dict:
    node = _resolve(_schema())
    for index, key in enumerate(keys):
        properties = node.get("properties", {})
        if key not in properties:
            where = ".".join(keys[: index + 1])
            raise KeyError(f"{where}: not a key of {SCHEMA_PATH.name}")
        node = _resolve(properties[key])
    return node


def default(*keys: str):
    """The `default:` config/schema.yaml states for the key `keys` (a copy: callers may change
    it); KeyError when the schema states none."""
    node = _node(keys)
    if "default" not in node:
        raise KeyError(f"{'.'.join(keys)}: {SCHEMA_PATH.name} states no default")
    return copy.deepcopy(node["default"])


def defaults(*keys: str) -> dict:
    """{key: default} of every key of the mapping at `keys` whose schema states a default."""
    properties = _node(keys).get("properties", {})
    return {
        name: copy.deepcopy(_resolve(node)["default"])
        for name, node in properties.items()
        if "default" in _resolve(node)
    }
