"""The results page (depthlab.claims.results_page, workflow_scripts/record_results.py) on planted run
folders: the claims it lists, the per-rule job times it sums, the machine and commit it names."""

import csv
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from depthlab.claims import results_page as page

ROOT = Path(__file__).resolve().parents[3]

CLAIMS = [
    {
        "claim_id": "cod_val_loss",
        "paper": "Curse of Depth",
        "claim": "LNS reaches a lower validation loss than Pre-LN",
        "paper_value": "lower",
        "measured": "0.21417",
        "low": "0.0246",
        "high": "0.33712",
        "interval": "over 3 seeds",
        "seeds": "3",
        "scale": "12 layers x 128, 262k tokens",
        "verdict": "reproduced",
        "reason": "interval above 0",
        "size_band": "",
        "size_measured": "",
        "size_low": "",
        "size_high": "",
        "size_verdict": "no size stated",
    },
    {
        "claim_id": "gromov_healing_gap:lns",
        "paper": "Gromov et al.",
        "claim": "|gap before| - |gap after| > 0",
        "paper_value": "",
        "measured": "",
        "low": "",
        "high": "",
        "interval": "",
        "seeds": "1",
        "scale": "12 layers x 128, 262k tokens",
        "verdict": "not testable at this scale",
        "reason": "no healed variant",
        "size_band": "",
        "size_measured": "",
        "size_low": "",
        "size_high": "",
        "size_verdict": "no size stated",
    },
    {
        "claim_id": "liu_a_m:chinchilla_liu",
        "paper": "Liu et al.",
        "claim": "width exponent",
        "paper_value": "0.97",
        "measured": "0.94551",
        "low": "0.83691",
        "high": "1.0377",
        "interval": "",
        "seeds": "1",
        "scale": "203 points (chinchilla_liu)",
        "verdict": "reproduced",
        "reason": "",
        "size_band": "[0.8, 1.2]",
        "size_measured": "0.94551",
        "size_low": "0.83691",
        "size_high": "1.0377",
        "size_verdict": "size reproduced",
    },
]

# rule -> {job: seconds}; a job in a subfolder (analysis's <text_set>/<model>) counts once
BENCHMARKS = {
    "pretrain_model": {"pre_ln": 120.25, "lns": 130.5, "post_ln": 99.0},
    "analyse_model": {"val/pre_ln": 10.5, "val/lns": 11.25},
    "make_claims": {"claims": 6.0},
}
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def plant_run(run_dir: Path, commit: str = "a" * 40, dirty: bool = False) -> Path:
    run_dir.mkdir(parents=True)
    with open(run_dir / "claims.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(CLAIMS[0]))
        writer.writeheader()
        writer.writerows(CLAIMS)
    for rule, jobs in BENCHMARKS.items():
        for job, seconds in jobs.items():
            path = run_dir / "benchmarks" / rule / f"{job}.tsv"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(HEADER + f"{seconds}\t0:00:10\t1\t1\t1\t1\t0\t0\t90\t{seconds}\n")
    for i, (start, end) in enumerate([("08:00:00", "08:02:00"), ("08:01:00", "08:10:30")]):
        folder = run_dir / "models" / f"m{i}"
        folder.mkdir(parents=True)
        record = {
            "git": {"commit": commit, "dirty": dirty},
            "host": "planted-host",
            "python": "3.11.7",
            "packages": {"torch": "2.13.0+cpu"},
            "start": f"2026-12-02T{start}+00:00",
            "end": f"2026-12-02T{end}+00:00",
        }
        (folder / "provenance.json").write_text(json.dumps(record))
    return run_dir


def machine(host="planted-host", torch="2.13.0+cpu"):
    return page.Machine("Planted CPU 9000", 2, 4, 23.5, host, "3.11.7", torch)


def planted_page(run_dir: Path, **changes) -> str:
    run = page.Run(
        config_files=["config/default.yaml"],
        run_dir="results/default",
        command=".venv/bin/snakemake --cores all --configfile config/default.yaml",
        wall_s=842.41,
        wall_source="timed by record_results.py",
        date=dt.datetime(2026, 12, 3, 9, 15, tzinfo=dt.UTC),
        machine=machine(),
        claims=page.read_claims(run_dir / "claims.csv"),
        jobs=page.read_benchmarks(run_dir / "benchmarks"),
        records=page.read_records(run_dir),
    )
    for key, value in changes.items():
        setattr(run, key, value)
    return page.render_page(run)


def table_rows(text: str, heading: str) -> list[list[str]]:
    section = text[text.index(heading) :]
    section = section[: section.find("\n## ", 1)] if "\n## " in section[1:] else section
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[2:]]


