"""Fixtures shared by test files, the background start of the Slurm run (test_slurm.py), and how
pytest-xdist (the README's `-n auto`) shares the tests out among its workers."""

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Device `auto` resolves to the CPU in every test and in the Snakemake runs tests start (they
# inherit the environment): a test comparing with a CPU reference gets the same answer where CUDA
# is visible. Tests of the GPU are marked `cuda`, name their device, and skip without one.
os.environ["DEPTHLAB_AUTO_DEVICE"] = "cpu"
# Test files import builders from other test files (make_run, real_lms_installed, test_workflow's
# run helpers) across the folders that mirror the package: every test folder is importable.
for folder in sorted(p for p in Path(__file__).parent.rglob("*") if p.is_dir()):
    if folder.name != "__pycache__" and str(folder) not in sys.path:
        sys.path.append(str(folder))


@pytest.fixture(scope="module")
def test_config():
    """config/test.yaml, loaded as the workflow loads it."""
    from depthlab.config import load_config

    return load_config(ROOT / "config" / "test.yaml")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, test_config):
    """The data stage of config/test.yaml (tokenizer, train.bin, val.bin) in a tmp folder."""
    from depthlab.data.prepare import prepare_corpus

    out = tmp_path_factory.mktemp("data") / "data"
    prepare_corpus(test_config["data"], out, seed=0)
    return out


@pytest.fixture(scope="session")
def finished_test_checkout(tmp_path_factory):
    """config/test.yaml run once (minutes) in a scratch copy of the checkout; the workflow and
    rerun tests plan against it. Tests that change a file restore it, contents and time."""
    from test_workflow import ROOT, copy_checkout, snakemake

    checkout = copy_checkout(ROOT, tmp_path_factory.mktemp("workflow") / "depthlab")
    result = snakemake(checkout)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return checkout


def pytest_runtest_setup(item):
    """A `cuda`-marked test runs only where a CUDA device is visible."""
    if item.get_closest_marker("cuda") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU; none is visible")


def pytest_collection_finish(session):
    """Start the Slurm workflow run now when its tests are selected: it mostly waits on the
    executor's polling, so it overlaps with the other tests instead of adding a minute. Under
    pytest-xdist every worker collects every test and only one runs test_slurm.py, so there its
    fixture starts the run (the other worker goes on meanwhile)."""
    if session.config.option.collectonly or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if any(
        item.path.name == "test_slurm.py" and "slurm_run" in getattr(item, "fixturenames", ())
        for item in session.items
    ):
        import test_slurm

        test_slurm.start_in_background(Path(tempfile.mkdtemp(prefix="depthlab-slurm-")))


def pytest_sessionfinish(session, exitstatus):
    if "test_slurm" in sys.modules:
        sys.modules["test_slurm"].stop_background()


# Under pytest-xdist a test file is one unit of work (its module fixtures, e.g. a prepared corpus
# or the Slurm run, are built once), and these files share their unit: they plan against the
# session's finished run of config/test.yaml (finished_test_checkout), built once per worker.
SAME_WORKER = {
    "tests/workflow/test_rerun.py": "tests/workflow/test_workflow.py",
    "tests/workflow/test_provenance_run.py": "tests/workflow/test_workflow.py",
}
# The longest units start first (longest-processing-time-first), so no long file starts last and
# leaves the other worker idle at the end; seconds of each on the 2-core machine, 2026-12-02.
SLOW_FIRST = (
    "tests/workflow/test_workflow.py",  # 210 with test_rerun.py: the finished run and ~25 planning runs
    "tests/workflow/test_slurm.py",  # 55: a one-node cluster started and a run through it (mostly waiting)
    "tests/workflow/test_bench.py",  # 85
    "tests/unit/stages/pretrain/test_pretrain.py",  # 58
    "tests/workflow/test_readme.py",  # 52
    "tests/unit/models/test_gguf_models.py",  # 47
    "tests/unit/config/test_config.py",  # 45
)


def unit_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return SAME_WORKER.get(path, path)


def pytest_collection_modifyitems(config, items):
    """Slow units first (see SLOW_FIRST); the order within a unit is kept."""
    rank = {path: index for index, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(unit_of(item.nodeid), len(rank)))


def pytest_xdist_make_scheduler(config, log):
    """Units as above (xdist's own --dist loadgroup needs a node id that pytest 9 no longer lets
    it rewrite), handed out in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class FileUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False  # keep SLOW_FIRST's order, not "most tests first"
    return FileUnits(config, log)
