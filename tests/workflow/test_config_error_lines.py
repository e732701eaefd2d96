"""Config errors through `snakemake -n` (issue 51, point 6): depthlab's one line comes first (not
Snakemake's `WorkflowError in file ".../Snakefile", line N:`), names the file and line or the
command line, and the key, with no traceback. One case per path through the Snakefile: a
file's value (the schema), the strict loader (a duplicate key Snakemake's YAML reader lets
through), an override, a repeated --configfile. The whole table runs through the same function
in tests/unit/config/test_config_errors.py."""

import subprocess

import pytest
from local_snakemake import ROOT, SNAKEMAKE, local_env

pytestmark = pytest.mark.workflow

BASE = str(ROOT / "config" / "test.yaml")
# Snakemake's own notice, printed before the Snakefile runs (profiles/default applies to every run)
PROFILE_NOTICE = "Using workflow specific profile"

CASES = {
    "steps: 16.0 in an overlay": (
        "pretrain:\n  steps: 16.0\n", [],
        "error: invalid config: pretrain.steps: 16.0 is not of type 'integer' (in {file}:2)",
    ),
    "duplicate key": (
        "pretrain:\n  steps: 3\n  steps: 4\n", [],
        "error: invalid config: {file}:3: key 'steps' appears twice",
    ),
    "--config pretrain={steps: abc}": (
        None, ["--config", "pretrain={steps: abc}"],
        "error: invalid config: pretrain.steps: 'abc' is not of type 'integer' (in --config)",
    ),
    "--configfile twice": (
        "pretrain:\n  steps: 3\n", ["REPEAT"],
        "error: invalid command line: --configfile given 2 times",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_the_first_line_is_depthlabs_and_names_the_source(tmp_path, case):
    text, extra, expected = CASES[case]
    overlay = tmp_path / "overlay.yaml"
    if text is not None:
        overlay.write_text(text)
    if extra == ["REPEAT"]:
        files = [f"--configfile={BASE}", f"--configfile={overlay}"]
    else:
        files = ["--configfile", BASE, *([str(overlay)] if text is not None else []), *extra]
    result = subprocess.run(
        [SNAKEMAKE, "-n", "--cores", "1", *files],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=local_env(),
    )  # fmt: skip
    output = result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith(PROFILE_NOTICE)]
    assert result.returncode == 1, output[-3000:]
    assert lines and lines[0].startswith(expected.format(file=overlay)), output[-3000:]
    assert "Traceback" not in output and "WorkflowError" not in output, output[-3000:]
    assert not result.stdout.strip(), result.stdout[-3000:]  # nothing planned, nothing else said
