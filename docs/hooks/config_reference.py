"""MkDocs hook: the config key reference page (docs/config-reference.md), rendered from
config/schema.yaml, so it cannot drift from the schema the workflow validates against. Every key
gets its type, allowed values, the value config/default.yaml gives it and the schema's
`description`; keys that only some variants allow (a model's `kind`) say which.

The page is a committed file, so the docs' links to it work when they are read as files (GitHub,
an editor), not only in the site. `python docs/hooks/config_reference.py --write` rewrites it
after a schema change; without --write it prints the page. The site is built from the schema as
it is, and the build (strict) fails while the committed file is stale, as does
tests/workflow/test_config_reference_file.py.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = "config-reference.md"
NAME = "<name>"  # a key of a map whose keys the user chooses (models, sweeps, text sets, fits)


class Key:
    def __init__(self, path: str):
        self.path = path
        self.types: list[str] = []
        self.allowed: list[str] = []
        self.description = ""
        self.required = False
        self.conditions: list[str] = []  # the variants that allow the key; empty: always


def _resolve(node: dict, definitions: dict) -> dict:
    """`node` with its $ref's target merged under it (a local description wins)."""
    while isinstance(node, dict) and "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _condition(node: dict) -> str | None:
    """'kind: pretrain' for `if: {properties: {kind: {const: pretrain}}}`."""
    consts = [
        f"{key}: {value['const']}"
        for key, value in (node.get("if") or {}).get("properties", {}).items()
        if isinstance(value, dict) and "const" in value
    ]
    return ", ".join(consts) or None


def _allowed(node: dict) -> list[str]:
    found = []
    if "enum" in node:
        found.append("one of " + ", ".join(f"`{json.dumps(v)}`" for v in node["enum"]))
    if "const" in node:
        found.append(f"`{json.dumps(node['const'])}`")
    for key, sign in (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
    ):
        if key in node:
            found.append(f"`{sign} {node[key]}`")
    if "pattern" in node:
        found.append(f"matches `{node['pattern']}`")
    if "default" in node:  # the value the code uses when a config omits the key
        found.append(f"omitted: `{json.dumps(node['default'])}`")
    return found


def _types(node: dict, definitions: dict) -> list[str]:
    kinds = node.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    if not kinds and node.get("enum") and all(isinstance(v, str) for v in node["enum"]):
        kinds = ["string"]
    if "array" in kinds and isinstance(node.get("items"), dict):
        item = _resolve(node["items"], definitions)  # `items: {$ref: ...}` names its type there
        inner = item.get("type") or ("string" if "enum" in item else None)
        if inner:
            kinds[kinds.index("array")] = f"array of {inner}"
    return kinds


class Walker:
    def __init__(self, schema: dict):
        self.definitions = schema.get("definitions", {})
        self.keys: dict[str, Key] = {}

    def walk(self, node, path: str, required=False, conditions=()) -> None:
        node = _resolve(node, self.definitions)
        if not isinstance(node, dict):
            return
        if path:
            key = self.keys.get(path)
            created = key is None
            if created:
                key = self.keys[path] = Key(path)
                key.conditions = list(conditions)
            elif key.conditions and conditions:
                key.conditions += [c for c in conditions if c not in key.conditions]
            elif not conditions:
                key.conditions = []  # also allowed unconditionally
            if conditions and "const" in node and any(a.startswith("one of") for a in key.allowed):
                node = {k: v for k, v in node.items() if k != "const"}  # a branch's own value
            for kind in _types(node, self.definitions):
                if kind not in key.types:
                    key.types.append(kind)
            key.allowed += [a for a in _allowed(node) if a not in key.allowed]
            key.description = key.description or " ".join(str(node.get("description", "")).split())
            # a branch's `required` of a key listed outside it is a condition, not the key's own
            key.required = key.required or (required and (created or not conditions))
        prefix = f"{path}." if path else ""
        needed = set(node.get("required", []))
        for name, child in node.get("properties", {}).items():
            self.walk(child, prefix + name, name in needed, conditions)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            self.walk(extra, prefix + NAME, False, conditions)
        items = node.get("items")
        if isinstance(items, dict) and _resolve(items, self.definitions).get("properties"):
            item = _resolve(items, self.definitions)
            self.walk(
                {"properties": item["properties"], "description": item.get("description", "")},
                path + "[]",
            )
        for part in node.get("allOf", []):
            self.walk_part(part, path, conditions)
        for part in node.get("oneOf", []) + node.get("anyOf", []):
            self.walk_part(part, path, conditions)
        if "if" in node:
            condition = _condition(node)
            branch = (*conditions, condition) if condition else tuple(conditions)
            if "then" in node:
                self.walk_part(node["then"], path, branch)
            if "else" in node:
                self.walk_part(node["else"], path, conditions)

    def walk_part(self, part, path, conditions) -> None:
        """A subschema that adds keys to `path` itself (allOf, oneOf, if/then/else)."""
        part = _resolve(part, self.definitions)
        if not isinstance(part, dict):
            return
        if path in self.keys:  # `pretrain: {allOf: [train_settings, ...]}` has its type here
            key = self.keys[path]
            key.types += [kind for kind in _types(part, self.definitions) if kind not in key.types]
            text = " ".join(str(part.get("description", "")).split())
            if text:  # a variant's own description: what the key is in that variant
                said = f"with {_conditions_text(list(conditions))}: {text}" if conditions else text
                key.description = f"{key.description} {said}".strip()
        needed = set(part.get("required", []))
        prefix = f"{path}." if path else ""
        if not conditions:  # `allOf: [{$ref: ...}, {required: [...]}]` requires the ref's keys
            for name in needed:
                if prefix + name in self.keys:
                    self.keys[prefix + name].required = True
        for name, child in part.get("properties", {}).items():
            if prefix + name in self.keys and not conditions:
                continue  # a constraint on a key already listed (required when ...), not a key
            self.walk(child, prefix + name, name in needed, conditions)
        extra = part.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            self.walk(extra, prefix + NAME, False, conditions)
        for sub in part.get("allOf", []) + part.get("oneOf", []) + part.get("anyOf", []):
            self.walk_part(sub, path, conditions)
        if "if" in part:
            condition = _condition(part)
            branch = (*conditions, condition) if condition else tuple(conditions)
            if "then" in part:
                self.walk_part(part["then"], path, branch)
            if "else" in part:
                self.walk_part(part["else"], path, conditions)


