"""require_pinned (requirements_helpers.py): a pinned package that does not import skips its test
outside CI and fails it in CI; every test uses it for its pinned packages, with a pinned name."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
from requirements_helpers import pinning_file, require_pinned

TESTS = Path(__file__).resolve().parents[1]  # tests/: the helpers and every test folder
ABSENT = "depthlab_no_such_module"
# a package that does not import, inside a test and at module level (a test file's
# `gguf = require_pinned("gguf")`): (the file, what a CI run reports)
CASES = {
    "inside a test": (
        f"from requirements_helpers import require_pinned\n\n\n"
        f"def test_uses_it():\n    require_pinned({ABSENT!r})\n",
        r"\b1 failed\b",
    ),
    "module level": (
        f"from requirements_helpers import require_pinned\n\n"
        f"absent = require_pinned({ABSENT!r})\n\n\n"
        f"def test_uses_it():\n    pass\n",
        r"\b1 error\b",  # a collection error: the whole run stops
    ),
}


def test_a_module_that_imports_is_returned():
    assert require_pinned("numpy") is numpy


def test_a_missing_module_skips_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"{ABSENT} .* does not import"):
        require_pinned(ABSENT)


@pytest.mark.parametrize("value", ["true", "1"])
def test_a_missing_module_fails_in_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match=f"CI={value}: {ABSENT} .* does not import"):
        require_pinned(ABSENT)
    with pytest.raises(pytest.fail.Exception, match=f"CI={value}: {ABSENT} .* does not exist"):
        require_pinned(ABSENT, load=False)


def test_a_package_of_files_is_found_without_importing_it(monkeypatch):
    # a spec, not the module: nothing of it runs
    monkeypatch.delitem(sys.modules, "gguf", raising=False)
    assert require_pinned("gguf", load=False).name == "gguf"
    assert "gguf" not in sys.modules


def run_pytest(folder: Path, ci: str | None) -> subprocess.CompletedProcess:
    dropped = ("CI", "PYTEST_ADDOPTS")
    env = {k: v for k, v in os.environ.items() if k not in dropped} | {"PYTHONPATH": str(TESTS)}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
        + ["-rs", str(folder)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_under_ci_fails_where_it_would_skip(case, tmp_path):
    text, reported = CASES[case]
    (tmp_path / "test_pinned.py").write_text(text)
    outside = run_pytest(tmp_path, None)
    # 5: the module skipped whole, so no test was collected
    assert outside.returncode in (0, 5), outside.stdout + outside.stderr
    assert re.search(r"\b1 skipped\b", outside.stdout), outside.stdout
    inside = run_pytest(tmp_path, "true")
    assert inside.returncode in (1, 2), inside.stdout + inside.stderr  # failed / interrupted
    assert re.search(reported, inside.stdout), inside.stdout
    assert "skipped" not in inside.stdout
    assert f"CI=true: {ABSENT} " in inside.stdout, inside.stdout


def test_every_test_imports_pinned_packages_through_the_helper():
    calls, skips = [], []
    for path in sorted(TESTS.rglob("*.py")):
        text = path.read_text()
        calls += [(path.name, m) for m in re.findall(r"require_pinned\(\"([\w.]+)\"", text)]
        if path.name not in (Path(__file__).name, "requirements_helpers.py") and (
            "importorskip(" in text
        ):
            skips.append(path.name)
    assert skips == [], f"pytest.importorskip in {skips}: use requirements_helpers.require_pinned"
    assert len(calls) >= 4
    unpinned = [(name, module) for name, module in calls if pinning_file(module) is None]
    assert unpinned == [], "require_pinned of a package no requirements file pins"
