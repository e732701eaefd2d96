#!/usr/bin/env python
"""Benchmark: how long Snakemake takes to plan the workflow (a dry run), with the code
fingerprint's syntax cache off and warm, side by side.

Every Snakemake start fingerprints the code of every rule's script (the script and its library
closure, parsed without docstrings: depthlab/core/code_fingerprint.py). With the cache warm, a
file version parsed once before is read back instead. The runs alternate (off, warm, off, warm,
...) so that load on a shared machine hits both alike; each is a fresh `snakemake --dry-run`
process in a scratch working directory (nothing planned is up to date), whose user + system CPU
time and wall time are printed. The fingerprints of both modes are compared too: the planned
jobs' params (the `code` param among them) must be identical.

    python bench/bench_planning.py --configfile config/default.yaml --repeats 3
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SLURM_TOOLS = ("scontrol", "sacct", "squeue", "sinfo")


def no_slurm_path() -> str:
    """A PATH whose Slurm client tools answer "no cluster" at once: the Slurm executor plugin
    runs `scontrol show config` whenever Snakemake starts, which waits ~10 s where the client is
    installed and no controller answers; that wait is not planning."""
    shims = Path(tempfile.mkdtemp(prefix="bench-no-slurm-"))
    for tool in SLURM_TOOLS:
        (shims / tool).write_text("#!/bin/sh\nexit 1\n")
        (shims / tool).chmod(0o755)
    return f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"


def dry_run(configfile: Path, cache: str, workdir: Path) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, the printed plan) of one dry run."""
    env = {**os.environ, "PATH": no_slurm_path(), "DEPTHLAB_SYNTAX_CACHE": cache}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        [SNAKEMAKE, "--dry-run", "--printshellcmds", "--cores", "1", "--snakefile",
         str(ROOT / "Snakefile"), "--directory", str(workdir), f"--configfile={configfile}"],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"snakemake --dry-run failed:\n{(result.stdout + result.stderr)[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, result.stdout


def planned_commands(plan: str) -> list[str]:
    """The shell commands of the plan (each carries its job's spec and code fingerprint), with
    the scratch paths and the sharing of their order taken out."""
    return sorted(
        re.sub(r"/tmp/\S+", "TMP", line) for line in plan.splitlines() if "--spec" in line
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configfile", type=Path, default=ROOT / "config" / "default.yaml")
    parser.add_argument("--repeats", type=int, default=3, help="dry runs per mode")
    args = parser.parse_args()
    if not args.configfile.is_file():
        sys.exit(f"--configfile: {args.configfile} does not exist")
    scratch = Path(tempfile.mkdtemp(prefix="bench-planning-"))
    cache = scratch / "syntax-cache"
    dry_run(args.configfile.resolve(), str(cache), scratch / "warmup")  # fills the cache
    times = {"off": [], "warm": []}
    plans = {}
    for repeat in range(args.repeats):
        for mode in ("off", "warm"):
            workdir = scratch / f"{mode}{repeat}"
            cpu, wall, plan = dry_run(
                args.configfile.resolve(), "off" if mode == "off" else str(cache), workdir
            )
            times[mode].append((cpu, wall))
            plans[mode] = planned_commands(plan)
            print(f"repeat {repeat} {mode:>4}: cpu {cpu:.2f} s, wall {wall:.2f} s", flush=True)
    cpu_off = statistics.median(c for c, _ in times["off"])
    cpu_warm = statistics.median(c for c, _ in times["warm"])
    wall_off = statistics.median(w for _, w in times["off"])
    wall_warm = statistics.median(w for _, w in times["warm"])
    print(
        f"{args.configfile.name}: {len(plans['off'])} planned jobs; median dry run cache off "
        f"cpu {cpu_off:.2f} s wall {wall_off:.2f} s, cache warm cpu {cpu_warm:.2f} s wall "
        f"{wall_warm:.2f} s -> cpu ratio {cpu_off / cpu_warm:.2f}x"
    )
    same = plans["off"] == plans["warm"]
    print(f"same planned commands (specs and code fingerprints): {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