def test_rule_times_sum_and_max_per_rule(tmp_path):
    jobs = page.read_benchmarks(plant_run(tmp_path / "run") / "benchmarks")
    assert len(jobs) == 6
    times = {r.rule: r for r in page.rule_times(jobs)}
    assert times["pretrain_model"].jobs == 3
    assert times["pretrain_model"].total_s == pytest.approx(349.75)
    assert times["pretrain_model"].max_s == pytest.approx(130.5)
    assert times["pretrain_model"].longest == "lns"
    assert times["analyse_model"].total_s == pytest.approx(21.75)
    assert times["analyse_model"].longest == "val/lns"
    # the rule with the most time first
    assert [r.rule for r in page.rule_times(jobs)] == [
        "pretrain_model",
        "analyse_model",
        "make_claims",
    ]


def test_page_holds_the_per_rule_sums_and_the_total(tmp_path):
    text = planted_page(plant_run(tmp_path / "run"))
    rows = {row[0]: row for row in table_rows(text, "## Job time per rule")}
    assert rows["`pretrain_model`"][1:4] == ["3", "349.8", "130.5"]
    assert rows["`analyse_model`"][1:4] == ["2", "21.8", "11.2"]
    assert rows["`make_claims`"][1:4] == ["1", "6.0", "6.0"]
    assert rows["**total**"][1:3] == ["6", "377.5"]
    assert "6, 377.5 s of job time in all" in text


def test_page_lists_every_claim_with_its_interval_seeds_and_verdicts(tmp_path):
    """A narrow table (id, value, seeds, the two verdicts: readable in the site's 720 px column;
    before, the statements and reasons made it 830 px and hid the size verdict), and one
    details line per claim with its statement, interval, scale and reasons."""
    text = planted_page(plant_run(tmp_path / "run"))
    assert (
        "| claim | measured [95% interval] | seeds | verdict | size verdict | trained - "
        "untrained: training moved it |" in text
    )
    rows = {row[0]: row for row in table_rows(text, "## Claims") if len(row) == 6}

    def code(claim_id):  # breakable after _ and : only
        breaks = claim_id.replace("_", "_<wbr>").replace(":", ":<wbr>")
        return f'<code class="claim-id">{breaks}</code>'

    assert set(rows) == {code(c["claim_id"]) for c in CLAIMS}
    val_loss = rows[code("cod_val_loss")]
    passed = '<strong class="verdict verdict-pass">reproduced</strong>'
    assert val_loss[1:] == ["0.2142 [0.0246, 0.3371]", "3", passed, "-", "-"]
    assert rows[code("gromov_healing_gap:lns")][1] == "-"
    assert rows[code("liu_a_m:chinchilla_liu")][4] == (
        '<strong class="verdict verdict-pass">size reproduced</strong>'
    )
    assert (
        "- `cod_val_loss`: LNS reaches a lower validation loss than Pre-LN. Measured: 0.2142 "
        "[0.0246, 0.3371] (over 3 seeds). Scale: 12 layers x 128, 262k tokens. Verdict: "
        "reproduced: interval above 0." in text
    )
    assert "- `gromov_healing_gap:lns`: |gap before| - |gap after| > 0. Scale:" in text
    assert "Size: **size reproduced**: 0.9455 [0.8369, 1.038] vs band [0.8, 1.2]." in text
    assert "3 claims: 2 reproduced, 1 not testable at this scale" in text


def test_the_facts_table_has_a_header_row(tmp_path):
    """Before, the machine/commit table's header row was empty (`| | |`), drawn as a blank band
    above the facts."""
    text = planted_page(plant_run(tmp_path / "run"))
    assert "| | |\n|---|---|" not in text
    assert "| fact | value |\n|---|---|\n| date | 2026-12-03 09:15 UTC |" in text


