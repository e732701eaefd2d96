"""How the tests start Snakemake for local (not Slurm) runs.

The Slurm executor plugin runs `scontrol show config` (10 s timeout) whenever Snakemake starts.
Where Slurm's client is installed but no controller answers (e.g. after tests/test_slurm.py
stops its one-node cluster), every local run would wait for it; stand-ins that answer "no
cluster" at once keep local runs fast. The Slurm test itself uses the real tools.
"""

import functools
import os
import sys
import tempfile
from pathlib import Path

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


@functools.lru_cache(maxsize=1)
def local_env() -> dict:
    shims = Path(tempfile.mkdtemp(prefix="depthlab-no-slurm-"))
    for tool in ("scontrol", "sacct", "squeue", "sinfo"):
        path = shims / tool
        path.write_text("#!/bin/sh\nexit 1\n")
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}
