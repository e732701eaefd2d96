"""Checks made once before a run starts any job (the Snakefile's `onstart:`), so that a run that
cannot succeed stops in seconds with one line per cause instead of failing job by job:

- `slurm_controller_problem`: with the Slurm executor, the controller answers `scontrol ping`
  (without it, sbatch retries every submission and local jobs run first);
- `hub_problems`: every hub model, tokenizer and dataset the planned jobs read is in the local
  Hugging Face cache at its pinned revision, or the hub serves it to this user; otherwise a line
  per item with what to do (log in for a gated model, a local path to use offline).

Torch-free: it runs in the Snakemake process.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable

from depthlab.core.errors import CheckpointError
from depthlab.models.architectures import local_model_folder

SHORT = 12  # characters of a commit sha shown


@dataclasses.dataclass(frozen=True)
class HubItem:
    """One hub repository a run reads: `key` is the config key that names it."""

    repo_type: str  # model | dataset
    repo_id: str
    revision: str | None
    key: str

    def describe(self) -> str:
        revision = self.revision or "main"
        if len(revision) == 40:
            revision = revision[:SHORT]
        return f"{self.repo_type} {self.repo_id}@{revision} ({self.key})"


def slurm_controller_problem(timeout_s: float = 5.0) -> str | None:
    """None when the Slurm controller answers `scontrol ping`; else one line saying why not."""
    if shutil.which("scontrol") is None:
        return "Slurm: `scontrol` is not on PATH; run from a login node of the cluster"
    try:
        ping = subprocess.run(
            ["scontrol", "ping"], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return f"Slurm: the controller did not answer `scontrol ping` within {timeout_s:g} s"
    lines = [line for line in (ping.stdout + ping.stderr).splitlines() if line.strip("* ")]
    if ping.returncode != 0 or any(" DOWN" in line for line in lines):
        said = "; ".join(lines[:2]) or f"exit status {ping.returncode}"
        return f"Slurm: the controller is unreachable (`scontrol ping`: {said})"
    return None


def _is_hub_model(path: str) -> bool:
    if path.startswith("pkg:"):
        return False
    try:
        return local_model_folder(path) is None
    except CheckpointError:
        return False  # a local path that is missing: the config checks report it


def _datasets_in(node, key: str) -> Iterable[HubItem]:
    """Hub datasets anywhere in a config subtree: `{source: hf_dataset, name, revision}` entries
    and the data section's `{source: hf_dataset, hf_dataset: {name, revision}}`."""
    if isinstance(node, dict):
        if node.get("source") == "hf_dataset":
            entry = node.get("hf_dataset", node)
            if isinstance(entry, dict) and entry.get("name"):
                yield HubItem("dataset", entry["name"], entry.get("revision"), key)
        for name, value in node.items():
            if name != "hf_dataset":
                yield from _datasets_in(value, f"{key}.{name}" if key else str(name))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _datasets_in(value, f"{key}[{index}]")


@functools.cache
def _lm_eval_task_index() -> dict:
    """lm-eval's index of its own tasks: built from its ~10k task YAML files (20-50 s here), so
    once per process (it depends only on the installed lm-eval)."""
    from lm_eval.tasks import TaskManager

    return TaskManager().task_index


def _harness_datasets(task_names: Iterable[str], key: str) -> list[HubItem]:
    """The datasets behind lm-eval's own tasks (groups and tags expanded through its task
    index); lm-eval pins no revision, so these are checked at `main`."""
    names = list(dict.fromkeys(task_names))
    if not names:
        return []
    index = _lm_eval_task_index()
    found: dict[str, None] = {}

    def collect(name: str, depth: int = 0) -> None:
        entry = index.get(name)
        if depth > 8:
            return
        if entry is None or not entry.cfg:  # a tag: the tasks that carry it
            for tagged in [e for e in index.values() if name in (e.tags or ())]:
                collect(tagged.name, depth + 1)
            return
        config = entry.cfg
        if config.get("dataset_path"):
            found[config["dataset_path"]] = None
        for sub in config.get("task", []) if isinstance(config.get("task"), list) else []:
            collect(sub if isinstance(sub, str) else sub.get("task", ""), depth + 1)

    for name in names:
        collect(name)
    return [HubItem("dataset", path, None, key) for path in found]


def evaluates_harness_tasks(specs: Iterable[str]) -> bool:
    """Whether a job spec (JSON text) evaluates lm-eval's own tasks."""
    # the workflow's specs are compact JSON (config.spec_json), json.dumps' have spaces
    return any(re.search(r'"harness_tasks": ?\[\{', spec) for spec in specs)


