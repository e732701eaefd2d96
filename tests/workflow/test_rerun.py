"""Rerunning one stage on a finished run of config/test.yaml (shared with tests/workflow/test_workflow.py,
which covers the no-op rerun, one forced rule and edits of library modules): a changed setting or
an edited stage script replans exactly its stage and what reads it, never pretraining; the
README's figure command redraws every figure and nothing else. All dry runs: the plan is what
Snakemake runs (it reruns a job whose params, i.e. its resolved spec, changed).

Snakemake's `--list-changes params` is no help here: it lists every output of this workflow,
changed or not (its params are per-job functions), so the plans are compared instead.

The choices made after measuring (choose_depth, export_pruned) replan alone when their settings
change, and every job whose spec changed is named with its changed keys, one line each."""

import re
import shlex
from pathlib import Path

import pytest
from depthlab.config import load_config, resolve
from local_snakemake import ROOT
from test_workflow import (
    ANALYSIS_READERS,
    CONFIG,
    PRUNING_READERS,
    copy_checkout,
    plan_after_edit,
    planned_rules,
    snakemake,
)

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def checkout(finished_test_checkout):
    return (
        finished_test_checkout  # up to date: tests/workflow/test_workflow.py checks the no-op rerun
    )


@pytest.mark.parametrize(
    "override, expected",
    [
        # a pruning setting: the pruning job, the choice made on its tables, its figure and the
        # claims table that reads it
        (
            "pruning={strategies: [angular, deepest]}",
            PRUNING_READERS,
        ),
        # an analysis setting: both analyses, their figure, the pruning that reads the angular
        # distances (and what reads it), the untrained twins measured on the same documents, the
        # claims table
        (
            "analysis={max_samples: 10}",
            ANALYSIS_READERS | {"measure_twin"},
        ),
    ],
)
def test_a_changed_setting_reruns_its_stage_and_what_reads_it(checkout, override, expected):
    dry = snakemake(checkout, "-n", "--config", override)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert planned_rules(dry) == expected, dry.stdout[-3000:]


def test_editing_one_stage_script_reruns_its_rule_and_what_reads_it(checkout):
    dry = plan_after_edit(checkout, Path("workflow_scripts") / "prune_model.py")
    # the planning log names the file whose code changed (Snakemake's reason: two fingerprints)
    assert (
        "prune_model[lns]: code changed since its output was made: "
        "workflow_scripts/prune_model.py" in dry.stdout + dry.stderr
    ), (dry.stdout + dry.stderr)[-3000:]
    assert planned_rules(dry) == PRUNING_READERS, dry.stdout[-3000:]


def spec_change_lines(result) -> list[str]:
    """The lines the workflow logs while it plans, one per changed key of a job's spec (Snakemake
    logs to stdout in a dry run, to stderr in a real one)."""
    output = result.stdout + result.stderr
    return re.findall(r"^[a-z_]+\[[^\]]+\]: .+ -> .+$", output, re.MULTILINE)


