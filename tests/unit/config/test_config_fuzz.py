"""Fuzz the config: random mutants of config/test.yaml with a fine-tuning section (type changes,
deletions, out-of-range numbers, odd strings in names and paths) are either accepted and build the
DAG, or rejected before any job with a ConfigError that names the mutated key; never a
traceback."""

import copy
import json
import random
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from depthlab.config import ConfigError, load_config, resolve
from local_snakemake import SNAKEMAKE, local_env

ROOT = Path(__file__).resolve().parents[3]
MUTANTS = 400
FINETUNE_MUTANTS = 200
ODD_STRINGS = [
    "",
    "..",
    "../../escape",
    "a b",
    "$(touch pwned)",
    "`id`",
    "x;y",
    "ü",
    "x" * 300,
    "/abs/path",
    "-rf",
    "{model}",
    "*",
    "null",
    "1e3",
]
ODD_VALUES = [None, True, 0, -1, 16.0, 1e12, -0.5, [], {}, [1, 2], {"a": 1}, "many"]


def base_config() -> dict:
    """config/test.yaml plus config/default.yaml's fine-tuning section, fitted to the test models
    (32 positions), through JSON: YAML anchors would otherwise share one object between keys, so
    that one mutation changes several keys."""
    config = load_config(ROOT / "config" / "test.yaml")
    default = load_config(ROOT / "config" / "default.yaml")
    config["finetune"] = default["finetune"]
    config["resources"]["finetune"] = default["resources"]["finetune"]
    config["finetune"]["train"]["seq_len"] = config["pretrain"]["seq_len"]
    config["finetune"]["data"]["tasks"].update(
        context_tokens=12, words={"word_order": 4, "continuation": 1}
    )
    return json.loads(json.dumps(config))


def key_path(path) -> str:
    """A key path as ConfigError messages write it: section.sub.key, list items as key[i]."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def lookup(config, path):
    node = config
    for part in path:
        node = node[part]
    return node


LEADING_KEY = re.compile(r"^([^\s:\[]+(?:\[\d+\])*(?:\.[^\s:.\[]+(?:\[\d+\])*)*):")


def leading_value(message: str, config: dict):
    """The value, in `config`, of the key path a message starts with (None when none)."""
    match = LEADING_KEY.match(message)
    if not match:
        return None
    path = [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", match.group(1))]
    try:
        return lookup(config, path)
    except (KeyError, IndexError, TypeError):
        return None


def leaves(node, path=()):
    """Every (path, value) in the config, mappings and lists included."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from leaves(value, path + (index,))


class Mutant(NamedTuple):
    config: dict
    kind: str
    path: tuple  # the mutated key or list item
    new_name: str | None = None  # a renamed key's new name


def change(config: dict, kind: str, path: tuple, value=None) -> Mutant:
    """`config` with the key (or list item) at `path` deleted, set to `value` or, for a rename,
    moved to the key `value`."""
    mutant = copy.deepcopy(config)
    parent = lookup(mutant, path[:-1])
    if kind == "delete":
        del parent[path[-1]]
    elif kind == "rename":
        parent[value] = parent.pop(path[-1])
        return Mutant(mutant, kind, path, value)
    else:
        parent[path[-1]] = copy.deepcopy(value)
    return Mutant(mutant, kind, path)


def mutate(config: dict, rng: random.Random, under: tuple = ()) -> Mutant:
    """One random change of one key (or list item) at or below `under`."""
    candidates = [item for item in leaves(config) if len(item[0]) > len(under)]
    path, value = rng.choice([item for item in candidates if item[0][: len(under)] == under])
    parent = lookup(config, path[:-1])
    kind = rng.choice(["delete", "type", "number", "string", "rename"])
    if kind == "delete":
        return change(config, kind, path)
    if kind == "type":
        return change(config, kind, path, rng.choice(ODD_VALUES))
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return change(config, kind, path, rng.choice([0, -value, value * 1000, value + 0.5, -1]))
    if kind == "rename" and isinstance(parent, dict):
        return change(config, kind, path, rng.choice(ODD_STRINGS))
    return change(config, "string", path, rng.choice(ODD_STRINGS))


def changed_key(mutant: Mutant) -> tuple:
    """The key a mutation changed: a list item stands for its list (an index is no key name),
    and a deletion that empties a mapping for that mapping (the error is that it is empty)."""
    path = list(mutant.path)
    while path and isinstance(path[-1], int):
        path.pop()
    if mutant.kind == "delete" and len(path) == len(mutant.path) > 1:
        if not lookup(mutant.config, mutant.path[:-1]):
            path.pop()
    return tuple(path)


def cites(message: str, path: tuple) -> bool:
    """Whether a message cites the key at `path` (or a key below it) by its dotted path."""
    return bool(path) and bool(
        re.search(rf"(?<![\w.\[-]){re.escape(key_path(path))}(?![\w-])", message)
    )