def test_page_names_the_machine_commit_and_wall_time(tmp_path):
    text = planted_page(plant_run(tmp_path / "run", commit="b" * 40, dirty=True))
    assert "2026-12-03 09:15 UTC" in text
    assert f"`{'b' * 40}` (dirty: uncommitted changes; 2 of 2 records)" in text
    assert "842.4 s (14 min 2 s), timed by record_results.py" in text
    # first record's start 08:00:00 to the last end 08:10:30
    assert "630.0 s (10 min 30 s), from its records" in text
    assert "Planted CPU 9000, 2 available to the run (of 4 on the machine)" in text
    assert "23.5 GiB" in text and "3.11.7 / 2.13.0+cpu" in text
    assert "verdicts" in page.MACHINE_NOTE and page.MACHINE_NOTE in text
    assert "**Note:**" not in text  # same host and torch as the records


def test_page_warns_when_the_machine_is_not_the_runs(tmp_path):
    run_dir = plant_run(tmp_path / "run")
    text = planted_page(run_dir, machine=machine(host="elsewhere", torch="2.12.0"))
    assert "records name host planted-host, this page was written on elsewhere" in text
    assert "The run's jobs used torch 2.13.0+cpu." in text


def test_benchmarks_before_the_invocation_are_left_out(tmp_path):
    folder = plant_run(tmp_path / "run") / "benchmarks"
    old = folder / "pretrain_model" / "pre_ln.tsv"
    os.utime(old, (1_000_000, 1_000_000))
    jobs = page.read_benchmarks(folder, since=2_000_000)
    assert len(jobs) == 5 and "pre_ln" not in {j.job for j in jobs if j.rule == "pretrain_model"}


def test_machine_info_from_planted_proc_files(tmp_path):
    (tmp_path / "cpuinfo").write_text(
        "processor\t: 0\nmodel name\t: Planted EPYC 7B13\nflags\t: avx\n\n"
        "processor\t: 1\nmodel name\t: Planted EPYC 7B13\n"
    )
    (tmp_path / "meminfo").write_text("MemTotal:       24683568 kB\nMemFree: 1 kB\n")
    found = page.machine_info(tmp_path / "cpuinfo", tmp_path / "meminfo")
    assert found.cpu_model == "Planted EPYC 7B13"
    assert found.memory_gib == pytest.approx(24683568 / 2**20)
    assert found.cores >= 1 and found.cores_total >= found.cores


@pytest.mark.parametrize(
    "log, seconds",
    [
        ("Finished job 0.\n74 of 74 steps (100%) done\n842.41 s wall\ndone\n", 842.41),
        ("...\nreal\t14m2.410s\nuser\t1m0.000s\nsys\t0m1.000s\n", 842.41),
        ("real 0m5.5s\n12.0 s wall\n", 12.0),  # the last timing wins
        ("32 of 32 steps (100%) done\nElapsed time: 0:07:34.759769\n", 454.759769),
        ("Elapsed time: 1 day, 2:00:00\n", 93600.0),
        ("74 of 74 steps (100%) done\n", None),
    ],
)
def test_wall_time_from_log(log, seconds):
    found = page.wall_time_from_log(log)
    assert found == (pytest.approx(seconds) if seconds is not None else None)


def test_duration():
    assert page.duration(842.41) == "842.4 s (14 min 2 s)"
    assert page.duration(3725) == "3725.0 s (1 h 2 min 5 s)"


def test_page_name_is_the_config_stem():
    assert page.page_name(["config/default.yaml"]) == "default"
    assert page.page_path(["a.yaml", "config/local/mine.yaml"]) == Path("docs/results/mine.md")


