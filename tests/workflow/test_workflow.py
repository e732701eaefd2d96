"""The workflow end to end on config/test.yaml, in a scratch copy of the repository: outputs,
logs, reruns that are right (library edits, moved checkouts, failed reruns), the report."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from depthlab.config import load_config, resolve
from local_snakemake import SNAKEMAKE, local_env

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "test.yaml"
# .git too: provenance records the checkout's commit
CHECKOUT_PARTS = (
    "Snakefile",
    "rules",
    "workflow_scripts",
    "config",
    "data",
    "profiles",
    "environment.yml",
    ".gitignore",
    ".git",
)

pytestmark = pytest.mark.workflow


# The rules a change to the pruning stage reruns (its jobs, the figure, the choices and the claims
# that read its tables, the `all` target), and a change to the analysis pass: those after its own.
PRUNING_READERS = frozenset(
    {"prune_model", "heal_pruned", "gather_pruning", "choose_depth", "plot_pruning",
     "make_claims", "all"}
)  # fmt: skip
ANALYSIS_READERS = frozenset({"analyse_model", "plot_analysis"}) | PRUNING_READERS


def snakemake(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    """Snakemake from the checkout's root, as a user runs it."""
    command = [SNAKEMAKE, "--configfile=config/test.yaml", "--cores", "2", *args]
    return subprocess.run(
        command, cwd=checkout, capture_output=True, text=True, timeout=900, env=local_env()
    )


def planned_rules(result: subprocess.CompletedProcess) -> set[str]:
    """Rules a dry run plans, from its job-stats table."""
    lines = result.stdout.splitlines()
    if "Job stats:" not in lines:
        return set()
    table = lines[lines.index("Job stats:") + 3 :]
    rules = set()
    for line in table:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        rules.add(parts[0])
    return rules


