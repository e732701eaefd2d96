"""Fixtures shared by test files."""

import pytest


@pytest.fixture(scope="session")
def finished_test_checkout(tmp_path_factory):
    """config/test.yaml run once (minutes) in a scratch copy of the checkout; the workflow and
    rerun tests plan against it. Tests that change a file restore it, contents and time."""
    from test_workflow import ROOT, copy_checkout, snakemake

    checkout = copy_checkout(ROOT, tmp_path_factory.mktemp("workflow") / "depthlab")
    result = snakemake(checkout)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return checkout