def test_record_results_script_reads_a_finished_run(tmp_path):
    """The script end to end (--finished): the page from a planted run folder and log, its
    figure copied beside it."""
    run_dir = plant_run(tmp_path / "run")
    (run_dir / "figures").mkdir()
    (run_dir / "figures" / "loss_curves.png").write_bytes(b"planted png")
    log = tmp_path / "suite.log"
    log.write_text("74 of 74 steps (100%) done\n100.25 s wall\n")
    out = tmp_path / "page.md"
    result = subprocess.run(
        [
            sys.executable,
            "workflow_scripts/record_results.py",
            "--configfile",
            "config/test.yaml",
            "--finished",
            "--results",
            str(run_dir),
            "--log",
            str(log),
            "--command",
            ".venv/bin/snakemake --cores 2",
            "--date",
            "2026-12-05 00:45",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "| date | 2026-12-05 00:45 UTC |" in text  # a re-rendered page keeps the run's date
    assert "# Results: `config/test.yaml`" in text
    assert "`results/test/`" in text  # named by the config's run_name, wherever it was read
    assert "100.2 s (1 min 40 s), from its log (`suite.log`)" in text
    assert "`.venv/bin/snakemake --cores 2`" in text
    assert "| **total** | 6 | 377.5 | | |" in text
    assert (tmp_path / "page" / "loss_curves.png").read_bytes() == b"planted png"
    # shown, and a link to its full size
    assert "[![loss_curves.png](page/loss_curves.png)](page/loss_curves.png)" in text


def test_record_results_script_names_a_missing_figure(tmp_path):
    run_dir = plant_run(tmp_path / "run")
    result = subprocess.run(
        [
            sys.executable,
            "workflow_scripts/record_results.py",
            "--configfile",
            "config/test.yaml",
            "--finished",
            "--results",
            str(run_dir),
            "--figure",
            "nope.png",
            "--out",
            str(tmp_path / "page.md"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "nope.png: no such figure" in result.stderr
    assert not (tmp_path / "page.md").exists()


def test_record_results_script_refuses_timing_without_finished(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "workflow_scripts/record_results.py",
            "--configfile",
            "config/test.yaml",
            "--wall-time",
            "5",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "add --finished" in result.stderr


def test_record_results_shows_every_figure_of_the_run_with_its_caption_by_stage(tmp_path):
    """Before, the page showed only loss_curves.png (1 of the default run's 22 figures), with no
    caption. Now every figure, grouped by stage in the order the stages run, each with its
    rule's caption rendered for this run (the config's values and the figure's wildcards)."""
    run_dir = plant_run(tmp_path / "run")
    figures = run_dir / "figures"
    for name in ("pruning/sweep.png", "analysis/val/angles.png", "loss_curves.png",
                 "lens_swaps/pre_ln.png", "scaling/chinchilla_liu.png"):  # fmt: skip
        (figures / name).parent.mkdir(parents=True, exist_ok=True)
        (figures / name).write_bytes(name.encode())
    out = tmp_path / "page.md"
    result = subprocess.run(
        [sys.executable, "workflow_scripts/record_results.py", "--configfile", "config/test.yaml",
         "--finished", "--results", str(run_dir), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings[1:] == [
        "### Pretraining",
        "### Analysis",
        "### Analysis: tuned lens and layer swaps",
        "### Scaling laws",
        "### Pruning",
    ]  # headings[0]: the claim details
    for name in ("pruning/sweep.png", "analysis/val/angles.png", "lens_swaps/pre_ln.png"):
        assert f"[![{name}](page/{name})](page/{name})" in text
        assert (tmp_path / "page" / name).read_bytes() == name.encode()
    assert "{{" not in text and "``" not in text
    # each caption rendered with the run's values and the figure's wildcards
    assert (
        "`results/test/figures/lens_swaps/pre_ln.png`: Tuned lens and layer swaps of model `pre_ln`"
        in text
    )
    assert "fit `chinchilla_liu`" in text
    assert "`results/test/figures/pruning/sweep.png`: Validation loss and lm-eval accuracy" in text


def test_page_shows_the_twins_and_the_real_lms_side_by_side(tmp_path):
    """A row with untrained twins shows trained - untrained and where training moved it; claims
    decided on two published LMs get a side-by-side table that says whether they agree."""
    lm_row = {**CLAIMS[0], "verdict": "reproduced", "reason": "above", "seeds": "1"}
    rows = [
        {**CLAIMS[0], "untrained": "0.05", "training_effect": "0.16417",
         "training_effect_low": "0.01", "training_effect_high": "0.3",
         "training_moved": "towards the claim", "layer_check": "holds without any one of 12 layers"},
        {**lm_row, "claim_id": "cod_deep_identity:smollm2",
         "scale": "smollm2 (pretrained, 30 layers)"},
        {**lm_row, "claim_id": "cod_deep_identity:gemma3", "verdict": "not reproduced",
         "scale": "gemma3 (pretrained, 18 layers; a norm before and after each sub-layer)"},
        {**lm_row, "claim_id": "csordas_second_half:smollm2",
         "scale": "smollm2 (pretrained, 30 layers)"},
        {**lm_row, "claim_id": "csordas_second_half:gemma3",
         "scale": "gemma3 (pretrained, 18 layers)"},
    ]  # fmt: skip
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / "claims.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text = planted_page(run_dir, jobs=[], records=page.read_records(run_dir))
    claims = {row[0]: row for row in table_rows(text, "## Claims") if len(row) == 6}
    assert claims['<code class="claim-id">cod_<wbr>val_<wbr>loss</code>'][5] == (
        "0.1642 [0.01, 0.3]: towards the claim"
    )
    assert "One layer left out: holds without any one of 12 layers." in text
    side = {row[0]: row for row in table_rows(text, "### The real LMs side by side")}
    deep = side['<code class="claim-id">cod_<wbr>deep_<wbr>identity:<wbr>&lt;LM&gt;</code>']
    assert deep[1:] == [
        '<strong class="verdict verdict-pass">reproduced</strong>',
        '<strong class="verdict verdict-fail">not reproduced</strong>',
        "disagree",
    ]
    half = side['<code class="claim-id">csordas_<wbr>second_<wbr>half:<wbr>&lt;LM&gt;</code>']
    assert half[-1] == "agree"
    assert page._families(["reproduced", "not testable at this scale"]) == "one decides"
    assert page._families(["not testable at this scale"] * 2) == "neither decides"


@pytest.mark.parametrize(
    "verdict, kind",
    [
        ("reproduced", "pass"),
        ("size reproduced", "pass"),
        ("not reproduced", "fail"),
        ("size not reproduced", "fail"),
        ("one seed: indicative", "indicative"),
        ("not testable at this scale", "untestable"),
        ("not testable on these data", "untestable"),
        ("a <new> verdict", "other"),
    ],
)
def test_each_verdict_is_marked_with_its_kind(verdict, kind):
    """The site colours verdicts by kind (issue 51: bold black "reproduced" read like "not
    testable"); every verdict the claims write has a kind, and the text stays escaped."""
    escaped = verdict.replace("<", "&lt;").replace(">", "&gt;")
    assert page.verdict_html(verdict) == (
        f'<strong class="verdict verdict-{kind}">{escaped}</strong>'
    )


def test_every_verdict_the_claims_write_has_a_kind():
    from depthlab.claims import verdicts

    written = {
        value
        for name, value in vars(verdicts).items()
        if name.isupper()
        and isinstance(value, str)
        and name != "NO_SIZE"
        and name not in ("TOO_WIDE", "INIT_SHOWS_IT", "INIT_CONTRADICTS_IT", "ONE_LAYER_DECIDES")
    }
    assert written <= set(page.VERDICT_KINDS), written - set(page.VERDICT_KINDS)


def test_an_arithmetic_star_stays_a_star_and_emphasis_stays_emphasis():
    """gromov_deep_block's `l*(n) / (L - n), l*(n) the start` rendered as italics between the
    two stars; the cell now escapes them, and leaves the claims' own *italics* alone."""
    import markdown
    from depthlab.claims.results_page import markdown_cell

    cell = markdown_cell("mean of l*(n) / (L - n), l*(n) the start, 2*sqrt(2) (*seeds*) |x|")
    html = markdown.markdown(cell)
    assert "l*(n) / (L - n), l*(n) the start, 2*sqrt(2)" in html
    assert "<em>seeds</em>" in html and html.count("<em>") == 1
    assert "\\|x\\|" in cell


def test_the_angular_distance_caption_names_the_text_sets_own_models():
    """The caption said "Rows: the norm schemes, the depth x width sweep, hub models" on a run
    of one user's model too."""
    config = {"run_name": "mine", "analysis": {"models": ["a", "b"], "text_sets": {"s": {}}}}
    caption = page.caption_markdown(Path("analysis/s/angular_distance.png"), config)
    assert "one panel per model of the text set: a, b." in caption and "norm schemes" not in caption
    config["analysis"]["text_sets"]["s"] = {"models": ["mine"]}
    caption = page.caption_markdown(Path("analysis/s/angular_distance.png"), config)
    assert "one panel per model of the text set: mine." in caption
