"""A dated results page per config (docs/results/<config>.md): the machine, the commit, the suite's
wall time, the claims table and the job time of every rule, read from a finished run's folder.

Measured numbers are generated, never typed: the README and the docs quote only what such a page
holds (tests/workflow/test_readme.py checks it). workflow_scripts/record_results.py runs the suite and
writes the page; everything here reads files given to it (a run folder, /proc files, a log), so
tests can feed it planted ones. No Snakemake import: the page is written after Snakemake exits.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import os
import platform
import re
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from depthlab.core.provenance import RECORD_NAME, SIDECAR_SUFFIX, package_versions
from depthlab.core.repo_files import CAPTIONS
from depthlab.plan.job_families import FAMILIES

PAGE_FOLDER = Path("docs") / "results"

# Every number on these pages moves with the CPU's kernels; the verdicts are what should hold.
MACHINE_NOTE = (
    "Numbers move between machines: the same commit and config give bit-identical results on "
    "one machine, but another CPU type rounds differently in its kernels, and training turns that "
    "rounding into different weights. Another machine should reproduce the verdicts (decided "
    "over seeds, with intervals), not the digits; job and wall times also depend on the "
    "machine's load."
)


@dataclass
class Machine:
    cpu_model: str
    cores: int  # the cores this process may run on (a container or cgroup may allow fewer)
    cores_total: int
    memory_gib: float | None
    host: str
    python: str
    torch: str | None


def cpu_model(cpuinfo: str) -> str:
    """The CPU's model name from /proc/cpuinfo's text ('unknown' where it names none, e.g. ARM)."""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        found = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.M)
        if found:
            return found.group(1).strip()
    return "unknown"


def memory_gib(meminfo: str) -> float | None:
    found = re.search(r"^MemTotal:\s*(\d+)\s*kB", meminfo, re.M)
    return int(found.group(1)) / 2**20 if found else None


def machine_info(
    cpuinfo_path: str | os.PathLike = "/proc/cpuinfo",
    meminfo_path: str | os.PathLike = "/proc/meminfo",
) -> Machine:
    """This machine, as a page records it (torch's version from its metadata: no import)."""

    def read(path):
        try:
            return Path(path).read_text()
        except OSError:
            return ""

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 0
    return Machine(
        cpu_model=cpu_model(read(cpuinfo_path)) if read(cpuinfo_path) else platform.processor(),
        cores=cores,
        cores_total=os.cpu_count() or cores,
        memory_gib=memory_gib(read(meminfo_path)),
        host=socket.gethostname(),
        python=platform.python_version(),
        torch=package_versions().get("torch"),
    )


# ---------------------------------------------------------------------------------------------
# The run's records


@dataclass
class RunRecords:
    """What the run's provenance records say about the run as a whole."""

    count: int = 0
    commits: Counter = field(default_factory=Counter)  # (commit, dirty) -> records
    hosts: Counter = field(default_factory=Counter)
    python: Counter = field(default_factory=Counter)
    torch: Counter = field(default_factory=Counter)
    first_start: _dt.datetime | None = None
    last_end: _dt.datetime | None = None

    @property
    def span_s(self) -> float | None:
        """First job's start to the last job's end: the run's wall time less Snakemake's own
        planning before its first job."""
        if self.first_start is None or self.last_end is None:
            return None
        return (self.last_end - self.first_start).total_seconds()


def _record_paths(run_dir: Path):
    for path in sorted(run_dir.rglob("*.json")):
        if path.name == RECORD_NAME or path.name.endswith(SIDECAR_SUFFIX):
            yield path


def read_records(run_dir: str | os.PathLike) -> RunRecords:
    records = RunRecords()
    for path in _record_paths(Path(run_dir)):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # not a record (a user's file named like one): nothing to report from it
        if not isinstance(record, dict) or "git" not in record:
            continue
        records.count += 1
        git = record.get("git") or {}
        records.commits[(git.get("commit"), git.get("dirty"))] += 1
        records.hosts[record.get("host")] += 1
        records.python[record.get("python")] += 1
        records.torch[(record.get("packages") or {}).get("torch")] += 1
        for key, pick in (("start", min), ("end", max)):
            if record.get(key):
                when = _dt.datetime.fromisoformat(record[key])
                attr = "first_start" if key == "start" else "last_end"
                current = getattr(records, attr)
                setattr(records, attr, when if current is None else pick(current, when))
    return records


# ---------------------------------------------------------------------------------------------
# Claims


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def read_claims(path: str | os.PathLike) -> list[dict]:
    """The rows of a run's claims.csv (depthlab.claims.COLUMNS), numbers as floats (NaN where
    empty)."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for key in (
            "measured",
            "low",
            "high",
            "size_measured",
            "size_low",
            "size_high",
            "untrained",
            "training_effect",
            "training_effect_low",
            "training_effect_high",
        ):
            row[key] = _number(row.get(key, ""))
    return rows


def _value(value: float, low: float, high: float) -> str:
    # the format of claims.md (depthlab.claims.render_markdown), so the two tables read alike
    if not math.isfinite(value):
        return "-"
    text = f"{value:.4g}"
    if math.isfinite(low) and math.isfinite(high):
        text += f" [{low:.4g}, {high:.4g}]"
    return text


# a * between a word (or `)`) and a word (or `(`) is arithmetic (l*(n), 2*sqrt(2)), never the
# start or end of emphasis, which Markdown would otherwise read it as
ARITHMETIC_STAR = re.compile(r"(?<=[\w)])\*(?=[\w(])")


def markdown_cell(text) -> str:
    """A table cell's text as Markdown shows it: a bare | would end the cell (claims such as
    |gap before| - |gap after|), an arithmetic * would start italics."""
    text = str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")
    return ARITHMETIC_STAR.sub(r"\\*", text)


def _size_text(row: dict) -> str:
    size = row.get("size_verdict") or ""
    if row.get("size_band"):
        size = (
            f"**{size}**: {_value(row['size_measured'], row['size_low'], row['size_high'])}"
            f" vs band {row['size_band']}"
        )
    return size


def _claim_id(claim_id: str) -> str:
    """The id as code that breaks only after an underscore or a colon
    (`gromov_<wbr>block_<wbr>choice:<wbr>smollm2`; the site's docs/stylesheets/extra.css keeps
    the words together): the claims table then fits the site's column."""
    escaped = claim_id.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        '<code class="claim-id">'
        + escaped.replace("_", "_<wbr>").replace(":", ":<wbr>")
        + "</code>"
    )


