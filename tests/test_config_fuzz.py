"""Fuzz the config: random mutants of config/test.yaml (type changes, deletions, out-of-range
numbers, odd strings in names and paths) are either accepted and build the DAG, or rejected before
any job with a ConfigError whose message starts with the offending key; never a traceback."""

import copy
import random
import re
import subprocess
from collections import Counter
from pathlib import Path

import yaml
from depthlab.config import ConfigError, load_config, resolve
from local_snakemake import SNAKEMAKE, local_env

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = 400
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
KEY_PATH = re.compile(
    r"^(\(top level\)|run_name|seed|data|models|sweeps|pretrain|figures|scaling|"
    r"toy|analysis|resources|cluster|pruning|depth_use|tracking)[.\[:]"
)


def leaves(node, path=()):
    """Every (path, value) in the config, mappings and lists included."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from leaves(value, path + (index,))


def mutate(config: dict, rng: random.Random) -> tuple[dict, str]:
    mutant = copy.deepcopy(config)
    path, value = rng.choice([item for item in leaves(mutant) if item[0]])
    parent = mutant
    for part in path[:-1]:
        parent = parent[part]
    kind = rng.choice(["delete", "type", "number", "string", "rename"])
    if kind == "delete":
        del parent[path[-1]]
    elif kind == "type":
        parent[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
    elif kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        parent[path[-1]] = rng.choice([0, -value, value * 1000, value + 0.5, -1])
    elif kind == "rename" and isinstance(parent, dict):
        parent[rng.choice(ODD_STRINGS)] = parent.pop(path[-1])
    else:
        kind = "string"
        parent[path[-1]] = rng.choice(ODD_STRINGS)
    return mutant, kind


def test_random_mutants_are_accepted_or_rejected_by_key(tmp_path):
    base = load_config(ROOT / "config" / "test.yaml")
    rng = random.Random(0)
    outcomes, accepted = Counter(), []
    for _ in range(MUTANTS):
        mutant, kind = mutate(base, rng)
        try:
            resolve(mutant)
        except ConfigError as error:
            message = str(error)
            assert KEY_PATH.match(message), f"{kind} mutant: message names no key: {message}"
            outcomes[(kind, "rejected")] += 1
        else:
            outcomes[(kind, "accepted")] += 1
            accepted.append(mutant)
    print(dict(sorted(outcomes.items())))
    assert sum(v for (_, result), v in outcomes.items() if result == "rejected") > MUTANTS / 4
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
