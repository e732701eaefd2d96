"""The job-family declarations (depthlab.plan.job_families) are the one list of families: every
rule, script, resolver, resource plan, stage target and results-page group reads them, and this
test fails when one disagrees."""

import re
from pathlib import Path

import pytest
from depthlab.config import load_config, resolve
from depthlab.config.paths import RunPaths
from depthlab.config.resolved import Resolved
from depthlab.core.errors import ConfigError
from depthlab.plan.job_families import BY_NAME, FAMILIES, stages

ROOT = Path(__file__).resolve().parents[2]
RULE = re.compile(r"^\s*rule (\w+):", re.M)
# rules that are targets, not job families (rules/targets.smk, the Snakefile's `all`)
TARGET_RULE_FILES = {"targets.smk"}


@pytest.fixture(scope="module")
def resolved_configs():
    return {name: resolve(load_config(ROOT / "config" / f"{name}.yaml"))
            for name in ("default", "paper", "test")}  # fmt: skip


def test_every_rule_is_a_declared_family_and_every_family_a_rule_with_its_script():
    rules = {
        name
        for path in (ROOT / "rules").glob("*.smk")
        if path.name not in TARGET_RULE_FILES
        for name in RULE.findall(path.read_text())
    }
    assert rules == set(BY_NAME)
    for declared in FAMILIES:
        assert (ROOT / "workflow_scripts" / declared.script).is_file(), declared.name
    assert len(BY_NAME) == len(FAMILIES)  # no name declared twice


def test_every_family_a_config_resolves_is_declared_and_every_declared_one_has_jobs(
    resolved_configs,
):
    # default, paper and test together run every family: a declaration no config reaches is
    # dead (or its resolver forgot it)
    resolved_families = {f for r in resolved_configs.values() for f in r.families if r.jobs(f)}
    assert resolved_families == set(BY_NAME)


def test_an_undeclared_family_is_refused():
    resolved = Resolved(config={}, paths=RunPaths("x"), models={})
    with pytest.raises(ConfigError, match="not declared in depthlab/plan/job_families.py"):
        resolved.add("summon_model", "a", {})


def test_the_resource_plan_plans_every_job_of_every_family_with_a_cost_model(resolved_configs):
    for resolved in resolved_configs.values():
        plan = resolved.resource_plan
        for name in resolved.families:
            declared = BY_NAME[name]
            planned = {job for (family, job) in plan.jobs if family == name}
            if declared.work is not None or declared.estimate is not None:
                assert planned == set(resolved.jobs(name)), name
                assert all(plan.jobs[(name, j)].stage == declared.resources for j in planned)
            else:
                assert not planned and plan.other_jobs[name] == len(resolved.jobs(name))


def test_declared_resources_and_stages_exist(resolved_configs):
    default = resolved_configs["default"].config
    for declared in FAMILIES:
        assert declared.resources in default["resources"], declared.name
        assert declared.targets or declared.name in {"collect_sweep", "build_finetune_data",
                                                     "prune_model", "heal_pruned",
                                                     "evaluate_pruned", "convert_gguf"}  # fmt: skip
    # the stage targets are named after the stages: none may shadow a rule
    assert not set(stages()) & set(BY_NAME)
    assert "twins" in stages()


def test_every_figure_family_has_its_caption(resolved_configs):
    from depthlab.claims.results_page import GROUPS

    captions = ROOT / "rules" / "captions"
    for declared in FAMILIES:
        if declared.figures is None:
            continue
        assert GROUPS[declared.figures.key][0] == declared.figures.heading
        if declared.figures.caption:
            assert (captions / f"{declared.figures.caption}.rst").is_file(), declared.name
    figure_paths = {
        Path(path).relative_to(f"{r.paths.root}/figures").parts[0].split(".")[0]
        for r in resolved_configs.values()
        for family in r.families
        for spec in r.jobs(family).values()
        for path in _figure_outputs(spec, r.paths.root)
    }
    assert figure_paths <= set(GROUPS), figure_paths - set(GROUPS)


def _figure_outputs(spec, root):
    """Every string in a spec that is a figure path of the run."""
    if isinstance(spec, dict):
        return [p for value in spec.values() for p in _figure_outputs(value, root)]
    if isinstance(spec, list):
        return [p for value in spec for p in _figure_outputs(value, root)]
    return [spec] if isinstance(spec, str) and spec.startswith(f"{root}/figures/") else []
