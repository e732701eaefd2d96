"""One block in one place: a key that several sections of config/schema.yaml declare word for word
(the LoRA keys of healing and of fine-tuning, `device`, a hub `revision`, ...) is one entry of its
`definitions`, which each section names with `$ref`. Before, 30 property blocks were written two
to six times. Everything that reads the schema follows the `$ref`s: the config key reference
shows each key as if its block were written in place, and the defaults reader finds a default
behind one."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
from collections import defaultdict

import yaml
from depthlab.config.load import REPO_ROOT, schema_document
from depthlab.settings import defaults as schema_defaults

SCHEMA = REPO_ROOT / "config" / "schema.yaml"


def restated_blocks(schema: dict) -> dict:
    """{(key, block) fingerprint: the paths declaring it} for every property block declared more
    than once. A bare `{$ref: ...}` is the shared form, not a restatement; an `if:` holds
    conditions (`kind: {const: pretrain}`), not declarations."""
    found = defaultdict(list)

    def walk(node, path: str, in_condition: bool) -> None:
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict) and not in_condition:
                for name, block in properties.items():
                    if isinstance(block, dict) and set(block) != {"$ref"}:
                        text = json.dumps([name, block], sort_keys=True)
                        found[hashlib.sha256(text.encode()).hexdigest()].append(f"{path}.{name}")
            for key, value in node.items():
                walk(value, f"{path}/{key}", in_condition or key == "if")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]", in_condition)

    walk(schema, "", False)
    return {key: paths for key, paths in found.items() if len(paths) > 1}


def expanded(node, definitions: dict):
    """`node` with every `$ref` replaced by the block it names (its own keys kept over it)."""
    if isinstance(node, dict):
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            rest = {key: value for key, value in node.items() if key != "$ref"}
            return expanded({**target, **rest}, definitions)
        return {key: expanded(value, definitions) for key, value in node.items()}
    if isinstance(node, list):
        return [expanded(value, definitions) for value in node]
    return node


def inlined(schema: dict) -> dict:
    """The schema as if no block were shared: every `$ref` written out, no definitions."""
    rest = {key: value for key, value in schema.items() if key != "definitions"}
    return expanded(rest, schema["definitions"])


def test_no_property_block_is_declared_twice():
    restated = restated_blocks(yaml.safe_load(SCHEMA.read_text()))
    assert not restated, (
        f"{len(restated)} property block(s) of config/schema.yaml written more than once; make "
        "each a `definitions` entry and name it with $ref: "
        + "; ".join(", ".join(paths) for paths in restated.values())
    )


def test_the_check_finds_a_restated_block():
    schema = yaml.safe_load(SCHEMA.read_text())
    lora = schema["properties"]["finetune"]["properties"]["lora"]["properties"]
    lora["rank"] = copy.deepcopy(schema["definitions"]["lora_rank"])
    healing = schema["properties"]["pruning"]["properties"]["healing"]["properties"]
    healing["rank"] = copy.deepcopy(schema["definitions"]["lora_rank"])
    (paths,) = restated_blocks(schema).values()
    assert sorted(paths) == [
        "/properties/finetune/properties/lora.rank",
        "/properties/pruning/properties/healing.rank",
    ]


def test_the_reference_shows_every_shared_key_as_if_written_in_place():
    spec = importlib.util.spec_from_file_location(
        "config_reference", REPO_ROOT / "docs" / "hooks" / "config_reference.py"
    )
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    schema = schema_document()
    default = yaml.safe_load((REPO_ROOT / "config" / "default.yaml").read_text())
    page = hook.render(schema, default)
    assert page == hook.render({**inlined(schema), "definitions": {}}, default)
    for key in ("finetune.<wbr>lora.<wbr>rank", "pruning.<wbr>healing.<wbr>rank"):
        row = f'| <code class="config-key">{key}</code> |'
        shown = page.split(row, 1)[1].split("\n", 1)[0]
        assert "*integer*, `≥ 1`" in shown and shown.endswith(": the LoRA rank |"), shown


def test_a_default_behind_a_ref_is_read(monkeypatch):
    """Every default the inlined schema states at a key path, defaults.default reads from the
    schema as written, $refs and all; a default planted in a shared definition is read at each
    key that names it."""

    def stated(node, path: tuple):
        for name, block in (node.get("properties") or {}).items():
            if "default" in block:
                yield (*path, name), block["default"]
            yield from stated(block, (*path, name))
        for part in node.get("allOf", []):
            yield from stated(part, path)

    found = dict(stated(inlined(schema_defaults.schema()), ()))
    assert found  # the walk reads something
    for path, value in found.items():
        assert schema_defaults.default(*path) == value, path
    planted = copy.deepcopy(schema_defaults.schema())
    planted["definitions"]["lora_dropout"]["default"] = 0.05
    monkeypatch.setattr(schema_defaults, "_schema", lambda: planted)
    assert schema_defaults.default("pruning", "healing", "dropout") == 0.05
    assert schema_defaults.default("finetune", "lora", "dropout") == 0.05
