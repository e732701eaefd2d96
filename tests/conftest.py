"""Fixtures shared by test files, and the background start of the Slurm run (test_slurm.py)."""

import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def test_config():
    """config/test.yaml, loaded as the workflow loads it."""
    from depthlab.config import load_config

    return load_config(ROOT / "config" / "test.yaml")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, test_config):
    """The data stage of config/test.yaml (tokenizer, train.bin, val.bin) in a tmp folder."""
    from depthlab.data import prepare_corpus

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


def pytest_collection_finish(session):
    """Start the Slurm workflow run now when its tests are selected: it mostly waits on the
    executor's polling, so it overlaps with the other tests instead of adding a minute."""
    if session.config.option.collectonly:
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