@pytest.mark.parametrize(
    "override, expected, lines",
    [
        # a tolerance: only the seconds-long choice, never the measurements (QLoRA and MMLU on
        # the paper config) or the claims, which do not read it
        (
            "pruning={auto_depth: {tolerances: {val_loss: 0.75}}}",
            {"choose_depth", "all"},
            ["choose_depth[lns]: auto_depth.tolerances.val_loss 0.5 -> 0.75"],
        ),
        # the lm-eval metric: the choice and the figure that plots it, not the lm-eval runs
        (
            "pruning={lm_eval: {metric: acc_norm}}",
            {"choose_depth", "plot_pruning", "all"},
            [
                'choose_depth[lns]: metric "acc" -> "acc_norm"',
                'plot_pruning[pruning]: metric "acc" -> "acc_norm"',
            ],
        ),
        # a measurement setting: every job whose spec it changes is named with the key
        (
            "pruning={val: {windows: 5}}",
            PRUNING_READERS | {"measure_twin"},
            [
                "heal_pruned[lns/angular_n2]: val.windows 4 -> 5",
                "heal_pruned[lns/angular_n2_full]: val.windows 4 -> 5",
                "heal_pruned[lns/angular_n2_qlora]: val.windows 4 -> 5",
                # the untrained twins are scored on the same windows (pre_ln, not pruned, on
                # the stage's default ones)
                "measure_twin[corpus_l4_h32]: twins.lns.val.windows 4 -> 5",
                "measure_twin[corpus_l4_h32]: twins.pre_ln.val.windows 4 -> 5",
                "prune_model[lns]: val.windows 4 -> 5",
            ],
        ),
        # a healing setting: the heal job alone (not the loss sweep), the tables and their readers
        (
            "pruning={healing: {steps: 4}}",
            {"heal_pruned", "gather_pruning", "choose_depth", "plot_pruning", "make_claims", "all"},
            [
                "heal_pruned[lns/angular_n2]: healing.steps 3 -> 4",
                "heal_pruned[lns/angular_n2_full]: healing.steps 3 -> 4",
                "heal_pruned[lns/angular_n2_qlora]: healing.steps 3 -> 4",
                # the claims judge healing by the tokens it read
                "make_claims[claims]: healing.lns.full.tokens 192 -> 256",
                "make_claims[claims]: healing.lns.lora.tokens 192 -> 256",
                "make_claims[claims]: healing.lns.qlora.tokens 192 -> 256",
            ],
        ),
    ],
)
def test_a_changed_choice_replans_only_its_job_and_names_the_changed_key(
    checkout, override, expected, lines
):
    dry = snakemake(checkout, "-n", "--config", override)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert planned_rules(dry) == expected, dry.stdout[-3000:]
    assert sorted(spec_change_lines(dry)) == lines, dry.stdout[-3000:]


def test_an_export_runs_alone_and_a_changed_export_reruns_it_alone(checkout, tmp_path):
    """Adding an export plans the export job only; after it ran, changing the export item reruns
    it alone, and the dry run and the real run both name the changed key."""
    copy = copy_checkout(checkout, tmp_path / "depthlab", with_results=True)
    angular = "pruning={export: [{strategy: angular, metric: val_loss}]}"
    deepest = "pruning={export: [{strategy: deepest, metric: val_loss}]}"
    dry = snakemake(copy, "-n", "--config", angular)
    assert planned_rules(dry) == {"export_pruned", "all"}, dry.stdout[-3000:]
    assert spec_change_lines(dry) == []  # a new job: nothing recorded to compare with
    run = snakemake(copy, "--config", angular)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    exports = copy / "results" / "test" / "pruned_models" / "lns" / "exports.json"
    assert exports.is_file()
    change = ['export_pruned[lns]: export[0].strategy "angular" -> "deepest"']
    dry = snakemake(copy, "-n", "--config", deepest)
    assert planned_rules(dry) == {"export_pruned", "all"}, dry.stdout[-3000:]
    assert spec_change_lines(dry) == change, dry.stdout[-3000:]
    run = snakemake(copy, "--config", deepest)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert spec_change_lines(run) == change, run.stdout[-3000:]
    assert '"strategy": "deepest"' in exports.read_text()
    again = snakemake(copy, "-n", "--config", deepest)
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-3000:]


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
    resolved = resolve(load_config(CONFIG))
    # the README's command is the default run's: a rule this config runs no job of (it has no
    # fine-tuning) is left out, as docs/stages.md says to
    readme = readme_figures_command()
    forced = readme[readme.index("--forcerun") + 1 : readme.index("--")]
    command = [arg for arg in readme if arg not in forced or resolved.jobs(arg)]
    assert sorted(set(readme) - set(command)) == ["plot_finetuning"]
    dry = snakemake(checkout, "-n", *command)
    assert dry.returncode == 0, dry.stderr[-2000:]
    figure_rules = {
        family
        for family in resolved.families
        if family.startswith("plot_") and resolved.jobs(family)
    }
    # the toy figure is drawn by its (seconds-long) fit: the only non-plot job (the lens figures
    # are plot_lens_swaps', read from the lens tables: no lens is retrained)
    assert planned_rules(dry) == figure_rules | {"fit_toy", "figures"}, dry.stdout[-3000:]
    # every job of every figure rule, e.g. one plot_scaling job per fit
    for family in figure_rules:
        counts = re.search(rf"^{family}\s+(\d+)$", dry.stdout, re.MULTILINE)
        assert counts and int(counts.group(1)) == len(resolved.jobs(family)), family
