"""Provenance records: where every number came from (commit, config, inputs, versions, device)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
import time
from pathlib import Path

from .io import write_json

TRACKED_PACKAGES = (
    "torch", "transformers", "tokenizers", "safetensors", "datasets", "numpy", "scipy",
    "pandas", "snakemake", "lm_eval", "peft",
)


def _git(*args: str) -> str | None:
    repo = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                             timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state() -> dict:
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def sha256_path(path: str | os.PathLike) -> str:
    """sha256 of a file, or of a folder's files (sorted relative paths and contents)."""
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if path.is_dir():
            if file.name == "provenance.json":
                continue  # wall times differ between identical reruns
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        with open(file, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def package_versions() -> dict:
    versions = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def device_description() -> str:
    try:
        import torch
    except ImportError:
        return platform.processor() or platform.machine()
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    return f"cpu ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


class Provenance:
    """Collects provenance for one stage run; `write` records the end time.

    Usage: ``prov = Provenance("pretrain", config=..., inputs=[...], seed=0)`` at start,
    ``prov.write(output_dir / "provenance.json")`` after the outputs are complete.
    """

    def __init__(self, stage: str, config: dict, inputs=(), seed: int | None = None):
        self.stage = stage
        self.config = config
        self.inputs = [str(p) for p in inputs]
        self.seed = seed
        self.start = _dt.datetime.now(_dt.timezone.utc)
        self._t0 = time.perf_counter()
        self.extra: dict = {}

    def record(self) -> dict:
        end = _dt.datetime.now(_dt.timezone.utc)
        return {
            "stage": self.stage,
            "git": git_state(),
            "config": self.config,
            "inputs": {p: sha256_path(p) for p in self.inputs if Path(p).exists()},
            "packages": package_versions(),
            "python": platform.python_version(),
            "host": socket.gethostname(),
            "device": device_description(),
            "seed": self.seed,
            "start": self.start.isoformat(),
            "end": end.isoformat(),
            "wall_s": round(time.perf_counter() - self._t0, 3),
            **self.extra,
        }

    def write(self, *paths: str | os.PathLike) -> dict:
        """Write one record (inputs hashed once) to every path: a stage with several outputs."""
        record = self.record()
        for path in paths:
            write_json(path, record)
        return record


def sidecar_path(output: str | os.PathLike) -> Path:
    """Provenance file for a single-file output: `fig.png` -> `fig.provenance.json`."""
    output = Path(output)
    return output.with_name(output.stem + ".provenance.json")
