"""How the tests start Snakemake for local (not Slurm) runs.

The Slurm executor plugin runs `scontrol show config` (10 s timeout) whenever Snakemake starts.
Where Slurm's client is installed but no controller answers (e.g. after tests/workflow/test_slurm.py
stops its one-node cluster), every local run would wait for it; stand-ins that answer "no
cluster" at once keep local runs fast. The Slurm test itself uses the real tools.
"""

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
ROOT = Path(__file__).resolve().parents[1]


def fresh_checkout(target: Path) -> Path:
    """What a clone of this checkout holds (tracked files and new ones git does not ignore,
    symlinks kept as links; no results, no .snakemake), plus .git for provenance, in `target`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source, copy = ROOT / name, target / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the working tree, not yet in the index
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, copy)
    shutil.copytree(ROOT / ".git", target / ".git", symlinks=True)
    return target


@functools.lru_cache(maxsize=1)
def local_env() -> dict:
    shims = Path(tempfile.mkdtemp(prefix="depthlab-no-slurm-"))
    for tool in ("scontrol", "sacct", "squeue", "sinfo"):
        path = shims / tool
        path.write_text("#!/bin/sh\nexit 1\n")
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}