# Each verdict's kind, which the site colours (docs/stylesheets/extra.css: .verdict-<kind>), so
# "reproduced" and "not testable" do not read alike; as a file the verdict stays bold text
VERDICT_KINDS = {
    "reproduced": "pass",
    "size reproduced": "pass",
    "not reproduced": "fail",
    "size not reproduced": "fail",
    "one seed: indicative": "indicative",
    "not testable at this scale": "untestable",
    "not testable on these data": "untestable",
}


def verdict_html(verdict: str) -> str:
    """The verdict as bold text with its kind's class (an unknown verdict: kind "other")."""
    kind = VERDICT_KINDS.get(verdict, "other")
    escaped = verdict.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f'<strong class="verdict verdict-{kind}">{escaped}</strong>'


def training_moved_text(row: dict) -> str:
    """trained - untrained with its paired interval and where training moved it ("-" for a row
    without untrained twins)."""
    effect = _value(
        row.get("training_effect", math.nan),
        row.get("training_effect_low", math.nan),
        row.get("training_effect_high", math.nan),
    )
    if effect == "-":
        return "-"
    moved = row.get("training_moved") or ""
    return f"{effect}: {moved}" if moved else effect


def claims_table(rows: list[dict]) -> str:
    """The claims as a table narrow enough for the site's column (id, value, seeds, the two
    verdicts, and trained - untrained where the row has twins), then one details line per claim:
    its statement, how the interval was made, the scale, the verdict's reason, the size
    comparison, the twins and what leaving out one layer did."""
    lines = [
        "| claim | measured [95% interval] | seeds | verdict | size verdict | "
        "trained - untrained: training moved it |",
        "|---|---|---|---|---|---|",
    ]
    details = ["### Claim details", ""]
    for row in rows:
        measured = _value(row["measured"], row["low"], row["high"])
        size = row.get("size_verdict") or ""
        shown_size = "-" if size in ("", "no size stated") else verdict_html(size)
        cells = [
            _claim_id(row["claim_id"]),
            measured,
            row.get("seeds"),
            verdict_html(row["verdict"]),
        ]
        moved = training_moved_text(row)
        lines.append(
            "| " + " | ".join(markdown_cell(c) for c in [*cells, shown_size, moved]) + " |"
        )
        statement = row.get("claim") or "(no statement)"
        parts = [statement if statement.endswith(".") else f"{statement}."]
        if row.get("interval") and measured != "-":
            parts.append(f"Measured: {measured} ({row['interval']}).")
        if row.get("scale"):
            parts.append(f"Scale: {row['scale']}.")
        parts.append(
            f"Verdict: {row['verdict']}" + (f": {row['reason']}." if row.get("reason") else ".")
        )
        if row.get("size_band"):
            parts.append(f"Size: {_size_text(row)}.")
        if row.get("kind"):
            parts.append(f"About: {row['kind']}.")
        if moved != "-":
            parts.append(
                f"Untrained twins: {_value(row['untrained'], math.nan, math.nan)}; trained - "
                f"untrained {moved}."
            )
        if row.get("layer_check"):
            parts.append(f"One layer left out: {row['layer_check']}.")
        text = " ".join(part.replace("\n", " ") for part in parts)
        details.append(f"- `{row['claim_id']}`: {text}")
    return "\n".join(lines) + "\n\n" + "\n".join(details) + "\n"


