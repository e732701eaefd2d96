"""The checks a run makes before its first job (depthlab.plan.preflight, the Snakefile's onstart):
which hub repositories a config and its planned jobs need, whether the local Hugging Face cache
holds them at their pinned revisions, and a run that stops with one line per missing item before
any job ran. (The Slurm controller check runs against the real Slurm client in test_slurm.py.)"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from depthlab.config import load_config, resolve
from depthlab.plan.preflight import (
    HubItem,
    cached_snapshots,
    evaluates_harness_tasks,
    hub_items,
    hub_problems,
    needed_items,
    slurm_controller_problem,
)
from local_snakemake import local_env

ROOT = Path(__file__).resolve().parents[3]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SHA = "3aba440b59558f995867ba6e1f58f21d0336b5bb"
OTHER_SHA = "0" * 40


@pytest.fixture(scope="module")
def paper():
    return resolve(load_config(ROOT / "config" / "paper.yaml"), ROOT)


def test_the_paper_configs_hub_items_carry_their_pinned_revisions_and_config_keys(paper):
    items = {(item.repo_type, item.repo_id): item for item in hub_items(paper.config)}
    llama = items[("model", "meta-llama/Llama-2-70b-hf")]
    assert (llama.revision, llama.key) == (SHA, "models.llama2_70b")
    tokenizer = items[("model", "t5-base")]
    assert tokenizer.key == "data.tokenizer.pretrained"
    assert tokenizer.revision == paper.config["data"]["tokenizer"]["revision"]
    c4 = items[("dataset", "allenai/c4")]
    assert c4.revision == "1588ec454efa1a09f29cd18ddd04fe05fc8653a2"
    assert items[("dataset", "EleutherAI/hendrycks_math")].key.startswith("depth_use.problems")
    # lm-eval's own tasks, groups expanded: MMLU's 57 subjects share one dataset
    harness = {item.repo_id for item in items.values() if item.key.endswith("harness_tasks")}
    assert {"cais/mmlu", "openai/gsm8k", "Rowan/hellaswag"} <= harness
    # each repository and revision once, however many keys name it (c4 is the data and three
    # text sets); gsm8k twice: pinned as a text set, at main as lm-eval's task
    listed = [(item.repo_type, item.repo_id, item.revision) for item in hub_items(paper.config)]
    assert len(listed) == len(set(listed))
    assert [r for t, i, r in listed if i == "allenai/c4"] == [c4.revision]
    assert sorted(str(r) for t, i, r in listed if i == "openai/gsm8k") == sorted(
        ["740312add88f781978c0658806c59bc2815b9866", "None"]
    )
    # models trained here and local folders are not hub items
    assert not any(item.repo_id.startswith(("results/", "pkg:")) for item in items.values())


def test_only_what_a_planned_job_reads_is_needed(paper):
    items = hub_items(paper.config)
    skip_spec = json.dumps(paper.jobs("skip_interventions")["llama31_70b"])
    needed = {item.repo_id for item in needed_items(items, [skip_spec])}
    assert needed == {"meta-llama/Llama-3.1-70B", "openai/gsm8k"}
    prune_spec = json.dumps(paper.jobs("prune_model")["llama2_70b"])
    needed = {item.repo_id for item in needed_items(items, [prune_spec])}
    assert {"meta-llama/Llama-2-70b-hf", "cais/mmlu"} <= needed
    assert "meta-llama/Llama-3.1-70B" not in needed


def write_snapshot(cache: Path, repo_type: str, repo_id: str, sha: str, ref: str | None) -> None:
    """The hub cache's layout as huggingface_hub writes it: blobs, a snapshot of symlinks, refs."""
    repo = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    content = b'{"model_type": "llama"}'
    blob = repo / "blobs" / hashlib.sha256(content).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(content)
    snapshot = repo / "snapshots" / sha
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(os.path.relpath(blob, snapshot))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(sha)


def test_a_cached_snapshot_passes_at_its_sha_or_ref_and_nothing_else_does(tmp_path, monkeypatch):
    write_snapshot(tmp_path, "model", "org/cached", SHA, ref="step143000")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert ("model", "org/cached", SHA) in cached_snapshots(str(tmp_path))
    ok = [
        HubItem("model", "org/cached", SHA, "models.a"),
        HubItem("model", "org/cached", "step143000", "models.b"),
    ]
    assert hub_problems(ok, cache_dir=str(tmp_path)) == []
    missing = [
        HubItem("model", "org/cached", OTHER_SHA, "models.c"),  # another revision
        HubItem("dataset", "org/cached", SHA, "analysis.text_sets.x"),  # a dataset, not the model
        HubItem("model", "org/absent", None, "models.d"),
    ]
    problems = hub_problems(missing, cache_dir=str(tmp_path))
    assert len(problems) == 3, problems
    assert problems[0].startswith(f"model org/cached@{OTHER_SHA[:12]} (models.c): not in the local")
    assert "set models.c.path to a local folder" in problems[0]
    assert "--repo-type dataset" in problems[1] and "analysis.text_sets.x" in problems[1]
    assert "HF_HUB_OFFLINE=1" in problems[2]


def test_no_scontrol_on_path_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "`scontrol` is not on PATH" in slurm_controller_problem()


def test_a_missing_hub_model_stops_the_run_before_any_job_with_one_line(tmp_path):
    """The user's trial: an unreachable hub model, offline. Before, the config was accepted and
    the analysis job failed after 5 network retries with a 67-line log."""
    env = {**local_env(), "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    result = subprocess.run(
        [
            SNAKEMAKE,
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(ROOT / "config" / "test.yaml"),
            "--config",
            "models={ghost: {kind: hf, path: nobody-xyz/no-such-model}}",
            "analysis={models: [pre_ln, lns, ghost]}",
            "--cores",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    ours = [line for line in output.splitlines() if line.startswith("depthlab:")]
    assert len(ours) == 1, output[-3000:]
    assert ours[0].startswith("depthlab: model nobody-xyz/no-such-model@main (models.ghost):")
    assert "set models.ghost.path to a local folder" in ours[0]
    assert "Traceback" not in output
    assert not (tmp_path / "results").exists(), "a job ran before the check"


def test_lm_evals_task_datasets_only_when_a_planned_job_evaluates_its_tasks(paper):
    skip_spec = json.dumps(paper.jobs("skip_interventions")["llama31_70b"], separators=(",", ":"))
    prune_spec = json.dumps(paper.jobs("prune_model")["llama2_70b"], separators=(",", ":"))
    assert not evaluates_harness_tasks([skip_spec]) and evaluates_harness_tasks([prune_spec])
    without = hub_items(paper.config, harness_tasks=False)
    assert not any(item.key.endswith("harness_tasks") for item in without)
    assert {i.repo_id for i in without} >= {"meta-llama/Llama-2-70b-hf", "allenai/c4"}
