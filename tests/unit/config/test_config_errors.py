"""Malformed configs, one table (issue 51, point 6): each is refused with one line that names the
file (and the line, where YAML gives one) or the command line, and the key, through the
function the Snakefile calls (depthlab.config.command_line.workflow_config), and through plan.py
without a traceback. tests/workflow/test_config_error_lines.py runs the paths that differ through
`snakemake -n`; what Snakemake parses itself before the Snakefile runs is listed in
docs/configs.md."""

import subprocess
import sys

import pytest
from depthlab.config import ConfigError
from depthlab.config.command_line import workflow_config
from local_snakemake import ROOT
from snakemake.cli import parse_config

BASE = str(ROOT / "config" / "test.yaml")

# name: (file text, or None for the base config alone; bytes for a non-UTF-8 file; "FOLDER" for
# a folder; "MISSING" for a file that is not there), `--config` entries, and what the first line
# must hold: the source (`{file}` is the file's path), then the key (None: a file-level problem)
CASES = {
    "empty file": ("", [], "{file}: empty", None),
    "YAML list": ("- run_name: x\n- seed: 1\n", [], "{file}:1:", None),
    "a string": ("just a string\n", [], "{file}:1:", None),
    "tab": ("pretrain:\n\tsteps: 3\n", [], "{file}:2: not valid YAML: a tab", None),
    "unclosed {": ("pretrain: {steps: 3\n", [], "{file}:2: not valid YAML", None),
    "unclosed quote": ('pretrain:\n  steps: "abc\n', [], "{file}:3: not valid YAML", None),
    "duplicate key": ("pretrain:\n  steps: 3\n  steps: 4\n", [], "{file}:3: key 'steps'", None),
    "not UTF-8": (b"pretrain:\n  steps: \xff\n", [], "{file}:2: not UTF-8", None),
    "missing file": ("MISSING", [], "{file}: config file not found", None),
    "a folder": ("FOLDER", [], "{file}: is a folder", None),
    "steps: 16.0": ("pretrain:\n  steps: 16.0\n", [], "(in {file}:2)", "pretrain.steps"),
    "steps: -5": ("pretrain:\n  steps: -5\n", [], "(in {file}:2)", "pretrain.steps"),
    "unknown key": (
        "pretrain:\n  stepz: 16\n",
        [],
        "(in {file}:2)",
        "pretrain: unknown key 'stepz'",
    ),
    "lr: .nan": ("pretrain:\n  lr: .nan\n", [], "(in {file}:2)", "pretrain.lr"),
    "21-digit seed": ("seed: 123456789012345678901\n", [], "(in {file}:1)", "seed"),
    "run_name ../up": ('run_name: "../up"\n', [], "(in {file}:1)", "run_name"),
    "run_name null": ("run_name: null\n", [], "(in {file}:1)", "run_name"),
    "a list for a section": ("pretrain: [1, 2]\n", [], "(in {file}:1)", "pretrain"),
    "unknown model": ("analysis:\n  models: [nope]\n", [], "(in {file}:2)", "analysis.models[0]"),
    "bad enum in a model": (
        "models:\n  pre_ln:\n    norm_scheme: bogus\n",
        [],
        "(in {file}:3)",
        "models.pre_ln.norm_scheme",
    ),  # fmt: skip
    "--config pretrain={steps: abc}": (
        None,
        ["pretrain={steps: abc}"],
        "(in --config)",
        "pretrain.steps",
    ),
    "--config pretrain={lr: .nan}": (
        None,
        ["pretrain={lr: .nan}"],
        "(in --config pretrain.lr)",
        "pretrain.lr",
    ),
    "--config bogus=1": (None, ["bogus=1"], "(in --config)", "(top level): unknown key 'bogus'"),
    "--config seed=1.5": (None, ["seed=1.5"], "(in --config)", "seed"),
    "--config analysis={models: [nope]}": (
        None,
        ["analysis={models: [nope]}"],
        "(in --config)",
        "analysis.models[0]",
    ),  # fmt: skip
}


def case_files(tmp_path, text):
    """The config files of a case: the base config, then the case's file (if any)."""
    if text is None:
        return [BASE], None
    path = tmp_path / "case.yaml"
    if text == "FOLDER":
        path.mkdir()
    elif isinstance(text, bytes):
        path.write_bytes(text)
    elif text != "MISSING":
        path.write_text(text)
    # a file that breaks loading is refused whichever place it has; a whole config lacks nothing
    return [BASE, str(path)], path


def first_line(message: str) -> str:
    return message.splitlines()[0]


