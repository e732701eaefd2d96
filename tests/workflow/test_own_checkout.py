"""A checkout runs its own code (issue 51, point 2): two checkouts, one venv. The venv installs
the library editable from one checkout (`-e .`); `snakemake` in the other must still plan with
that other checkout's `depthlab` (the Snakefile loads it from its own folder), its scripts
import their own, and provenance names the library a job ran."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from local_snakemake import ROOT, SNAKEMAKE, local_env

pytestmark = pytest.mark.workflow

MARKER = "checkout B's own depthlab.config resolved this run"
# An edit of the second checkout's depthlab/config, visible in a dry run: resolve() says so
EDIT = f"""

_resolve_of_this_checkout = resolve


def resolve(config, base_dir=REPO_ROOT):
    import sys

    print({MARKER!r}, file=sys.stderr)
    return _resolve_of_this_checkout(config, base_dir)
"""


def tracked_copy(target: Path) -> Path:
    """The files git tracks (and new ones it does not ignore) of this checkout, in `target`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, listed.split("\0")):
        source, copy = ROOT / name, target / name
        if source.is_symlink() or source.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy, follow_symlinks=False)
    return target


@pytest.fixture(scope="module")
def second_checkout(tmp_path_factory):
    checkout = tracked_copy(tmp_path_factory.mktemp("checkout_b"))
    config = checkout / "workflow_scripts" / "depthlab" / "config" / "__init__.py"
    config.write_text(config.read_text() + EDIT)
    return checkout


def test_the_venv_installs_another_checkouts_library(second_checkout):
    """The premise: outside any checkout, the venv's python imports depthlab from elsewhere."""
    found = subprocess.run(
        [sys.executable, "-c", "import depthlab; print(depthlab.__file__)"],
        cwd=second_checkout.parent, capture_output=True, text=True, check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.strip()  # fmt: skip
    assert found and not Path(found).resolve().is_relative_to(second_checkout.resolve()), found


def test_snakemake_plans_with_the_checkouts_own_library(second_checkout):
    env = {k: v for k, v in local_env().items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [SNAKEMAKE, "-n", "--cores", "1", "--configfile", "config/test.yaml"],
        cwd=second_checkout, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert MARKER in result.stderr, output[-3000:]


def test_a_script_run_by_hand_uses_the_checkouts_own_library(second_checkout):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "workflow_scripts/fit_toy.py", "--config", "config/test.yaml"],
        cwd=second_checkout, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert MARKER in result.stderr, result.stderr[-3000:]


def test_provenance_names_the_library_a_job_ran(second_checkout):
    """A job's record names its checkout's library (here the second one's, which the venv does
    not install), and that checkout's git state."""
    code = (
        "from depthlab.core.provenance import Provenance; import json; "
        "print(json.dumps(Provenance('probe', config={}).record()))"
    )
    script = second_checkout / "workflow_scripts" / "probe_provenance.py"
    script.write_text(code + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=second_checkout.parent, capture_output=True,
        text=True, timeout=300, env=env, check=True,
    )  # fmt: skip
    record = json.loads(result.stdout)
    library = second_checkout / "workflow_scripts" / "depthlab"
    assert Path(record["library"]) == library.resolve(), record["library"]
