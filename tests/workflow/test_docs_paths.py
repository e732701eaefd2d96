"""Docs that cannot drift: every repository path and every depthlab module (or name in one) that
the README, docs/, the rules, the configs, the library's docstrings, comments and messages (every
string constant: an error message's words too), or the benchmarks and their notes (bench/*.md)
name exists. A path is a token starting with one of the repository's top folders
(`workflow_scripts/...`, `config/...`, `docs/...`) or a library path (`depthlab/plan/...`, below
workflow_scripts/); a module a dotted `depthlab.x.y[.name]`, checked by importing it (a name
re-exported by a module counts). Paths a user creates (their own
configs under config/local/, a calibration overlay they write) are examples, listed in
USER_PATHS; results/ and docs/results/ hold what commands write (a run's outputs, the recorded
results pages, which mkdocs --strict checks where a page links them) and are not checked."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOP_FOLDERS = ("workflow_scripts", "config", "rules", "bench", "docs", "tests", "profiles", "slurm")
PATH = re.compile(rf"(?<![\w/.-])((?:{'|'.join(TOP_FOLDERS)}|\.ci)/[\w./-]*\w)")
# a library path as the docs and messages write it, below workflow_scripts/ (not a cache folder's
# .../depthlab/syntax: a path part before it); a file (`depthlab/cli.py`) or a folder with a
# part below it or a slash after it (`depthlab/plan/`), not the ratio "depthlab/plain"
LIBRARY_PATH = re.compile(r"(?<![\w/.~$-])(depthlab/(?:[\w.-]+/[\w./-]*\w|[\w-]+\.\w+|\w+(?=/)))")
MODULE = re.compile(r"(?<![\w./])(depthlab(?:\.\w+)+)")
# Paths that name what a user writes, not what the repository holds.
USER_PATHS = re.compile(r"^(config/(local(/.*)?|mine\.yaml|calibrated/.*)|docs/results/.*)$")


def named_texts(repo: Path):
    """(file, text) of every place whose words name paths: the prose files whole, and of the
    Python files their string constants and comments."""
    prose = [
        repo / "README.md",
        *sorted((repo / "docs").rglob("*.md")),
        *sorted((repo / "bench").glob("*.md")),
        *sorted(p for p in (repo / "rules").rglob("*") if p.is_file()),
        *sorted((repo / "config").rglob("*.yaml")),
        *sorted((repo / "workflow_scripts").rglob("*.yaml")),
    ]
    for path in prose:
        if "results" not in path.relative_to(repo).parts[:2]:
            yield path, path.read_text()
    for path in sorted(
        [*(repo / "workflow_scripts").rglob("*.py"), *(repo / "bench").glob("*.py")]
    ):
        source = path.read_text()
        strings = [
            node.value
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        yield path, "\n".join(strings + re.findall(r"#.*", source))


def module_exists(dotted: str) -> bool:
    """Whether `dotted` is a depthlab module, or a name its longest importable prefix has."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def stale_names(repo: Path) -> list[str]:
    stale = set()
    for path, text in named_texts(repo):
        where = path.relative_to(repo)
        for pattern, base in ((PATH, repo), (LIBRARY_PATH, repo / "workflow_scripts")):
            for match in pattern.finditer(text):
                named = match.group(1).rstrip(".")
                placeholder = re.match(r"[./]?[<*{]", text[match.end() :])  # stages/<stage>.py
                if placeholder or any(mark in named for mark in "<*{") or USER_PATHS.match(named):
                    continue  # a pattern or a placeholder, or a path a user writes
                if not (base / named).exists():
                    stale.add(f"{where}: {named}")
        for match in MODULE.finditer(text):
            if not module_exists(match.group(1)):
                stale.add(f"{where}: {match.group(1)}")
    return sorted(stale)


def test_every_named_path_and_module_exists():
    assert stale_names(REPO) == []


@pytest.mark.parametrize(
    ("file", "planted", "expected"),
    [
        ("docs/stages.md", "See workflow_scripts/no_such.py.", "workflow_scripts/no_such.py"),
        (
            "workflow_scripts/depthlab/core/errors.py",
            "# see depthlab.core.nowhere\n",
            "depthlab.core.nowhere",
        ),
        ("README.md", "`depthlab.core.errors.NoSuchError`", "depthlab.core.errors.NoSuchError"),
        # the stale names issue 50 found: a library path in an error message, a module a
        # benchmark's notes name
        (
            "workflow_scripts/depthlab/plan/resource_plan.py",
            'raise ValueError(f"{hub_id}: not in depthlab/hub_architectures.yaml")\n',
            "depthlab/hub_architectures.yaml",
        ),
        (
            "bench/RESULTS.md",
            "the `depthlab.training.pretrain` calls",
            "depthlab.training.pretrain",
        ),
    ],
)
def test_a_planted_stale_name_is_found(tmp_path, file, planted, expected):
    copy = tmp_path / "repo"
    shutil.copytree(
        REPO,
        copy,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "results", ".snakemake", "site", "__pycache__"
        ),
    )
    target = copy / file
    target.write_text(target.read_text() + "\n" + planted)
    assert f"{file}: {expected}" in stale_names(copy)