def _published_lm(row: dict) -> str | None:
    """The published LM a row is about (its scale reads "<name> (pretrained, ..."), or None."""
    scale = str(row.get("scale") or "")
    name = scale.split(" (pretrained", 1)[0]
    return name if " (pretrained" in scale and f":{name}" in row["claim_id"] else None


def _families(verdicts: list[str]) -> str:
    """What the families' verdicts on one claim say together: "agree" (the same decided
    verdict), "disagree" (reproduced on one, not reproduced on another), "one decides" (the
    others not testable), "neither decides"."""
    decided = [v for v in verdicts if v in ("reproduced", "not reproduced")]
    if not decided:
        return "neither decides"
    if len(set(decided)) > 1:
        return "disagree"
    return "agree" if len(decided) == len([v for v in verdicts if v != "-"]) else "one decides"


def real_lm_table(rows: list[dict]) -> str:
    """The claims decided on more than one published LM, one line per claim and a column per LM,
    and whether the families agree (_families); a family whose norms are not Pre-LN keeps its
    own column ("" when no claim has two LMs)."""
    by_claim, models = {}, []
    for row in rows:
        model = _published_lm(row)
        if model is None:
            continue
        key = row["claim_id"].replace(f":{model}", ":<LM>", 1)
        by_claim.setdefault(key, {})[model] = row
        models += [model] if model not in models else []
    shared = {k: v for k, v in by_claim.items() if len(v) > 1}
    if not shared:
        return ""
    lines = [
        "### The real LMs side by side",
        "",
        "Each claim decided on more than one published LM, one column per model family (the "
        "scale in each row's details says where its norms sit: a Curse-of-Depth row on a "
        "family that is not Pre-LN tests another architecture).",
        "",
        "| claim | " + " | ".join(models) + " | the families |",
        "|---|" + "---|" * len(models) + "---|",
    ]
    for key, per_model in shared.items():
        verdicts = [per_model[m]["verdict"] if m in per_model else "-" for m in models]
        agree = _families(verdicts)
        cells = [_claim_id(key), *(verdict_html(v) if v != "-" else v for v in verdicts), agree]
        lines.append("| " + " | ".join(markdown_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def verdict_counts(rows: list[dict]) -> Counter:
    return Counter(row["verdict"] for row in rows)


# ---------------------------------------------------------------------------------------------
# Job times (Snakemake benchmark files: results/<run>/benchmarks/<rule>/<job>.tsv)


@dataclass
class JobTime:
    rule: str
    job: str
    seconds: float


@dataclass
class RuleTime:
    rule: str
    jobs: int
    total_s: float
    max_s: float
    longest: str


def read_benchmarks(folder: str | os.PathLike, since: float | None = None) -> list[JobTime]:
    """One entry per benchmark file under `folder` (the `s` column; a repeated benchmark's
    mean). `since` (a time.time()): only files written from then on, the jobs of one invocation."""
    folder = Path(folder)
    jobs = []
    for path in sorted(folder.rglob("*.tsv")):
        if since is not None and path.stat().st_mtime < since:
            continue
        with open(path, newline="") as handle:
            seconds = [_number(row.get("s", "")) for row in csv.DictReader(handle, delimiter="\t")]
        seconds = [s for s in seconds if math.isfinite(s)]
        if not seconds:
            continue  # a benchmark of a job that failed before writing one
        relative = path.relative_to(folder).with_suffix("")
        rule, job = relative.parts[0], "/".join(relative.parts[1:]) or relative.parts[0]
        jobs.append(JobTime(rule, job, sum(seconds) / len(seconds)))
    return jobs


def rule_times(jobs: list[JobTime]) -> list[RuleTime]:
    """Per rule: jobs, summed and longest job time; the rule with the most time first."""
    by_rule: dict[str, list[JobTime]] = {}
    for job in jobs:
        by_rule.setdefault(job.rule, []).append(job)
    rules = []
    for rule, its in by_rule.items():
        longest = max(its, key=lambda j: j.seconds)
        rules.append(
            RuleTime(rule, len(its), sum(j.seconds for j in its), longest.seconds, longest.job)
        )
    return sorted(rules, key=lambda r: (-r.total_s, r.rule))


def rule_table(rules: list[RuleTime]) -> str:
    lines = [
        "| rule | jobs | job time (s, sum) | longest job (s) | longest job |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rules:
        lines.append(f"| `{r.rule}` | {r.jobs} | {r.total_s:.1f} | {r.max_s:.1f} | `{r.longest}` |")
    total = sum(r.total_s for r in rules)
    lines.append(f"| **total** | {sum(r.jobs for r in rules)} | {total:.1f} | | |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Wall time


def duration(seconds: float) -> str:
    """842.4 -> '842.4 s (14 min 2 s)'."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours} h {minutes} min {secs} s" if hours else f"{minutes} min {secs} s"
    return f"{seconds:.1f} s ({clock})"


def wall_time_from_log(text: str) -> float | None:
    """The wall time a timed run's log ends with: `/usr/bin/time -f '%e s wall'` ('842.41 s
    wall', what record_results.py writes too), bash's `time` ('real 14m2.410s') or Snakemake's
    own last line ('Elapsed time: 0:14:02.410000', from its first job to its last, less than
    the command's time); the last one wins (a log appended to by several runs)."""
    found = None
    for line in text.splitlines():
        line = line.strip()
        if m := re.fullmatch(r"(\d+(?:\.\d+)?) s wall", line):
            found = float(m.group(1))
        elif m := re.fullmatch(r"real\s+(?:(\d+)m)?(\d+(?:\.\d+)?)s", line):
            found = int(m.group(1) or 0) * 60 + float(m.group(2))
        elif m := re.fullmatch(
            r"Elapsed time: (?:(\d+) days?, )?(\d+):(\d+):(\d+(?:\.\d+)?)", line
        ):
            days, hours, minutes, seconds = m.groups()
            found = ((int(days or 0) * 24 + int(hours)) * 60 + int(minutes)) * 60 + float(seconds)
    return found


# ---------------------------------------------------------------------------------------------
# The page


@dataclass
class Run:
    """One finished run, as the page reports it."""

    config_files: list[str]
    run_dir: str
    command: str
    wall_s: float | None
    wall_source: str  # how the wall time was measured (this script's clock, a log, ...)
    date: _dt.datetime
    machine: Machine
    claims: list[dict]
    jobs: list[JobTime]
    records: RunRecords
    skipped_jobs: int = 0  # benchmark files older than this invocation (jobs that did not run)
    # RunFigure (below) of each figure copied beside the page, into
    # `figure_folder` (relative to the page)
    figures: list = field(default_factory=list)
    figure_folder: str = ""


def page_name(config_files: list[str]) -> str:
    """docs/results/<name>.md: the last config file's stem (`config/default.yaml` -> default)."""
    return Path(config_files[-1]).stem


def page_path(config_files: list[str], root: str | os.PathLike = ".") -> Path:
    return Path(root) / PAGE_FOLDER / f"{page_name(config_files)}.md"


def _commit_text(records: RunRecords) -> str:
    if not records.commits:
        return "unknown (no provenance records)"
    parts = []
    for (commit, dirty), n in records.commits.most_common():
        state = {True: "dirty: uncommitted changes", False: "clean", None: "unknown state"}[dirty]
        parts.append(f"`{commit}` ({state}; {n} of {records.count} records)")
    return "; ".join(parts)


def _counter_text(counter: Counter) -> str:
    return ", ".join(str(k) for k, _ in counter.most_common() if k) or "unknown"


def render_page(run: Run) -> str:
    m, records = run.machine, run.records
    configs = ", ".join(f"`{c}`" for c in run.config_files)
    wall = duration(run.wall_s) if run.wall_s is not None else "not measured"
    job_total = sum(j.seconds for j in run.jobs)
    cores = f"{m.cores} available to the run" + (
        f" (of {m.cores_total} on the machine)" if m.cores_total != m.cores else ""
    )
    facts = [
        ("date", run.date.strftime("%Y-%m-%d %H:%M %Z").strip()),
        ("config", configs),
        ("results", f"`{run.run_dir}/`"),
        ("command", f"`{run.command}`"),
        ("commit", _commit_text(records)),
        ("Snakemake wall time", f"{wall}, {run.wall_source}"),
        ("jobs", f"{len(run.jobs)}, {job_total:.1f} s of job time in all"),
        ("CPU", f"{m.cpu_model}, {cores}"),
        ("memory", f"{m.memory_gib:.1f} GiB" if m.memory_gib is not None else "unknown"),
        ("host", m.host),
        ("Python / torch", f"{m.python} / {m.torch or 'not installed'}"),
    ]
    if records.span_s is not None:
        facts.insert(
            6, ("first job start to last job end", f"{duration(records.span_s)}, from its records")
        )
    if run.skipped_jobs:
        facts.append(
            ("not rerun", f"{run.skipped_jobs} jobs were up to date; their times are not counted")
        )
    warnings = []
    recorded_hosts = {h for h in records.hosts if h}
    if recorded_hosts and recorded_hosts != {m.host}:
        warnings.append(
            f"The run's records name host {_counter_text(records.hosts)}, this page was written "
            f"on {m.host}: the machine lines describe the latter."
        )
    recorded_torch = {t for t in records.torch if t}
    if recorded_torch and recorded_torch != {m.torch}:
        warnings.append(f"The run's jobs used torch {_counter_text(records.torch)}.")
    if len(records.commits) > 1:
        warnings.append("The run's records come from more than one commit or checkout state.")

    counts = verdict_counts(run.claims)
    lines = [
        f"# Results: {configs}",
        "",
        "Written by `workflow_scripts/record_results.py` from a finished run; not edited by hand "
        "(see [Recording results](../development.md#recording-results)).",
        "",
        "| fact | value |",
        "|---|---|",
        *(f"| {key} | {markdown_cell(value)} |" for key, value in facts),
        "",
        MACHINE_NOTE,
        "",
        *(f"**Note:** {w}\n" for w in warnings),
        "## Claims",
        "",
        f"From `{run.run_dir}/claims.csv` ({len(run.claims)} claims: "
        + ", ".join(f"{n} {v}" for v, n in counts.most_common())
        + "). The run's `claims.md` also gives each claim's paper and the paper's value.",
        "",
        claims_table(run.claims) if run.claims else "No claims table in this run.\n",
        *filter(None, [real_lm_table(run.claims)]),
        "## Job time per rule",
        "",
        f"From Snakemake's benchmark files (`{run.run_dir}/benchmarks/<rule>/`, the `s` column: "
        "each job's wall time; jobs that run side by side add up to more than the wall time).",
        "",
        rule_table(rule_times(run.jobs)) if run.jobs else "No benchmark files in this run.\n",
    ]
    if run.figures:
        lines += [
            "## Figures",
            "",
            f"Every figure of the run, by stage, each with its caption (the one "
            f"`snakemake --report` gives it) and its path under `{run.run_dir}/figures/`.",
            "",
        ]
        group = None
        for figure in run.figures:
            if figure.group != group:
                group = figure.group
                lines += [f"### {group}", ""]
            # a link to the figure itself: its full size, where a wide one can be read (the
            # site's docs/hooks/figures.py also lays wide ones out at a readable size)
            source = f"{run.figure_folder}/{figure.path}"
            lines += [
                f"[![{figure.path}]({source})]({source})",
                "",
                f"`{run.run_dir}/figures/{figure.path}`: {figure.caption}",
                "",
            ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the run's figures
# Every figure of a finished run with its caption, grouped by stage, for its results page.
#
# A run's figures lie under results/<run>/figures/ as the rules write them (loss_curves,
# analysis/<text set>/<figure>, lens_swaps/<model>, scaling/<fit>, toy_loss_vs_depth,
# pruning/<figure>, depth_use/<figure>, finetuning). Each rule's caption is a Jinja template in
# rules/captions/ (Snakemake renders it into `snakemake --report`); the page renders the same
# template with the run's config, so the page and the report say the same of a figure.

# The figures' first path part -> (the page's group heading, its caption file, or None when the
# caption is named after the figure: `<group>_<figure>.rst`), in the order the stages run: each
# plotting family declares its own (depthlab.plan.job_families).
GROUPS = {
    declared.figures.key: (declared.figures.heading, declared.figures.caption)
    for declared in FAMILIES
    if declared.figures is not None
}


@dataclass
class RunFigure:
    path: str  # relative to the run's figures/ folder
    group: str
    caption: str


def _key(relative: Path) -> str:
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def figure_files(figures_dir: Path) -> list[Path]:
    """The run's figures (relative to `figures_dir`), grouped in stage order, sorted within."""
    found = [
        path.relative_to(figures_dir)
        for path in figures_dir.rglob("*")
        if path.is_file() and path.suffix in (".png", ".svg", ".pdf", ".jpg")
    ]
    order = list(GROUPS)
    return sorted(
        found,
        key=lambda p: (order.index(_key(p)) if _key(p) in order else len(order), p.as_posix()),
    )


def caption_markdown(relative: Path, config: dict) -> str:
    """The figure's caption from its rule's template, rendered with `config` (the run's merged
    config) and the figure's wildcards, as one Markdown paragraph; a figure no rule captions
    says so."""
    import jinja2

    key = _key(relative)
    if key not in GROUPS:
        return f"(no caption: no rule of this workflow writes figures/{relative.as_posix()})"
    caption = GROUPS[key][1] or f"{key}_{relative.stem}"
    template = CAPTIONS / f"{caption}.rst"
    if not template.is_file():
        return f"(no caption: {template.name} is missing from rules/captions/)"
    # the wildcards of the rule that wrote it: analysis/<job>/<figure>, lens_swaps/<model>,
    # scaling/<job>
    job = relative.parts[1] if len(relative.parts) > 2 else relative.stem
    snakemake = SimpleNamespace(
        config=config, wildcards=SimpleNamespace(job=job, model=relative.stem)
    )
    text = jinja2.Template(template.read_text(encoding="utf-8")).render(snakemake=snakemake)
    return " ".join(text.replace("``", "`").split())


def run_figures(figures_dir: Path, config: dict) -> list[RunFigure]:
    return [
        RunFigure(
            path=relative.as_posix(),
            group=GROUPS.get(_key(relative), ("Other figures", None))[0],
            caption=caption_markdown(relative, config),
        )
        for relative in figure_files(figures_dir)
    ]