def default_value(config: dict, path: str):
    node = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None, False
        node = node[part]
    return node, True


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _prose(text: str) -> str:
    """Descriptions name placeholders such as <name>_s<seed>: text, not HTML tags (code spans
    show < as it is)."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def _conditions_text(conditions: list[str]) -> str:
    """['kind: pretrain', 'kind: hf'] -> 'kind: pretrain or hf'."""
    values: dict[str, list[str]] = {}
    for condition in conditions:
        for part in condition.split(", "):
            key, _, value = part.partition(": ")
            values.setdefault(key, []).append(value)
    return "; ".join(f"{key}: {' or '.join(vals)}" for key, vals in values.items())


LONGEST_DEFAULT = 120  # characters of a default shown in full (longer: cut, marked …)


def _key_name(path: str) -> str:
    """The key as code that breaks only after a dot (docs/stylesheets/extra.css keeps the
    characters between together): `data.<wbr>docstrings.<wbr>min_ascii_fraction`."""
    escaped = path.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return '<code class="config-key">' + escaped.replace(".", ".<wbr>") + "</code>"


def _default_text(value) -> str:
    """The default as its JSON value (lists too), cut past LONGEST_DEFAULT characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if len(text) > LONGEST_DEFAULT:
        text = text[: LONGEST_DEFAULT - 1] + "…"
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f'<code class="config-value">{escaped}</code>'  # breaks at its spaces only


def render(schema: dict, default: dict) -> str:
    walker = Walker(schema)
    walker.walk({k: v for k, v in schema.items() if k != "definitions"}, "")
    sections: dict[str, list[Key]] = {}
    for key in walker.keys.values():
        sections.setdefault(key.path.split(".")[0], []).append(key)
    lines = [
        "---",
        "hide:",
        "  - toc",
        "---",
        "",
        "# Config key reference",
        "",
        "Every key of a config, generated from `config/schema.yaml` by "
        "`python docs/hooks/config_reference.py --write` (the schema is what "
        "`depthlab.config` validates against; cross-references between "
        "sections are checked in Python). `<name>` stands for a name you choose (a model, a "
        "sweep, a text set, a fit); `[]` for each item of a list. *default.yaml* is the value "
        "`config/default.yaml` gives the key; each description starts with the key's type and "
        "allowed values. See [Configs and overrides](configs.md) for how configs merge and how "
        "to override a key.",
        "",
    ]
    for section, keys in sections.items():
        lines += [f"## `{section}`", ""]
        lines += ["| key | default.yaml | description |", "|---|---|---|"]
        for key in keys:
            value, present = default_value(default, key.path)
            shown = _default_text(value) if present and not isinstance(value, dict) else ""
            kind = " or ".join(key.types) or "any"
            allowed = "; ".join(key.allowed)
            facts = f"*{kind}*" + (f", {allowed}" if allowed else "")
            if key.required:
                facts += ", required"
            description = key.description.strip()
            if key.conditions:
                description = f"*only with {_conditions_text(key.conditions)}.* {description}"
            lines.append(
                "| "
                + " | ".join(
                    _cell(c)
                    for c in (_key_name(key.path), shown, f"{facts}: {_prose(description)}")
                )
                + " |"
            )
        lines.append("")
    return "\n".join(lines)


def page_text(root: Path = ROOT) -> str:
    sys.path.insert(0, str(root / "workflow_scripts"))
    from depthlab.config.load import schema_document  # enums filled in from the registries

    schema = schema_document(root / "config" / "schema.yaml")
    default = yaml.safe_load((root / "config" / "default.yaml").read_text())
    return render(schema, default)


def stale_message(root: Path = ROOT) -> str | None:
    """Why the committed page is not the one the schema gives (None: it is current)."""
    path = root / "docs" / PAGE
    if not path.is_file():
        return f"docs/{PAGE} is missing: run `python docs/hooks/config_reference.py --write`"
    if path.read_text(encoding="utf-8") != page_text(root):
        return (
            f"docs/{PAGE} is not what config/schema.yaml gives: run "
            "`python docs/hooks/config_reference.py --write` and commit it"
        )
    return None


def on_files(files, config):
    """Serve the page rendered from the schema as it is, and warn (a strict build fails) when the
    committed file is stale (mkdocs hook)."""
    from mkdocs.structure.files import File

    problem = stale_message()
    if problem:
        logging.getLogger("mkdocs.hooks.config_reference").warning(problem)
    committed = files.get_file_from_path(PAGE)
    if committed is not None:
        files.remove(committed)
    files.append(File.generated(config, PAGE, content=page_text()))
    return files


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        (ROOT / "docs" / PAGE).write_text(page_text(), encoding="utf-8")
        print(f"wrote docs/{PAGE}")
    else:
        print(page_text(), end="")