@pytest.mark.parametrize("case", list(CASES))
def test_the_first_line_names_the_source_and_the_key(tmp_path, case):
    text, entries, source, key = CASES[case]
    files, path = case_files(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        # the overrides as Snakemake's --config hands them to the Snakefile
        workflow_config(files, parse_config(entries), ROOT)
    line = first_line(str(raised.value))
    assert line.startswith("invalid config: "), line
    assert source.format(file=path) in line, line
    if key is not None:
        assert line.startswith(f"invalid config: {key}"), line


def test_the_table_holds_twenty_cases_of_every_kind():
    assert len(CASES) >= 20
    sources = [source for _, _, source, _ in CASES.values()]
    assert sum("--config" in s for s in sources) >= 4 and sum(":" in s for s in sources) >= 15


def test_a_repeated_configfile_names_the_files_and_the_fix():
    argv = ["snakemake", f"--configfile={BASE}", "--configfile=overlay.yaml", "-n"]
    with pytest.raises(ConfigError) as raised:
        workflow_config([BASE], {}, ROOT, argv=argv)
    line = first_line(str(raised.value))
    assert line.startswith("invalid command line: --configfile given 2 times"), line
    assert f"snakemake --configfile {BASE} overlay.yaml" in line, line


def test_an_overlay_alone_names_it_and_what_it_lacks(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("pretrain:\n  steps: 3\n")
    with pytest.raises(ConfigError) as raised:
        workflow_config([overlay], {}, ROOT)
    line = first_line(str(raised.value))
    assert line.startswith(
        f"invalid config: {overlay}: an overlay, not a whole config (no run_name"
    ), line


# plan.py: one case of each path (loading a file, the schema of a file's value, an override, a
# dotted override Snakemake's --config does not accept, a malformed override)
PLAN_CASES = {
    "tab": (["tab"], "{file}:2: not valid YAML: a tab"),
    "a folder": (["a folder"], "{file}: is a folder"),
    "steps: 16.0": (["steps: 16.0"], "pretrain.steps: 16.0 is not of type 'integer' (in {file}:2)"),
    "--config pretrain.steps=abc": (
        ["--config", "pretrain.steps=abc"],
        "pretrain.steps: 'abc' is not of type 'integer' (in --config)",
    ),
    "--config pretrain": (["--config", "pretrain"], "--config pretrain: not KEY=VALUE"),
}


@pytest.mark.parametrize("case", list(PLAN_CASES))
def test_plan_prints_one_line_without_a_traceback(tmp_path, case):
    args, expected = PLAN_CASES[case]
    path = None
    if args[0] in CASES:
        files, path = case_files(tmp_path, CASES[args[0]][0])
        args = files
    else:
        args = [BASE, *args]
    result = subprocess.run(
        [sys.executable, str(ROOT / "workflow_scripts" / "plan.py"), *args],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2 and not result.stdout, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert first_line(result.stderr).startswith(f"error: {expected.format(file=path)}"), (
        result.stderr
    )


# Values YAML read as something else than the user meant, and a key's own name: the message says
# what YAML read, in YAML's spelling, and how to write it (the hostile-input list of issue 51)
READ_AS_ELSE = {
    "--config seed=": (
        None, ["seed="], "invalid config: seed: null is not of type 'integer' (in --config)"
    ),
    "steps: true": (
        "pretrain:\n  steps: true\n", [], "pretrain.steps: true is not of type 'integer' (in {file}:2)"
    ),
    "--config pretrain={steps: 3": (
        None,
        ["pretrain={steps: 3"],
        "pretrain: '{{steps: 3' is not of type 'object' (YAML could not read it as a mapping or a"
        " list, so it stayed text: check its brackets, commas and quotes) (in --config)",
    ),
    "run_name of digits": (
        "run_name: 2024\n",
        [],
        "run_name: 2024 is not of type 'string' (YAML read a number: quote it to keep it text,"
        ' e.g. "0123") (in {file}:1)',
    ),
    "a model name with a space": (
        "models:\n  my model:\n    kind: hf\n    path: x/y\n",
        [],
        "models: 'my model' is not a safe name (letters, digits, _ . -; no '..', separators or"
        " shell characters) (in {file}:2)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(READ_AS_ELSE))
def test_a_value_yaml_read_otherwise_is_named_as_written_with_the_fix(tmp_path, case):
    text, entries, expected = READ_AS_ELSE[case]
    files, path = case_files(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        workflow_config(files, parse_config(entries), ROOT)
    assert expected.format(file=path) in first_line(str(raised.value))
