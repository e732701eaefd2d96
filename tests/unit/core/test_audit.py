"""The audit command: the result itself against its job's output checksums, its provenance chain
back to the data, every recorded checksum checked against the files on disk, dirty commits
reported; on a real workflow run too."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from depthlab.core import provenance
from depthlab.core.audit import main as audit
from depthlab.core.provenance import Provenance, git_state, set_job, sidecar_path
from test_io_provenance import git_repo

ROOT = Path(__file__).resolve().parents[3]
RUN = Path("results") / "r"


def write_chain(base: Path, dirty_rule: str | None = None) -> dict:
    """data -> model -> analysis -> figure, each record written by the library's Provenance from
    `base` (relative paths, as the workflow writes them); every commit clean except the one of
    `dirty_rule`."""
    repo = git_repo(base / "checkout")
    dirty = git_repo(base / "dirty_checkout")
    (dirty / "notes.py").write_text("")
    config = base / "run.yaml"
    config.write_text("seed: 0\n")

    def record(rule, out, inputs, spec):
        set_job(rule, f"python {rule}.py --spec ...", config_files=[config])
        job = Provenance(rule, config=spec, inputs=inputs)
        job.extra["git"] = git_state(dirty if rule == dirty_rule else repo)
        job.write(out)

    data, model = RUN / "data", RUN / "models" / "m"
    analysis, figure = RUN / "analysis" / "m", RUN / "figures" / "angles.png"
    for folder in (data, model, analysis, figure.parent):
        (base / folder).mkdir(parents=True)
    (base / data / "train.bin").write_bytes(bytes(range(200)))
    (base / data / "val.bin").write_bytes(bytes(range(20)))
    record("prepare_data", data / "provenance.json", [], {"vocab_size": 512})
    (base / model / "model.safetensors").write_bytes(b"weights" * 50)
    (base / model / "config.json").write_text('{"num_hidden_layers": 2}')
    record("pretrain_model", model / "provenance.json", [data], {"train": {"steps": 16}})
    (base / analysis / "measures.csv").write_text("layer,angle\n0,0.5\n1,0.25\n")
    record("analyse_model", analysis / "provenance.json", [model], {"max_samples": 8})
    (base / figure).write_bytes(b"\x89PNG figure")
    record("plot_analysis", sidecar_path(figure), [analysis / "measures.csv"], {"out": "x"})
    return {"figure": figure, "data": data, "model": model, "analysis": analysis, "config": config}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "_job", {})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_clean_chain_passes_and_is_shown_down_to_the_data(in_tmp, capsys):
    chain = write_chain(in_tmp)
    assert audit([str(chain["figure"])]) == 0
    out = capsys.readouterr().out
    for rule in ("plot_analysis", "analyse_model", "pretrain_model", "prepare_data"):
        assert f"rule     {rule}" in out
    config_sha = hashlib.sha256(b"seed: 0\n").hexdigest()
    assert out.count(f"config   run.yaml  sha256 {config_sha[:12]}  ok") == 4
    assert "train.steps = 16" in out and "max_samples = 8" in out
    assert out.count("ok       ") == 4 and "inputs   none (the chain starts here)" in out
    figure_sha = hashlib.sha256(b"\x89PNG figure").hexdigest()
    assert f"outputs\n    ok       angles.png  sha256 {figure_sha[:12]}\n" in out
    assert out.rstrip().endswith(
        "audit OK: 4 record(s), 1 output file(s), 3 input(s): every recorded checksum "
        "matches the file on disk and every commit was clean"
    )


@pytest.mark.parametrize(
    "tampered, recorded_in",
    [
        ("data/train.bin", "models/m/provenance.json"),
        ("models/m/model.safetensors", "analysis/m/provenance.json"),
        ("analysis/m/measures.csv", "figures/angles.provenance.json"),
    ],
)
def test_a_changed_upstream_file_is_named_and_fails_the_audit(
    in_tmp, capsys, tampered, recorded_in
):
    chain = write_chain(in_tmp)
    path = in_tmp / RUN / tampered
    path.write_bytes(path.read_bytes()[:-1] + b"!")
    assert audit([str(chain["figure"])]) == 1
    problems = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("CHANGED:", "MISSING:", "DIRTY:", "CONFIG:"))
    ]
    assert problems == [
        f"CHANGED: {RUN / tampered} (sha256 differs from the recorded one; "
        f"recorded in {RUN / recorded_in})"
    ]


def problem_lines(out: str) -> list[str]:
    kinds = ("EDITED:", "UNCHECKED:", "CHANGED:", "MISSING:", "DIRTY:", "CONFIG:")
    return [line for line in out.splitlines() if line.startswith(kinds)]


@pytest.mark.parametrize(
    "audited",
    ["analysis/m", "analysis/m/measures.csv", "analysis/m/provenance.json"],
)
def test_a_row_appended_to_an_output_table_is_named_whichever_path_is_audited(
    in_tmp, capsys, audited
):
    write_chain(in_tmp)
    table = in_tmp / RUN / "analysis" / "m" / "measures.csv"
    with open(table, "a") as handle:
        handle.write("2,0.125\n")
    assert audit(["--brief", str(RUN / audited)]) == 1
    out = capsys.readouterr().out
    assert problem_lines(out) == [
        f"EDITED: {RUN}/analysis/m/measures.csv (sha256 differs from the one its job recorded; "
        f"recorded in {RUN}/analysis/m/provenance.json)"
    ]
    assert "  EDITED   measures.csv  sha256 " in out
    assert out.rstrip().endswith("audit FAILED: 1 problem(s) (1 edited) in 3 record(s)")


def test_an_edited_figure_fails_its_audit_and_its_siblings_stay_ok(in_tmp, capsys):
    chain = write_chain(in_tmp)
    other = chain["figure"].with_name("other.png")
    (in_tmp / other).write_bytes(b"\x89PNG other")
    set_job("plot_other", "python plot_other.py --spec ...", config_files=[chain["config"]])
    plot_other = Provenance("plot_other", config={}, inputs=[chain["analysis"]])
    plot_other.extra["git"] = git_state(in_tmp / "checkout")
    plot_other.write(sidecar_path(other))
    (in_tmp / chain["figure"]).write_bytes(b"\x89PNG redrawn by hand")
    assert audit(["--brief", str(chain["figure"])]) == 1
    assert problem_lines(capsys.readouterr().out) == [
        f"EDITED: {chain['figure']} (sha256 differs from the one its job recorded; "
        f"recorded in {RUN}/figures/angles.provenance.json)"
    ]
    assert audit(["--brief", str(other)]) == 0


def test_files_deleted_from_or_added_to_an_output_folder_are_named(in_tmp, capsys):
    chain = write_chain(in_tmp)
    model = in_tmp / chain["model"]
    (model / "config.json").unlink()
    (model / "notes").mkdir()
    (model / "notes" / "extra.txt").write_text("by hand")
    (model / ".snakemake_timestamp").write_text("")  # Snakemake's, after the record: not added
    assert audit(["--brief", str(chain["model"])]) == 1
    out = capsys.readouterr().out
    record = f"recorded in {RUN}/models/m/provenance.json"
    assert problem_lines(out) == [
        f"EDITED: {RUN}/models/m/config.json (deleted since its job wrote it; {record})",
        f"EDITED: {RUN}/models/m/notes/extra.txt (added after its job ran (not in its record); "
        f"{record})",
    ]
    assert "  DELETED  config.json" in out and "  ADDED    notes/extra.txt  sha256 now " in out
    # a deleted file can still be audited by its name; a path nobody recorded cannot
    assert audit(["--brief", str(chain["model"] / "config.json")]) == 1
    assert "EDITED: " in capsys.readouterr().out
    assert audit([str(chain["model"] / "never_written.txt")]) == 2
    assert "no such file or folder, and no record lists it" in capsys.readouterr().err


def test_an_input_edited_between_the_job_that_wrote_it_and_the_one_that_read_it(in_tmp, capsys):
    """Every input checksum matches (the model's job read the edited data), yet the data is not
    what its own job wrote: the audit names it."""
    chain = write_chain(in_tmp)
    train = in_tmp / chain["data"] / "train.bin"
    train.write_bytes(train.read_bytes() + b"\x00")
    set_job("pretrain_model", "python pretrain_model.py --spec ...", config_files=[chain["config"]])
    rerun = Provenance("pretrain_model", config={}, inputs=[chain["data"]])
    rerun.extra["git"] = git_state(in_tmp / "checkout")
    rerun.write(chain["model"] / "provenance.json")
    assert audit(["--brief", str(chain["model"])]) == 1
    out = capsys.readouterr().out
    assert problem_lines(out) == [
        f"EDITED: {RUN}/data/train.bin (not what its job wrote, but what the job of "
        f"{RUN}/models/m/provenance.json read: edited between the two jobs; "
        f"recorded in {RUN}/data/provenance.json)"
    ]


def test_a_job_that_read_another_jobs_record_and_some_of_its_files_passes(in_tmp, capsys):
    """A reader of a model folder's provenance.json (its summary) and one of its files, not the
    whole folder (as make_claims reads a model's config.json, train_log.csv and record): no
    record lists itself among its outputs, so reading it is not an edit."""
    chain = write_chain(in_tmp)
    model = chain["model"]
    set_job("make_claims", "python make_claims.py --spec ...", config_files=[chain["config"]])
    claims = Provenance(
        "make_claims", config={}, inputs=[model / "provenance.json", model / "config.json"]
    )
    claims.extra["git"] = git_state(in_tmp / "checkout")
    (in_tmp / RUN / "claims.csv").write_text("id,value\nx,1\n")
    claims.write(sidecar_path(RUN / "claims.csv"))
    assert audit(["--brief", str(RUN / "claims.csv")]) == 0, capsys.readouterr().out
    # an edit of the file it read is still named
    (in_tmp / model / "config.json").write_text('{"num_hidden_layers": 3}')
    assert audit(["--brief", str(RUN / "claims.csv")]) == 1
    assert any("config.json" in line for line in problem_lines(capsys.readouterr().out))


def test_a_record_without_output_checksums_is_not_called_ok(in_tmp, capsys):
    chain = write_chain(in_tmp)
    sidecar = in_tmp / sidecar_path(chain["figure"])
    old = json.loads(sidecar.read_text())
    del old["outputs"]  # as every record was written before output checksums
    sidecar.write_text(json.dumps(old))
    assert audit(["--brief", str(chain["figure"])]) == 1
    out = capsys.readouterr().out
    assert "outputs  UNCHECKED (the record holds no output checksums)" in out
    assert problem_lines(out) == [
        f"UNCHECKED: {chain['figure']} (its record predates output checksums, so an edit since "
        "its job ran cannot be detected; rerun the job to record them; recorded in "
        f"{sidecar_path(chain['figure'])})"
    ]
    assert "audit OK" not in out


def test_missing_inputs_and_changed_config_files_fail_the_audit(in_tmp, capsys):
    chain = write_chain(in_tmp)
    (in_tmp / RUN / "models" / "m" / "config.json").unlink()
    (in_tmp / RUN / "data" / "extra.bin").write_bytes(b"")
    assert audit(["--brief", str(chain["analysis"])]) == 1
    out = capsys.readouterr().out
    assert (
        f"CHANGED: {RUN}/models/m/config.json (deleted; recorded in "
        f"{RUN}/analysis/m/provenance.json)" in out
    )
    assert f"CHANGED: {RUN}/data/extra.bin (added; recorded in {RUN}/models/m/" in out
    shutil.rmtree(in_tmp / RUN / "data")
    chain["config"].write_text("seed: 0  # edited\n")
    assert audit(["--brief", str(chain["analysis"])]) == 1
    out = capsys.readouterr().out
    assert f"MISSING: {RUN}/data (recorded input no longer exists; recorded in " in out
    assert "CONFIG: run.yaml (config file changed since the job ran; recorded in 2 records" in out


def test_a_dirty_commit_in_the_chain_is_reported(in_tmp, capsys):
    chain = write_chain(in_tmp, dirty_rule="pretrain_model")
    assert audit(["--brief", str(chain["figure"])]) == 1
    out = capsys.readouterr().out
    assert f"DIRTY: {RUN}/models/m/provenance.json (commit " in out
    assert "with 1 uncommitted change(s): ?? notes.py)" in out
    assert out.count("DIRTY:") == 1
    assert out.rstrip().endswith("audit FAILED: 1 problem(s) (1 dirty) in 4 record(s)")


def test_the_script_audits_moved_results_and_rejects_paths_without_records(
    in_tmp, tmp_path_factory
):
    write_chain(in_tmp)
    moved = tmp_path_factory.mktemp("moved")
    shutil.copytree(in_tmp / "results", moved / "results")
    shutil.copy2(in_tmp / "run.yaml", moved / "run.yaml")
    script = ROOT / "workflow_scripts" / "audit.py"
    run = subprocess.run(
        [sys.executable, script, "results/r/figures/angles.png"],
        cwd=moved,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "audit OK: 4 record(s)" in run.stdout
    (moved / "results" / "r" / "data" / "train.bin").write_bytes(b"")  # the moved copy is audited
    run = subprocess.run(
        [sys.executable, script, "results/r/figures/angles.png"],
        cwd=moved,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and "CHANGED: results/r/data/train.bin" in run.stdout
    bare = moved / "notes.txt"
    bare.write_text("")
    run = subprocess.run(
        [sys.executable, script, str(bare)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2 and "no provenance record" in run.stderr


def test_a_run_folder_is_audited_record_by_record_with_one_summary_line(in_tmp, capsys):
    """`audit.py results/<run>`: every record under the run (folder records and figure sidecars),
    not only one chain; a planted edit in a file no figure's chain reaches (the model's config)
    is named and fails it. Before, the run folder had no record and the audit exited 2."""
    chain = write_chain(in_tmp)
    (in_tmp / RUN / "models" / "other").mkdir()
    (in_tmp / RUN / "models" / "other" / "weights.bin").write_bytes(b"w" * 10)
    set_job("pretrain_model", "python pretrain_model.py", config_files=[chain["config"]])
    job = Provenance("pretrain_model", config={}, inputs=[chain["data"]])
    job.extra["git"] = git_state(in_tmp / "checkout")
    job.write(RUN / "models" / "other" / "provenance.json")
    assert audit([str(RUN)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{RUN}: 5 provenance record(s) under it"
    assert "rule     " not in out  # no chains printed, only the summary
    assert (
        out.rstrip()
        .splitlines()[-1]
        .startswith("audit OK: 5 record(s), 7 output file(s), 4 input(s)")
    )

    (in_tmp / RUN / "models" / "other" / "weights.bin").write_bytes(b"w" * 11)  # planted edit
    assert audit([str(RUN)]) == 1
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[-2] == (
        f"EDITED: {RUN}/models/other/weights.bin (sha256 differs from the one its job recorded; "
        f"recorded in {RUN}/models/other/provenance.json)"
    )
    assert lines[-1] == "audit FAILED: 1 problem(s) (1 edited) in 5 record(s)"


def test_a_folder_without_any_record_exits_2_naming_it(in_tmp, capsys):
    (in_tmp / "empty_run").mkdir()
    assert audit(["empty_run"]) == 2
    assert "empty_run: no provenance record in this folder or under it" in capsys.readouterr().err
