"""The library's shape: every module lives in a layer's folder, the layers import only downwards
(import-linter's layers contract in pyproject.toml, the one place the order is written), no two
modules import each other even through others (a cycle within a layer, which the layers contract
allows), the planning layer runs without torch, and the size limits of the layout hold."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "workflow_scripts" / "depthlab"
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
LAYERS = next(c for c in CONTRACTS["contracts"] if c["name"] == "depthlab's layers")["layers"]
MAX_MODULES_PER_FOLDER = 15
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 100


def test_every_module_lives_in_a_layer():
    folders = {layer.removeprefix("depthlab.").split(".")[0] for layer in LAYERS}
    outside = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0].removesuffix(".py") not in folders | {"__init__"}
    ]
    assert outside == []


def test_the_layers_contract_holds():
    """lint-imports (import-linter) on the installed package: no module imports a higher layer,
    and no stage package imports another, function-local imports included."""
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    names = [contract["name"] for contract in CONTRACTS["contracts"]]
    assert "no stage imports another" in names
    assert f"Contracts: {len(names)} kept, 0 broken." in result.stdout
    for name in names:
        assert f"{name} KEPT" in result.stdout, name


def test_the_contract_catches_an_upward_import(tmp_path):
    """The same contract on a copy of the package with one planted upward import (core ->
    stages) is broken: the check is not vacuous."""
    copy = tmp_path / "workflow_scripts"
    subprocess.run(["cp", "-r", str(PACKAGE.parent), str(copy)], check=True)
    errors = copy / "depthlab" / "core" / "errors.py"
    errors.write_text(errors.read_text() + "\nfrom depthlab.stages import model_job  # planted\n")
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode != 0 and "depthlab.core.errors -> depthlab.stages" in result.stdout


def lint_copy(tmp_path, plant: dict) -> subprocess.CompletedProcess:
    """lint-imports on a copy of the package with `plant` ({module path: line}) appended."""
    copy = tmp_path / "workflow_scripts"
    tmp_path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-r", str(PACKAGE.parent), str(copy)], check=True)
    for relative, line in plant.items():
        module = copy / "depthlab" / relative
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text((module.read_text() if module.exists() else "") + f"\n{line}\n")
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    return subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
    )


def test_the_stage_contract_catches_a_sibling_import_and_lets_twins_compose(tmp_path):
    """A stage importing another stage (lens_swaps -> depth_use, as the lens job once took the
    clean pass from the skip engine) or a shared module importing a stage breaks the stage
    contract; `twins` importing every stage keeps it."""
    twins = {
        "stages/twins/__init__.py": "",
        "stages/twins/planted.py": "from depthlab.stages import analysis, lens_swaps, pruning",
    }
    kept = lint_copy(tmp_path / "kept", twins)
    assert kept.returncode == 0, kept.stdout[-3000:]
    broken = lint_copy(
        tmp_path / "broken",
        {
            "stages/lens_swaps/stage.py": "from depthlab.stages.depth_use import interventions",
            "stages/model_job.py": "from depthlab.stages.analysis import measures",
        },
    )
    assert broken.returncode != 0
    assert "no stage imports another BROKEN" in broken.stdout
    assert "depthlab.stages.lens_swaps.stage -> depthlab.stages.depth_use" in broken.stdout
    assert "depthlab.stages.model_job -> depthlab.stages.analysis" in broken.stdout
    assert "depthlab's layers KEPT" in broken.stdout


# Every import cycle of the package, TYPE_CHECKING imports included, found with grimp (what
# import-linter builds its graph with): for each import a -> b, a chain from b back to a.
FIND_CYCLES = """
import grimp
graph = grimp.build_graph("depthlab")
cycles = set()
for module in graph.modules:
    for imported in graph.find_modules_directly_imported_by(module):
        chain = graph.find_shortest_chain(importer=imported, imported=module)
        if chain:
            cycles.add(" -> ".join((module, *chain)))
print("\\n".join(sorted(cycles)))
"""


def import_cycles(package_root: Path) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", FIND_CYCLES],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(package_root), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if line]


def test_no_import_cycle():
    assert import_cycles(PACKAGE.parent) == []


def test_a_planted_import_cycle_is_found(tmp_path):
    """The cycle check on a copy of the package in which batches imports training back (as it
    once did, for the settings type) finds that cycle: the check is not vacuous."""
    copy = tmp_path / "workflow_scripts"
    subprocess.run(["cp", "-r", str(PACKAGE.parent), str(copy)], check=True)
    batches = copy / "depthlab" / "stages" / "pretrain" / "batches.py"
    batches.write_text(
        batches.read_text() + "\nfrom depthlab.stages.pretrain import training  # planted\n"
    )
    cycles = import_cycles(copy)
    assert cycles and all("depthlab.stages.pretrain.batches" in cycle for cycle in cycles)
    assert any("depthlab.stages.pretrain.training" in cycle for cycle in cycles)


def test_planning_and_config_load_no_torch():
    """What the Snakefile imports to plan a DAG (config resolution, the stages' settings checks,
    the resource plan, the preflight checks) must not import torch: planning a run stays seconds, also on a login node."""
    code = (
        "import sys, pkgutil, importlib, depthlab.plan, depthlab.settings, depthlab.config\n"
        "for package in (depthlab.settings, depthlab.plan):\n"
        "    for m in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "import depthlab.config.stages\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, "
        "sorted(m for m in sys.modules if m.startswith(('torch', 'transformers')))[:5]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


def test_no_folder_holds_too_many_modules():
    crowded = {
        str(folder.relative_to(PACKAGE)): count
        for folder in [PACKAGE, *[p for p in PACKAGE.rglob("*") if p.is_dir()]]
        if (count := len([f for f in folder.glob("*.py") if f.name != "__init__.py"]))
        > MAX_MODULES_PER_FOLDER
    }
    assert crowded == {}


def test_no_module_is_too_long():
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


@pytest.mark.parametrize("root", ["workflow_scripts", "bench"])
def test_no_function_is_too_long(root):
    long = {
        f"{path.relative_to(REPO)}:{node.name}": node.end_lineno - node.lineno + 1
        for path in (REPO / root).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert long == {}


def test_no_sys_path_edits_and_bench_imports_nothing_from_tests():
    """The package is installed (pyproject.toml, the README's install): nothing edits sys.path
    to find it, and the benchmarks use the library, not the tests' helpers."""
    offenders = [
        str(path.relative_to(REPO))
        for pattern in ("workflow_scripts/**/*.py", "bench/*.py", "Snakefile", "rules/*.smk")
        for path in REPO.glob(pattern)
        if "sys.path.insert" in path.read_text() or "sys.path.append" in path.read_text()
    ]
    assert offenders == []
    bench_imports = {
        alias.name.split(".")[0] if isinstance(node, ast.Import) else (node.module or "")
        for path in (REPO / "bench").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    test_helpers = {p.stem for p in (REPO / "tests").rglob("*.py")}
    assert bench_imports & test_helpers == set()