def copy_checkout(source: Path, target: Path, with_results: bool = False) -> Path:
    target.mkdir(parents=True)
    parts = CHECKOUT_PARTS + ((("results", ".snakemake")) if with_results else ())
    for part in parts:
        src = source / part
        if src.is_dir():
            # copy2 keeps modification times: "adopting" results means keeping them
            shutil.copytree(
                src,
                target / part,
                copy_function=shutil.copy2,
                symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        elif src.exists():
            shutil.copy2(src, target / part)
    return target


@pytest.fixture(scope="module")
def checkout(finished_test_checkout):
    """The run of config/test.yaml (conftest.py), shared with tests/workflow/test_rerun.py."""
    return finished_test_checkout


@pytest.fixture(scope="module")
def finished_run(checkout):
    return checkout / "results" / load_config(CONFIG)["run_name"]


def test_every_pretrained_model_is_a_loadable_hf_checkpoint(finished_run):
    import depthlab.models.decoders  # noqa: F401  (registers the depthlab_llama Auto classes)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    models = resolve(load_config(CONFIG)).models
    for name, declared in models.items():
        if declared["kind"] != "pretrain":
            continue
        model_dir = finished_run / "models" / name
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        assert model.config.num_hidden_layers == declared["architecture"]["num_layers"]
        assert model.config.hidden_size == declared["architecture"]["hidden_size"]
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        assert len(tokenizer) <= model.config.vocab_size
        log = pd.read_csv(model_dir / "train_log.csv")
        assert log.step.max() == declared["train"]["steps"]
        val_tokens = log[log.split == "val"].tokens
        assert len(val_tokens) >= 3 and val_tokens.is_monotonic_increasing
        provenance = json.loads((model_dir / "provenance.json").read_text())
        assert provenance["config"]["model_name"] == name
        assert len(provenance["git"]["commit"]) == 40


def test_figures_logs_and_benchmarks_exist_for_every_job(finished_run):
    figure = finished_run / "figures" / "loss_curves.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sidecar = json.loads((finished_run / "figures" / "loss_curves.provenance.json").read_text())
    assert len(sidecar["inputs"]) >= 2
    resolved = resolve(load_config(CONFIG))
    for family, jobs in resolved.families.items():
        for job in jobs:
            wildcards = resolved.wildcards[family][job]
            name = (
                "_T".join(map(str, wildcards.values()))
                if family == "train_toy"
                else ("/".join(map(str, wildcards.values())) if "job" not in wildcards else job)
            )
            assert (finished_run / "logs" / family / f"{name}.log").is_file(), (family, job)
            assert (finished_run / "benchmarks" / family / f"{name}.tsv").is_file(), (family, job)


def test_rerun_is_a_no_op_and_one_stage_reruns_alone(checkout):
    dry = snakemake(checkout, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout
    forced = snakemake(checkout, "-n", "--forcerun", "plot_loss_curves")
    assert forced.returncode == 0
    assert planned_rules(forced) == {"plot_loss_curves", "all"}


LIBRARY = Path("workflow_scripts") / "depthlab"


# A code edit (a new module-level name) of one library module plans exactly the rules whose
# scripts import it, transitively; never pretraining unless training imports it.
@pytest.mark.parametrize(
    "module, expected",
    [
        # measures.py: the analysis pass and what reads it (its figures, the angular block choice of
        # the pruning stage)
        (
            "stages/analysis/measures.py",
            ANALYSIS_READERS | {"measure_twin"},
        ),
        # the generic power-law fitter, imported through scaling_fits.py and toy_fit.py: both fit
        # stages, the sweep collector (scaling_fits.py) and the fit figures; never toy training
        (
            "stages/power_law_fitter.py",
            {"collect_sweep", "fit_scaling", "plot_scaling", "fit_toy", "make_claims", "all"},
        ),
        # the skip-intervention engine: the skip job and what reads it; not the lens / swap job
        # (the clean pass they share is residual_stream's), not the problem set, not the model
        # trained on it
        (
            "stages/depth_use/interventions.py",
            {"skip_interventions", "measure_twin", "plot_depth_use", "make_claims", "all"},
        ),
        # the residual-stream hooks: every model-reading job and what reads them; never training
        (
            "stages/residual_stream.py",
            {
                *ANALYSIS_READERS,
                "skip_interventions",
                "linear_maps",
                "plot_depth_use",
                "lens_swaps",
                "plot_lens_swaps",
                "measure_twin",
                "make_claims",
                "all",
            },
        ),
    ],
)
def test_editing_library_code_reruns_exactly_its_users(checkout, module, expected):
    dry = plan_after_edit(checkout, LIBRARY / module)
    assert planned_rules(dry) == expected, dry.stdout[-3000:]


def _reword_docstring(text: str) -> str:
    quote = text.index('"""') + 3
    return text[:quote] + "Reworded: " + text[quote:]


# The edits that used to replan pretraining (architectures.py, atomic_files.py) or the problem set
# (interventions.py, residual_stream.py), and a stage script's own docstring
@pytest.mark.parametrize(
    "relative",
    [
        LIBRARY / "stages/depth_use/interventions.py",
        LIBRARY / "stages/residual_stream.py",
        LIBRARY / "models/architectures.py",
        LIBRARY / "core/atomic_files.py",
        Path("workflow_scripts") / "pretrain_model.py",
    ],
)
@pytest.mark.parametrize(
    "change",
    [lambda text: text + "\n# a comment\n", _reword_docstring],
    ids=["comment", "docstring"],
)
def test_a_comment_or_docstring_edit_reruns_nothing(checkout, relative, change):
    dry = plan_after_edit(checkout, relative, change)
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


def plan_after_edit(
    checkout: Path, relative: Path, change=lambda text: text + "\n_EDITED = True\n"
) -> subprocess.CompletedProcess:
    """The dry run after a real edit of one file (by default a new module-level name: a code
    change); the file is restored afterwards."""
    path = checkout / relative
    text, stat = path.read_text(), path.stat()
    try:
        path.write_text(change(text))
        os.utime(path, (stat.st_atime, time.time() + 3600))  # newer than every output
        dry = snakemake(checkout, "-n")
    finally:
        path.write_text(text)
        os.utime(path, (stat.st_atime, stat.st_mtime))
    assert dry.returncode == 0, dry.stderr[-2000:]
    return dry


def test_a_moved_checkout_with_copied_results_plans_nothing(checkout, tmp_path):
    moved = copy_checkout(checkout, tmp_path / "elsewhere" / "clone", with_results=True)
    dry = snakemake(moved, "-n")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


def test_a_failed_forced_rerun_leaves_nothing_that_looks_up_to_date(checkout, tmp_path):
    clone = copy_checkout(checkout, tmp_path / "clone", with_results=True)
    results = clone / "results" / load_config(CONFIG)["run_name"]
    log = results / "models" / "pre_ln" / "train_log.csv"
    log.write_text("not,a,train,log\n")  # the loss-curve figure cannot be drawn from this
    failed = snakemake(clone, "--forcerun", "plot_loss_curves", "--", "figure_loss_curves")
    assert failed.returncode != 0
    again = snakemake(clone, "-n", "figure_loss_curves")
    assert "Nothing to be done" not in again.stdout + again.stderr
    assert "plot_loss_curves" in planned_rules(again)


def test_snakemake_report_collects_every_figure(checkout, finished_run):
    result = snakemake(checkout, "--report", "report.html")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    html = (checkout / "report.html").read_text(errors="replace")
    for figure in finished_run.joinpath("figures").rglob("*.png"):
        assert figure.name in html, figure