def names_the_key(message: str, mutant: Mutant) -> bool:
    """Whether a rejection's message names what the mutation changed: the key's dotted path
    (leading the message or cited in it); or the key's name quoted, either with the path of the
    mapping holding it ('kind' is a required property, unknown key '..') or as the value of the
    key the message leads with (a reference to a deleted or renamed key: analysis.models[0]:
    'pre_ln' is not a declared model); or, for a model's shape, the resource it outgrew."""
    key = changed_key(mutant)
    if cites(message, key) or sized_model_named(message, key):
        return True
    if not isinstance(mutant.path[-1], str):
        return False
    names = [mutant.path[-1]] + ([mutant.new_name] if mutant.new_name is not None else [])
    quoted = [name for name in names if f"'{name}'" in message]
    parent = mutant.path[:-1]
    if quoted and (cites(message, parent) or not parent and message.startswith("(top level):")):
        return True
    value = leading_value(message, mutant.config)
    return any(value == name or (isinstance(value, list) and name in value) for name in quoted)


def sized_model_named(message: str, key: tuple) -> bool:
    """Resource sizing (depthlab.plan.resource_plan) reads a model's shape: a mutated shape may be
    rejected as a resource too small for that model, an error that leads with the resource and
    names the model (the two things to change)."""
    if not message.startswith("resources.") or len(key) < 2 or key[0] not in ("models", "sweeps"):
        return False
    model = re.escape(str(key[1])) + (r"_l\d+_m\d+(_s\d+)?" if key[0] == "sweeps" else "")
    return re.search(rf"(?<![\w.-]){model}(?![\w.-])", message) is not None


def check_mutant(mutant: Mutant) -> bool:
    """Resolve a mutant: True when accepted, False when rejected by a ConfigError that names
    the mutated key (an assertion error when the message does not)."""
    try:
        resolve(mutant.config)
    except ConfigError as error:
        message = str(error)
        assert names_the_key(message, mutant), (
            f"{mutant.kind} mutant of {key_path(mutant.path)}: the message names neither the "
            f"key nor its path: {message}"
        )
        return False
    return True


def check_mutants(base: dict, rng: random.Random, count: int, under: tuple = ()):
    """Resolve `count` mutants: every rejection must name its key. The counts by (kind,
    outcome) and the accepted mutants."""
    outcomes, accepted = Counter(), []
    for _ in range(count):
        mutant = mutate(base, rng, under)
        if check_mutant(mutant):
            outcomes[(mutant.kind, "accepted")] += 1
            accepted.append(mutant.config)
        else:
            outcomes[(mutant.kind, "rejected")] += 1
    print(dict(sorted(outcomes.items())))
    assert sum(v for (_, result), v in outcomes.items() if result == "rejected") > count / 4
    return accepted


def test_random_mutants_are_accepted_or_rejected_by_key(tmp_path):
    rng = random.Random(0)
    accepted = check_mutants(base_config(), rng, MUTANTS)
    # accepted mutants build the DAG (a sample: each dry run starts Snakemake, ~7 s)
    for index, mutant in enumerate(rng.sample(accepted, min(2, len(accepted)))):
        workdir = tmp_path / f"accepted{index}"
        workdir.mkdir()
        (workdir / "c.yaml").write_text(yaml.safe_dump(mutant))
        result = subprocess.run(
            [
                SNAKEMAKE,
                "-n",
                "--cores",
                "1",
                "--snakefile",
                str(ROOT / "Snakefile"),
                "--directory",
                str(workdir),
                f"--configfile={workdir / 'c.yaml'}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=local_env(),
        )
        assert result.returncode == 0, (result.stdout + result.stderr)[-2000:]


def test_finetune_mutants_are_accepted_or_rejected_by_key():
    # the fine-tuning section on its own: the whole-config fuzz changes it only now and then
    check_mutants(base_config(), random.Random(1), FINETUNE_MUTANTS, under=("finetune",))


# Mutants the fuzz found (other seeds) whose message named another key, or that raised a
# traceback, before the config validation was fixed: kept whatever the seeds above draw.
FOUND = {
    "unknown kind": ("type", ("models", "pre_ln", "kind"), "many", False),
    "missing source": ("rename", ("analysis", "text_sets", "val", "source"), "sorce", False),
    "figure format": ("delete", ("figures", "format"), None, False),
    "speed grid": ("delete", ("pruning", "speed", "n_grid"), None, False),
    "default bounds": ("delete", ("scaling", "fit", "exponent_bounds"), None, True),
    "default offset": ("number", ("scaling", "fit", "depth_offset"), 0.5, False),
    "default warmup": ("number", ("pretrain", "warmup_steps"), 2000, False),
    "default micro batch": ("number", ("pretrain", "micro_batch_size"), 3, False),
    "train examples": ("type", ("finetune", "data", "tasks", "train_examples"), {}, False),
    "sweep depth": ("delete", ("sweeps", "depth_width", "depths", 0), None, False),
    "no sweeps": ("delete", ("sweeps",), None, False),
    "task words": ("number", ("pruning", "tasks", "words", "word_order"), 4000, False),
    "finetune words": (
        "number",
        ("finetune", "data", "tasks", "words", "continuation"),
        1000,
        False,
    ),
    "long file name": ("string", ("scaling", "fits", "chinchilla_liu", "source"), "x" * 300, False),
}


@pytest.mark.parametrize("found", sorted(FOUND))
def test_mutants_found_by_the_fuzz_name_their_key(found):
    kind, path, value, accepted = FOUND[found]
    assert check_mutant(change(base_config(), kind, path, value)) == accepted