def hub_items(config: dict, harness_tasks: bool = True) -> list[HubItem]:
    """Every hub repository the resolved `config` names (models, the pretrained tokenizer,
    datasets, and with `harness_tasks` lm-eval's own tasks' datasets, whose lookup builds
    lm-eval's task index: seconds), once each."""
    items = []
    for name, model in config.get("models", {}).items():
        if model.get("kind") == "hf" and _is_hub_model(model["path"]):
            items.append(HubItem("model", model["path"], model.get("revision"), f"models.{name}"))
    tokenizer = config.get("data", {}).get("tokenizer", {})
    if tokenizer.get("pretrained") and _is_hub_model(tokenizer["pretrained"]):
        items.append(
            HubItem(
                "model",
                tokenizer["pretrained"],
                tokenizer.get("revision"),
                "data.tokenizer.pretrained",
            )
        )
    for section in ("data", "analysis", "depth_use", "finetune"):
        items.extend(_datasets_in(config.get(section), section))
    lm_eval = config.get("pruning", {}).get("lm_eval", {})
    if harness_tasks and lm_eval.get("enabled"):
        names = [task["name"] for task in lm_eval.get("harness_tasks") or []]
        items.extend(_harness_datasets(names, "pruning.lm_eval.harness_tasks"))
    finetune = config.get("finetune") or {}
    if harness_tasks and finetune.get("models"):
        names = [task["name"] for task in finetune["lm_eval"].get("harness_tasks") or []]
        items.extend(_harness_datasets(names, "finetune.lm_eval.harness_tasks"))
    unique: dict[tuple, HubItem] = {}
    for item in items:
        unique.setdefault((item.repo_type, item.repo_id, item.revision), item)
    return list(unique.values())


def needed_items(items: Iterable[HubItem], specs: Iterable[str]) -> list[HubItem]:
    """The items some planned job reads: its repo id appears in the job's spec (JSON text); the
    datasets of lm-eval's own tasks whenever a planned job evaluates harness tasks."""
    specs = list(specs)
    text = "\n".join(specs)
    harness = evaluates_harness_tasks(specs)
    return [
        item
        for item in items
        if json.dumps(item.repo_id) in text
        or (harness and item.key.endswith("lm_eval.harness_tasks"))
    ]


def cached_snapshots(cache_dir: str | None = None) -> set[tuple[str, str, str]]:
    """(repo type, repo id, revision) of every snapshot in the hub cache, a revision being its
    commit sha or a branch or tag name whose ref the cache recorded."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        cache = scan_cache_dir(cache_dir)
    except CacheNotFound:
        return set()
    return {
        (repo.repo_type, repo.repo_id, name)
        for repo in cache.repos
        for cached in repo.revisions
        for name in (cached.commit_hash, *cached.refs)
    }


def _advice(item: HubItem) -> str:
    offline = (
        f"set {item.key}.path to a local folder"
        if item.repo_type == "model" and item.key.startswith("models.")
        else f"point {item.key} at a local copy"
    )
    download = (
        f"`hf download {item.repo_id}"
        + (" --repo-type dataset" if item.repo_type == "dataset" else "")
        + (f" --revision {item.revision}" if item.revision else "")
        + "` where there is network"
    )
    return f"{download}, or {offline}"


def hub_problems(
    items: Iterable[HubItem], timeout_s: float = 10.0, cache_dir: str | None = None
) -> list[str]:
    """One line per item that is neither cached at its revision (in `cache_dir`, by default the
    hub cache huggingface_hub uses) nor served by the hub."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline = constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE") == "1"
    api = HfApi()
    snapshots = cached_snapshots(cache_dir)
    problems = []
    for item in items:
        if (item.repo_type, item.repo_id, item.revision or "main") in snapshots:
            continue
        if offline:
            problems.append(
                f"{item.describe()}: not in the local Hugging Face cache and the hub is off "
                f"(HF_HUB_OFFLINE=1): {_advice(item)}"
            )
            continue
        info = api.model_info if item.repo_type == "model" else api.dataset_info
        try:
            info(item.repo_id, revision=item.revision, timeout=timeout_s)
        except GatedRepoError:
            problems.append(
                f"{item.describe()}: gated: accept its licence on "
                f"https://huggingface.co/{'datasets/' if item.repo_type == 'dataset' else ''}"
                f"{item.repo_id} and log in (`hf auth login`)"
            )
        except RevisionNotFoundError:
            problems.append(
                f"{item.describe()}: the hub has no revision {item.revision!r}; "
                f"fix {item.key}'s revision"
            )
        except RepositoryNotFoundError:
            problems.append(
                f"{item.describe()}: no such repository on the hub (or private: log in with "
                f"`hf auth login`); fix {item.key}, or {_advice(item).split(', or ')[-1]}"
            )
        except Exception as error:  # noqa: BLE001 - network errors come in many types
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            problems.append(
                f"{item.describe()}: not cached and the hub is unreachable ({reason[:120]}): "
                f"{_advice(item)}"
            )
    return problems
