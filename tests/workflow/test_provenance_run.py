"""Provenance on a real run of config/test.yaml (the session's finished run, conftest.py): every
record holds the checksums of its job's final outputs, the audit catches an edited table and an
edited figure, and the README's report command leaves the checkout's git status as it was."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from depthlab.core import provenance
from depthlab.core.audit import main as audit
from depthlab.core.provenance import RECORD_NAME, SIDECAR_SUFFIX, output_checksums
from test_workflow import snakemake

ROOT = Path(__file__).resolve().parents[2]
RUN = Path("results") / "test"

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def checkout(finished_test_checkout):
    return finished_test_checkout


def git_status(checkout: Path) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_every_record_holds_the_checksums_of_its_jobs_final_outputs(checkout):
    """Each job writes its record last (Snakemake's .snakemake_timestamp comes after it and is
    left out): what every record lists is exactly what lies beside it after the run."""
    run = checkout / RUN
    records = sorted([*run.rglob(RECORD_NAME), *run.rglob(f"*{SIDECAR_SUFFIX}")])
    rules = set()
    for record_file in records:
        record = json.loads(record_file.read_text())
        assert record["outputs"], record_file
        assert record["outputs"] == output_checksums(record_file), record_file
        rules.add(record["rule"])
    assert {"prepare_data", "pretrain_model", "prune_model", "plot_pruning", "make_claims"} <= rules
    assert (run / "models" / "lns" / ".snakemake_timestamp").is_file()


def audit_problems(checkout: Path, monkeypatch, capsys, path: Path) -> list[str]:
    """The audit's problem lines for `path`, run from the checkout's root as a user runs it;
    dirty commits left out (this scratch copy of the checkout is not its commit)."""
    monkeypatch.setattr(provenance, "_job", {})
    monkeypatch.chdir(checkout)
    audit(["--brief", str(path)])
    lines = capsys.readouterr().out.splitlines()
    return [line for line in lines if re.match(r"[A-Z]+: ", line) and not line.startswith("DIRTY")]


@pytest.mark.parametrize(
    "edited, audited, record",
    [
        ("pruning/lns/sweep.csv", "pruning/lns/sweep.csv", "pruning/lns/provenance.json"),
        ("pruning/lns/sweep.csv", "pruning/lns", "pruning/lns/provenance.json"),
        (
            "figures/loss_curves.png",
            "figures/loss_curves.png",
            "figures/loss_curves.provenance.json",
        ),
    ],
)
def test_the_audit_catches_an_edited_output_of_the_run(
    checkout, monkeypatch, capsys, edited, audited, record
):
    path = checkout / RUN / edited
    original, stat = path.read_bytes(), path.stat()
    assert audit_problems(checkout, monkeypatch, capsys, RUN / audited) == []
    try:
        with open(path, "ab") as handle:  # a row appended to the table, bytes to the figure
            handle.write(b"angular,3,0.5\n" if path.suffix == ".csv" else b"\0")
        assert audit_problems(checkout, monkeypatch, capsys, RUN / audited) == [
            f"EDITED: {RUN / edited} (sha256 differs from the one its job recorded; "
            f"recorded in {RUN / record})"
        ]
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_the_readmes_report_and_a_stray_one_leave_git_status_as_it_was(checkout):
    readme = (ROOT / "README.md").read_text()
    report = re.search(r"snakemake --report (results/default/report\.html)", readme)
    assert report, "the README names its report command"
    before = git_status(checkout)
    written = [
        checkout / report.group(1).replace("results/default/", f"{RUN}/"),
        checkout / "report.html",
    ]
    try:
        for path in written:
            result = snakemake(checkout, "--report", str(path.relative_to(checkout)))
            assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
            assert path.is_file()
        assert git_status(checkout) == before
    finally:
        for path in written:
            path.unlink(missing_ok=True)


def test_the_whole_run_audit_names_an_edited_table_and_every_job_that_read_it(
    checkout, monkeypatch, capsys
):
    """`audit.py results/test`: every record of the run, so an edit shows both where it was
    written (EDITED) and in each later record that read it (CHANGED)."""
    path = checkout / RUN / "pruning/lns/sweep.csv"
    original, stat = path.read_bytes(), path.stat()
    assert audit_problems(checkout, monkeypatch, capsys, RUN) == []
    try:
        with open(path, "ab") as handle:
            handle.write(b"angular,3,0.5\n")
        problems = audit_problems(checkout, monkeypatch, capsys, RUN)
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (
        f"EDITED: {RUN}/pruning/lns/sweep.csv (sha256 differs from the one its job recorded; "
        f"recorded in {RUN}/pruning/lns/provenance.json)"
    ) in problems
    changed = [line for line in problems if line.startswith("CHANGED: ")]
    assert len(changed) == 1 and f"{RUN}/claims.provenance.json" in changed[0]
    assert len(problems) == 2


def test_the_audit_target_audits_every_record_of_the_run(checkout):
    """`snakemake audit`: the run is up to date, so it only audits results/test/ record by
    record, one summary line (this scratch copy's records are dirty: it is not their commit)."""
    result = snakemake(checkout, "audit")
    output = result.stdout + result.stderr
    records = len(list((checkout / RUN).rglob(RECORD_NAME))) + len(
        list((checkout / RUN).rglob(f"*{SIDECAR_SUFFIX}"))
    )
    assert f"{RUN}: {records} provenance record(s) under it" in output, output[-3000:]
    summary = re.search(r"^audit FAILED: (\d+) problem\(s\) \((.+)\) in (\d+) record", output, re.M)
    assert summary and summary.group(2) == f"{summary.group(1)} dirty", output[-3000:]
    assert int(summary.group(3)) == records
    assert result.returncode != 0
    assert (checkout / RUN / "logs" / "audit" / "audit.log").read_text().count("DIRTY: ") == int(
        summary.group(1)
    )
