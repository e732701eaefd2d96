"""Rerunning one stage on a finished run of config/test.yaml (shared with tests/test_workflow.py,
which covers the no-op rerun, one forced rule and edits of library modules): a changed setting or
an edited stage script replans exactly its stage and what reads it, never pretraining; the
README's figure command redraws every figure and nothing else. All dry runs: the plan is what
Snakemake runs (it reruns a job whose params, i.e. its resolved spec, changed).

Snakemake's `--list-changes params` is no help here: it lists every output of this workflow,
changed or not (its params are per-job functions), so the plans are compared instead."""

import re
import shlex
from pathlib import Path

import pytest
from depthlab.config import load_config, resolve
from local_snakemake import ROOT
from test_workflow import CONFIG, plan_after_edit, planned_rules, snakemake

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def checkout(finished_test_checkout):
    return finished_test_checkout  # up to date: tests/test_workflow.py checks the no-op rerun


@pytest.mark.parametrize(
    "override, expected",
    [
        # a pruning setting: the pruning job, its figure and the claims table that reads it
        (
            "pruning={strategies: [angular, deepest]}",
            {"prune_model", "plot_pruning", "make_claims", "all"},
        ),
        # an analysis setting: both analyses, their figure, the pruning that reads the angular
        # distances (and its figure), the claims table
        (
            "analysis={max_samples: 10}",
            {"analyse_model", "plot_analysis", "prune_model", "plot_pruning", "make_claims", "all"},
        ),
    ],
)
def test_a_changed_setting_reruns_its_stage_and_what_reads_it(checkout, override, expected):
    dry = snakemake(checkout, "-n", "--config", override)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert planned_rules(dry) == expected, dry.stdout[-3000:]


def test_editing_one_stage_script_reruns_its_rule_and_what_reads_it(checkout):
    dry = plan_after_edit(checkout, Path("workflow_scripts") / "prune_model.py")
    assert planned_rules(dry) == {"prune_model", "plot_pruning", "make_claims", "all"}, dry.stdout[
        -3000:
    ]


def readme_figures_command() -> list[str]:
    """The README's command that regenerates every figure (its Snakemake arguments)."""
    lines = [
        line
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith(".venv/bin/snakemake")
        and "fit_toy" in line
        and line.rstrip().endswith("-- figures")
    ]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])[1:]


def test_the_readme_figure_command_redraws_every_figure_and_nothing_else(checkout):
    dry = snakemake(checkout, "-n", *readme_figures_command())
    assert dry.returncode == 0, dry.stderr[-2000:]
    resolved = resolve(load_config(CONFIG))
    figure_rules = {
        family
        for family in resolved.families
        if family.startswith("plot_") and resolved.jobs(family)
    }
    # the toy figure is drawn by its (seconds-long) fit, the only non-plot job
    assert planned_rules(dry) == figure_rules | {"fit_toy", "figures"}, dry.stdout[-3000:]
    # every job of every figure rule, e.g. one plot_scaling job per fit
    for family in figure_rules:
        counts = re.search(rf"^{family}\s+(\d+)$", dry.stdout, re.MULTILINE)
        assert counts and int(counts.group(1)) == len(resolved.jobs(family)), family
