"""Each documented way to give a config overlay, run as a user would, and the ways that used to go
wrong without a word (issue 51): Snakemake keeps only the last of several `--configfile`
options, so `--configfile=base.yaml --configfile=overlay.yaml` ran the overlay alone (an
unrelated schema error) and the reverse order ran the base alone (rc 0, the overlay dropped).
Now the one-option form works, a repeated option is refused, and so is an overlay given alone,
each naming the command that works; no doc, README or config comment shows a repeated option."""

import re
import shlex
import subprocess
import sys

import pytest
from depthlab.config import ConfigError, load_config, repeated_configfile
from local_snakemake import ROOT, SNAKEMAKE, local_env

pytestmark = pytest.mark.workflow

TEST_CONFIG = str(ROOT / "config" / "test.yaml")
OVERLAY = "run_name: overlaid\npruning: {models: [pre_ln]}\n"


def dry_run(workdir, *args):
    result = subprocess.run(
        [SNAKEMAKE, "-n", "--cores", "1", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(workdir), *args],
        capture_output=True, text=True, timeout=300, env=local_env(),
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


@pytest.fixture
def overlay(tmp_path):
    path = tmp_path / "overlay.yaml"
    path.write_text(OVERLAY)
    return path


def test_the_documented_form_applies_the_overlay(tmp_path, overlay):
    rc, output = dry_run(tmp_path, "--configfile", TEST_CONFIG, str(overlay), "--", "all")
    assert rc == 0, output[-3000:]
    assert "results/overlaid/" in output and "results/test/" not in output
    # the narrowed stage: pre_ln pruned instead of config/test.yaml's lns
    pruned = set(re.findall(r"results/overlaid/pruning_jobs/(\w+)/", output))
    assert pruned == {"pre_ln"}, pruned


@pytest.mark.parametrize("overlay_first", [False, True])
def test_a_repeated_configfile_is_refused_naming_the_fix(tmp_path, overlay, overlay_first):
    files = [str(overlay), TEST_CONFIG] if overlay_first else [TEST_CONFIG, str(overlay)]
    rc, output = dry_run(tmp_path, *(f"--configfile={name}" for name in files))
    assert rc != 0, output[-3000:]
    assert "--configfile given 2 times: Snakemake keeps only the last" in output, output[-3000:]
    # the fix puts the whole config first, whatever order the two options had
    assert f"snakemake --configfile {TEST_CONFIG} {overlay} " in output, output[-3000:]
    assert "results/" not in output  # nothing planned


def test_an_overlay_alone_is_refused_naming_the_fix(tmp_path, overlay):
    rc, output = dry_run(tmp_path, "--configfile", str(overlay))
    assert rc != 0, output[-3000:]
    assert f"{overlay}: an overlay, not a whole config (no seed, data, " in output, output[-3000:]
    assert f"snakemake --configfile config/default.yaml {overlay}" in output
    with pytest.raises(ConfigError, match=r"overlay\.yaml: an overlay, not a whole config"):
        load_config(overlay)
    plan = [sys.executable, str(ROOT / "workflow_scripts" / "plan.py")]
    alone = subprocess.run([*plan, str(overlay)], capture_output=True, text=True, timeout=120)
    assert alone.returncode == 2 and not alone.stdout, alone.stderr[-2000:]
    assert "an overlay, not a whole config" in alone.stderr.splitlines()[-1]
    assert f"plan.py config/default.yaml {overlay}" in alone.stderr
    both = subprocess.run(
        [*plan, TEST_CONFIG, str(overlay), "--summary"], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert both.returncode == 0, both.stderr[-2000:]


def test_repeated_configfile_reads_the_command_line_as_snakemake_does():
    assert repeated_configfile(["snakemake", "--configfile", "a.yaml", "b.yaml", "-n"]) is None
    assert repeated_configfile(["snakemake", "--configfile=a.yaml", "--config", "x=1"]) is None
    # after `--` come targets, not options
    assert repeated_configfile(["snakemake", "--configfile=a", "--", "--configfile=b"]) is None
    for argv in (
        ["snakemake", "--configfile=a.yaml", "--configfile=b.yaml"],
        ["snakemake", "--configfile", "a.yaml", "-n", "--configfiles", "b.yaml"],
        ["snakemake", "--configf=a.yaml", "--configfile", "b.yaml"],  # argparse's prefixes
    ):
        problem = repeated_configfile(argv)
        assert problem and problem.startswith("--configfile given 2 times"), argv
        assert "only the last (b.yaml)" in problem and "--configfile a.yaml b.yaml" in problem


def documented_commands():
    """(file, line, snakemake command) for every snakemake command in the README, the docs
    pages, the configs' comments and the profiles."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted((ROOT / "config").glob("*.yaml")) + sorted((ROOT / "profiles").rglob("*.yaml"))
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in re.finditer(r"snakemake\s[^`]*", line):
                yield path.relative_to(ROOT), number, match.group(0)


def test_no_documented_command_repeats_configfile():
    commands = list(documented_commands())
    assert len(commands) > 10
    repeated = []
    for path, number, command in commands:
        try:
            tokens = shlex.split(command, comments=True)
        except ValueError:
            tokens = command.split()
        if repeated_configfile(tokens):
            repeated.append(f"{path}:{number}: {command}")
    assert not repeated, repeated
