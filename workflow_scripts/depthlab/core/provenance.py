"""Provenance records: where every number came from (rule, command, commit, config files,
inputs, versions, device) and what the job wrote (the sha256 of each output file).
`python workflow_scripts/audit.py PATH` reads them back (depthlab/core/audit.py)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

from depthlab.core.atomic_files import write_json
from depthlab.core.repo_files import PACKAGE_DIR, REPO_ROOT

TRACKED_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "datasets",
    "numpy",
    "scipy",
    "pandas",
    "snakemake",
    "lm_eval",
    "peft",
)


# Environment variable through which the Snakefile hands the effective config files (with
# checksums) to its jobs: kept out of the rules' params, so editing a comment in a config file
# reruns nothing.
CONFIG_SOURCE_ENV = "DEPTHLAB_CONFIG_SOURCE"
MAX_LISTED_CHANGES = 50
# A folder output's record, and a file output's sidecar (`fig.png` -> `fig.provenance.json`).
RECORD_NAME = "provenance.json"
SIDECAR_SUFFIX = ".provenance.json"
# Snakemake writes this into a folder output after the job (and its record) ended: not the job's.
WRITTEN_AFTER_RECORD = frozenset({".snakemake_timestamp"})

# What the running job is (set once by depthlab.cli.start_job), recorded by every Provenance.
_job: dict = {}


def git_state(repo: str | os.PathLike | None = None) -> dict:
    """Commit and dirty flag of the checkout; untracked files that git does not ignore count as
    changes too (a new, uncommitted module can change results as much as an edited one).
    `repo`: the checkout this library lives in unless given."""
    repo = REPO_ROOT if repo is None else repo
    commit = _git(repo, "rev-parse", "HEAD")
    status = _git(repo, "status", "--porcelain", "--untracked-files=all")
    if status is None:
        return {"commit": commit, "dirty": None}
    changes = status.splitlines()
    return {
        "commit": commit,
        "dirty": bool(changes),
        "n_changes": len(changes),
        "changes": changes[:MAX_LISTED_CHANGES],
    }


def _git(repo: str | os.PathLike, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=20, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.rstrip("\n")  # not strip(): porcelain lines start with a space


def _hash_tree(path: Path, per_file: bool):
    """(sha256 of `path`, {relative file: sha256} for a folder when `per_file`, else None),
    reading every file once."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    file_digests = {} if per_file and path.is_dir() else None
    for file in files:
        if path.is_dir():
            if file.name == RECORD_NAME:
                continue  # wall times differ between identical reruns
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        own = hashlib.sha256() if file_digests is not None else None
        with open(file, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
                if own is not None:
                    own.update(chunk)
        if own is not None:
            file_digests[str(file.relative_to(path))] = own.hexdigest()
    return digest.hexdigest(), file_digests


def sha256_path(path: str | os.PathLike) -> str:
    """sha256 of a file, or of a folder's files (sorted relative paths and contents)."""
    return _hash_tree(Path(path), per_file=False)[0]


def sha256_files(path: str | os.PathLike) -> dict:
    """{relative file: sha256} of a folder's files (what `sha256_path` folds into one)."""
    return _hash_tree(Path(path), per_file=True)[1] or {}


def described_files(record_path: str | os.PathLike) -> dict[str, Path]:
    """The output files a provenance record describes, by their path relative to the record's
    folder: for a folder's `provenance.json`, every file under that folder except the
    `provenance.json` records (as in `sha256_path`) and Snakemake's marker; for a sidecar
    `x.provenance.json`, the files beside it named `x.<suffix>` (a job that writes `x.csv` and
    `x.md` records both in one sidecar)."""
    record_path = Path(record_path)
    folder = record_path.parent
    if record_path.name == RECORD_NAME:
        files = [
            p
            for p in folder.rglob("*")
            if p.is_file() and p.name != RECORD_NAME and p.name not in WRITTEN_AFTER_RECORD
        ]
    elif record_path.name.endswith(SIDECAR_SUFFIX):
        stem = record_path.name[: -len(SIDECAR_SUFFIX)]
        files = [p for p in folder.iterdir() if p.is_file() and p.stem == stem]
    else:
        raise ValueError(
            f"{record_path}: not a provenance record (named {RECORD_NAME} or *{SIDECAR_SUFFIX})"
        )
    return {p.relative_to(folder).as_posix(): p for p in sorted(files)}


def output_checksums(record_path: str | os.PathLike) -> dict[str, str]:
    """{relative path: sha256} of the files the record at `record_path` describes."""
    return {name: sha256_path(path) for name, path in described_files(record_path).items()}


def display_path(path: str | os.PathLike) -> str:
    """`path` relative to the working directory when inside it, else absolute."""
    absolute = Path(path).resolve()
    try:
        return str(absolute.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(absolute)


def config_source(config_files, overrides: dict | None = None) -> dict:
    """The config files a job's spec was resolved from, each with its sha256, and the
    command-line overrides applied on top."""
    source = {"files": [{"path": display_path(f), "sha256": sha256_path(f)} for f in config_files]}
    if overrides:
        source["overrides"] = overrides
    return source


def export_config_source(config_files, overrides: dict | None = None) -> None:
    """Hand the config source to the jobs this process starts (see CONFIG_SOURCE_ENV)."""
    os.environ[CONFIG_SOURCE_ENV] = json.dumps(config_source(config_files, overrides), default=str)


def set_job(rule: str, command: str, config_files=None) -> None:
    """Record what this process is running: its rule (= job family), its exact command, and
    the config files its spec came from (`--config` given by hand, else what the workflow
    exported; none for a bare `--spec` run by hand)."""
    if config_files:
        source = config_source(config_files)
    else:
        try:
            source = json.loads(os.environ.get(CONFIG_SOURCE_ENV) or "null")
        except json.JSONDecodeError:
            source = None
    _job.clear()
    _job.update(rule=rule, command=command, config_source=source)


def package_versions() -> dict:
    versions = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def device_description() -> str:
    torch = sys.modules.get("torch")  # a job that never imported torch ran on the CPU alone
    if torch is None:
        threads = os.environ.get("OMP_NUM_THREADS", "default")
        return f"cpu ({os.cpu_count()} cores, {threads} threads; torch not used)"
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    return f"cpu ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def running_script_code() -> dict[str, str] | None:
    """The code the running workflow script runs, file by file (code_fingerprint.script_code);
    None outside a workflow script (a test, a notebook)."""
    from depthlab.core.code_fingerprint import script_code

    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if (
        script is None
        or script.suffix != ".py"
        or script.resolve().parent.name != "workflow_scripts"
    ):
        return None
    try:
        return script_code(script)
    except (OSError, SyntaxError, ValueError):
        return None


class Provenance:
    """Collects provenance for one stage run; `write` records the end time.

    Usage: ``prov = Provenance("pretrain", config=..., inputs=[...], seed=0)`` at start,
    ``prov.write(output_dir / "provenance.json")`` after the outputs are complete: the record
    holds the sha256 of the files beside it, so it is the job's last write.
    """

    def __init__(self, stage: str, config: dict, inputs=(), seed: int | None = None):
        self.stage = stage
        self.config = config
        self.inputs = [str(p) for p in inputs]
        self.seed = seed
        self.start = _dt.datetime.now(_dt.UTC)
        self._t0 = time.perf_counter()
        self.extra: dict = {}

    def record(self) -> dict:
        end = _dt.datetime.now(_dt.UTC)
        hashed = [(p, *_hash_tree(Path(p), per_file=True)) for p in self.inputs if Path(p).exists()]
        return {
            "stage": self.stage,
            "rule": _job.get("rule"),
            "command": _job.get("command"),
            "cwd": os.getcwd(),
            # the depthlab this job ran: its script's checkout (python puts the script's folder
            # first on sys.path), whichever checkout the venv installs
            "library": str(PACKAGE_DIR),
            "git": git_state(),
            "config_source": _job.get("config_source"),
            "config": self.config,
            "inputs": {p: digest for p, digest, _ in hashed},
            # per-file checksums of folder inputs: an audit can name the one file that changed
            "input_files": {p: files for p, _, files in hashed if files is not None},
            "packages": package_versions(),
            "python": platform.python_version(),
            "host": socket.gethostname(),
            "device": device_description(),
            "seed": self.seed,
            "start": self.start.isoformat(),
            "end": end.isoformat(),
            "wall_s": round(time.perf_counter() - self._t0, 3),
            "code": running_script_code(),
            **self.extra,
        }

    def write(self, *paths: str | os.PathLike) -> dict[Path, dict]:
        """Write the record (inputs hashed once) to every path, a stage with several outputs;
        each copy adds `outputs`, the sha256 of the files it describes (`described_files`).
        Returns the record written to each path."""
        record = self.record()
        written = {}
        for path in dict.fromkeys(Path(p) for p in paths):
            written[path] = {**record, "outputs": output_checksums(path)}
            write_json(path, written[path])
        return written


def sidecar_path(output: str | os.PathLike) -> Path:
    """Provenance file for a single-file output: `fig.png` -> `fig.provenance.json`."""
    output = Path(output)
    return output.with_name(output.stem + SIDECAR_SUFFIX)
