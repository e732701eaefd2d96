"""The pin set is one: requirements.txt and environment.yml agree, and torch is the pinned CPU build."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


EDITABLE = "-e ."  # the package itself (pyproject.toml), in both files


def _requirements() -> dict:
    pins = {}
    lines = [
        line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
    ]
    assert EDITABLE in lines, "requirements.txt must install depthlab itself (-e .)"
    for line in lines:
        if line and line != EDITABLE:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt: '{line}' is not pinned with =="
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_every_requirement_is_pinned_and_torch_is_2_13():
    pins = _requirements()
    assert pins["torch"] == "2.13.0"
    for package in ("transformers", "snakemake", "datasets", "scipy", "lm-eval", "peft"):
        assert package in pins, f"{package} missing from requirements.txt"


def test_environment_yml_carries_the_same_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert EDITABLE in pip_section
    env_pins = {}
    for line in pip_section:
        if line == EDITABLE:
            continue
        name, _, version = line.partition("==")
        env_pins[name.lower().replace("_", "-")] = version
    assert env_pins == _requirements()


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).strip().splitlines()
    assert len(block) == 2
    suite, tests = block
    assert "snakemake --cores all" in suite and "pytest" in tests
    assert readme.index(block[0]) < 200, "the commands must be the README's first lines"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest" in ci or "README.md" in ci
