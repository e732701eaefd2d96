"""Audit a result: check the result itself, then follow provenance records back to the data.

The result comes first: every file of it (one file or figure, or each file of an output folder)
against the sha256 its record holds, naming files edited, deleted or added since the job wrote
them. Then, for each record on the chain, it prints the rule, command, git commit and dirty
flag, the config files with their checksums, the job's spec, and every input with its recorded
sha256 and whether the file on disk still matches; then it does the same for each input's own
record (a file's `.provenance.json` sidecar, else the `provenance.json` of the output folder
holding it). The chain ends at records without inputs (the data stage) or at source files
without a record.

A problem is an edited output, an input (or config file) whose checksum no longer matches, an
input that is gone, an input that was edited between the job that wrote it and the job that read
it, a record written from a checkout with uncommitted changes, or a record too old to hold output
checksums (the result cannot be checked); `audit` returns them all.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from depthlab.core.provenance import (
    RECORD_NAME,
    SIDECAR_SUFFIX,
    WRITTEN_AFTER_RECORD,
    described_files,
    sha256_files,
    sha256_path,
    sidecar_path,
)

SHORT = 12  # checksum characters shown


@dataclasses.dataclass(frozen=True)
class Problem:
    kind: str  # edited | unchecked (outputs) | changed | missing (inputs) | dirty | config
    path: str  # the file (or record, for dirty) concerned
    record: str  # the provenance record that holds the checksum or commit
    detail: str


class ProvenanceNotFound(Exception):
    """The path has no provenance record (it is not an output of the workflow)."""


def _show(path: Path) -> str:
    """`path` relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def record_for(path: str | Path, stop: Path | None = None) -> Path | None:
    """The provenance record of a result: the path itself if it is a record, a file's sidecar,
    else the `provenance.json` of the nearest folder holding it (not above `stop`)."""
    path = Path(path).absolute()
    if path.name.endswith(SIDECAR_SUFFIX) or path.name == RECORD_NAME:
        return path if path.is_file() else None
    if not path.is_dir() and sidecar_path(path).is_file():
        return sidecar_path(path)
    folder = path if path.is_dir() else path.parent
    for candidate in (folder, *folder.parents):
        if (candidate / RECORD_NAME).is_file():
            return candidate / RECORD_NAME
        if stop is not None and candidate == stop:
            break
    return None


def _base_dir(record: dict, record_file: Path) -> Path:
    """The folder the record's relative paths are relative to: the job's working directory, or,
    for results moved since, the ancestor of the record under which its inputs lie."""
    cwd = record.get("cwd")
    if cwd and record_file.resolve().is_relative_to(Path(cwd).resolve()):
        return Path(cwd)
    relative = [p for p in record.get("inputs", {}) if not Path(p).is_absolute()]
    relative += [
        f["path"]
        for f in (record.get("config_source") or {}).get("files", [])
        if not Path(f["path"]).is_absolute()
    ]
    for ancestor in record_file.resolve().parents:
        if any((ancestor / p).exists() for p in relative):
            return ancestor
    return Path.cwd()


def _within(name: str, scope: str) -> bool:
    """Whether the relative path `name` is `scope` or lies under it ("" holds everything)."""
    return not scope or name == scope or name.startswith(scope + "/")


def _scope(target: Path, record_file: Path) -> str:
    """The part of a record's outputs that `target` names, relative to the record's folder: ""
    for all of them (the record itself, or the folder of a folder record)."""
    target = target.resolve()
    if target == record_file or (record_file.name == RECORD_NAME and target == record_file.parent):
        return ""
    return target.relative_to(record_file.parent).as_posix()


def _flatten(value, prefix: str = ""):
    """(dotted key, compact JSON) pairs of a nested dict; lists stay whole."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, json.dumps(value, separators=(",", ":"), default=str)


class Auditor:
    """Walks the chain once (each record is shown once; checksums are computed once)."""

    def __init__(self, show_spec: bool = True, write=print):
        self.show_spec = show_spec
        self.write = write
        self.problems: list[Problem] = []
        self.warnings: list[str] = []
        self.seen: set[Path] = set()
        self.n_inputs = 0
        self.n_outputs = 0
        self._digests: dict[Path, str] = {}
        self._records: dict[Path, dict | Exception] = {}

    def _sha256(self, path: Path) -> str:
        if path not in self._digests:
            self._digests[path] = sha256_path(path)
        return self._digests[path]

    def _load(self, record_file: Path) -> dict | Exception:
        """The record at (resolved) `record_file`, or the error that kept it from being read."""
        if record_file not in self._records:
            try:
                self._records[record_file] = json.loads(record_file.read_text())
            except (OSError, json.JSONDecodeError) as error:
                self._records[record_file] = error
        return self._records[record_file]

    def audit(self, target: str | Path) -> list[Problem]:
        target = Path(target)
        record_file = record_for(target)
        if record_file is None:
            raise ProvenanceNotFound(
                f"{target}: no provenance record (no {SIDECAR_SUFFIX} "
                f"sidecar, no {RECORD_NAME} in its folder or above)"
            )
        record_file = record_file.resolve()
        record = self._load(record_file)
        if not target.exists() and (
            isinstance(record, Exception)
            or not any(
                _within(name, _scope(target, record_file)) for name in record.get("outputs") or {}
            )
        ):
            raise ProvenanceNotFound(f"{target}: no such file or folder, and no record lists it")
        self.write(_show(target))
        self._node(record_file, indent=1, result=target)
        return self.problems

    def _node(self, record_file: Path, indent: int, result: Path | None = None) -> None:
        """Show one record (`result`: the audited path, whose files are checked against the
        record's output checksums) and walk on to its inputs' records."""
        pad = "  " * indent
        record_file = record_file.resolve()
        shown = _show(record_file)
        record = self._load(record_file)
        if isinstance(record, Exception):
            if record_file not in self.seen:
                self.problems.append(
                    Problem("missing", shown, shown, f"unreadable record: {record}")
                )
            self.seen.add(record_file)
            self.write(f"{pad}record   {shown}: UNREADABLE ({record})")
            return
        if record_file in self.seen:
            self.write(f"{pad}record   {shown} (shown above)")
            if result is not None:
                self._outputs(result, record, record_file, pad)
            return
        self.seen.add(record_file)
        base = _base_dir(record, record_file)
        self.write(f"{pad}record   {shown}")
        if result is not None:
            self._outputs(result, record, record_file, pad)
        self.write(
            f"{pad}rule     {record.get('rule') or '(not recorded)'}"
            f"  (stage {record.get('stage')}, {record.get('end', '?')})"
        )
        if record.get("command") and self.show_spec:
            self.write(f"{pad}command  {record['command']}")
        self._git(record, shown, pad)
        self._config(record, shown, base, pad)
        if self.show_spec:
            self.write(f"{pad}spec")
            for key, value in _flatten(record.get("config", {})):
                self.write(f"{pad}  {key} = {value}")
        inputs = record.get("inputs") or {}
        if not inputs:
            self.write(f"{pad}inputs   none (the chain starts here)")
            return
        self.write(f"{pad}inputs")
        for name, recorded in inputs.items():
            self._input(
                name,
                recorded,
                record.get("input_files", {}).get(name),
                record_file,
                base,
                indent + 1,
            )

    def _outputs(self, result: Path, record: dict, record_file: Path, pad: str) -> None:
        """Check the files of `result` against the sha256 its record holds for them: a file
        edited, deleted, or (in an output folder) added since the job wrote its record."""
        shown = _show(record_file)
        recorded = record.get("outputs")
        if recorded is None:
            self.problems.append(
                Problem(
                    "unchecked",
                    _show(result),
                    shown,
                    "its record predates output checksums, so an edit since its job ran "
                    "cannot be detected; rerun the job to record them",
                )
            )
            self.write(f"{pad}outputs  UNCHECKED (the record holds no output checksums)")
            return
        scope = _scope(result, record_file)
        listed = {name: sha for name, sha in recorded.items() if _within(name, scope)}
        present = {
            name: path
            for name, path in described_files(record_file).items()
            if _within(name, scope)
        }
        self.write(f"{pad}outputs")
        for name in sorted(set(listed) | set(present)):
            self.n_outputs += 1
            path = record_file.parent / name
            if name not in present:
                status, detail = "DELETED", "deleted since its job wrote it"
                shown_sha = listed[name][:SHORT]
            elif name not in listed:
                status, detail = "ADDED", "added after its job ran (not in its record)"
                shown_sha = f"now {self._sha256(path)[:SHORT]}"
            elif self._sha256(path) != listed[name]:
                status, detail = "EDITED", "sha256 differs from the one its job recorded"
                shown_sha = f"{listed[name][:SHORT]}, now {self._sha256(path)[:SHORT]}"
            else:
                self.write(f"{pad}  ok       {name}  sha256 {listed[name][:SHORT]}")
                continue
            self.problems.append(Problem("edited", _show(path), shown, detail))
            self.write(f"{pad}  {status:<8} {name}  sha256 {shown_sha}")

    def _git(self, record: dict, shown: str, pad: str) -> None:
        git = record.get("git") or {}
        commit = (git.get("commit") or "unknown")[:SHORT]
        if git.get("dirty"):
            changes = git.get("changes") or []
            count = git.get("n_changes", len(changes))
            listed = ", ".join(c.strip() for c in changes[:5])
            detail = f"commit {commit} with {count} uncommitted change(s)" + (
                f": {listed}" + (", ..." if count > 5 else "") if listed else ""
            )
            self.problems.append(Problem("dirty", shown, shown, detail))
            self.write(
                f"{pad}git      {commit} DIRTY ({count} uncommitted change(s)"
                + (f": {listed}" if listed else "")
                + ")"
            )
        elif git.get("dirty") is None:
            self.warnings.append(f"{shown}: git state unknown (not run from a git checkout)")
            self.write(f"{pad}git      {commit} (dirty flag unknown)")
        else:
            self.write(f"{pad}git      {commit} clean")

    def _config(self, record: dict, shown: str, base: Path, pad: str) -> None:
        source = record.get("config_source")
        if not source:
            self.warnings.append(f"{shown}: no config file recorded (a --spec run by hand)")
            self.write(f"{pad}config   (no config file recorded: --spec given directly)")
            return
        for entry in source.get("files", []):
            path = base / entry["path"]
            recorded = entry["sha256"]
            if not path.is_file():
                status = "MISSING"
                self.problems.append(Problem("config", _show(path), shown, "config file gone"))
            elif self._sha256(path) != recorded:
                status = f"CHANGED (now {self._sha256(path)[:SHORT]})"
                self.problems.append(
                    Problem("config", _show(path), shown, "config file changed since the job ran")
                )
            else:
                status = "ok"
            self.write(f"{pad}config   {entry['path']}  sha256 {recorded[:SHORT]}  {status}")
        if source.get("overrides"):
            overrides = json.dumps(source["overrides"], separators=(",", ":"))
            self.write(f"{pad}         --config overrides {overrides}")

    def _input(
        self,
        name: str,
        recorded: str,
        recorded_files: dict | None,
        record_file: Path,
        base: Path,
        indent: int,
    ) -> None:
        pad = "  " * indent
        self.n_inputs += 1
        path = Path(name) if Path(name).is_absolute() else base / name
        record_shown = _show(record_file)
        read_unchanged = False
        if not path.exists():
            self.problems.append(
                Problem("missing", _show(path), record_shown, "recorded input no longer exists")
            )
            self.write(f"{pad}MISSING  {name}  sha256 {recorded[:SHORT]}")
        elif self._sha256(path) == recorded:
            self.write(f"{pad}ok       {name}  sha256 {recorded[:SHORT]}")
            read_unchanged = True
        else:
            self.write(
                f"{pad}CHANGED  {name}  sha256 {recorded[:SHORT]}, now {self._sha256(path)[:SHORT]}"
            )
            for changed, detail in self._changed_files(path, recorded_files):
                self.problems.append(Problem("changed", _show(changed), record_shown, detail))
                self.write(f"{pad}           {_show(changed)}: {detail}")
        producer = record_for(path, stop=base.resolve())
        if producer is not None and producer.resolve() != record_file.resolve():
            if read_unchanged:
                self._as_written(
                    path, recorded, recorded_files, producer.resolve(), record_shown, pad
                )
            self._node(producer, indent + 1)
        elif producer is None and path.exists():
            self.write(f"{pad}  (source file: no provenance record)")

    def _as_written(
        self,
        path: Path,
        recorded: str,
        recorded_files: dict | None,
        producer: Path,
        reader: str,
        pad: str,
    ) -> None:
        """An input its reader recorded as it is now must also be what its producer wrote; a
        file that differs was edited between the two jobs. Compares the two records only."""
        record = self._load(producer)
        if isinstance(record, Exception) or record.get("outputs") is None:
            return  # the producer's own node reports it
        if path.resolve() == producer:
            return  # a job read the record itself (e.g. a run's summary): no record lists itself
        scope = _scope(path, producer)
        if path.is_dir():
            if recorded_files is None:
                return
            read = {
                f"{scope}/{name}" if scope else name: sha
                for name, sha in recorded_files.items()
                if Path(name).name not in WRITTEN_AFTER_RECORD
            }
        else:
            read = {scope: recorded}
        written = {name: sha for name, sha in record["outputs"].items() if _within(name, scope)}
        for name in sorted(set(read) | set(written)):
            if read.get(name) != written.get(name):
                file = _show(producer.parent / name)
                detail = (
                    f"not what its job wrote, but what the job of {reader} read: "
                    "edited between the two jobs"
                )
                self.problems.append(Problem("edited", file, _show(producer), detail))
                self.write(f"{pad}           {file}: EDITED before this job read it")

    def _changed_files(self, path: Path, recorded_files: dict | None):
        """(file, what happened) for each file of a changed input: the folder's own files when
        their checksums were recorded, else the input itself."""
        if not path.is_dir() or recorded_files is None:
            return [(path, "sha256 differs from the recorded one")]
        now = sha256_files(path)
        found = [
            (path / rel, "sha256 differs from the recorded one")
            for rel in sorted(set(now) & set(recorded_files))
            if now[rel] != recorded_files[rel]
        ]
        found += [(path / rel, "deleted") for rel in sorted(set(recorded_files) - set(now))]
        found += [(path / rel, "added") for rel in sorted(set(now) - set(recorded_files))]
        return found or [(path, "sha256 differs from the recorded one")]


def problem_lines(problems: list[Problem]) -> list[str]:
    """One line per problem; a file whose checksum several records hold is named once."""
    grouped: dict[tuple, list[str]] = {}
    for problem in problems:
        grouped.setdefault((problem.kind, problem.path, problem.detail), []).append(problem.record)
    lines = []
    for (kind, path, detail), records in grouped.items():
        where = (
            ""
            if records == [path]
            else (
                f"; recorded in {records[0]}"
                if len(records) == 1
                else f"; recorded in {len(records)} records: {', '.join(records)}"
            )
        )
        lines.append(f"{kind.upper()}: {path} ({detail}{where})")
    return lines


def summary_line(auditor: Auditor) -> str:
    records, inputs, outputs = len(auditor.seen), auditor.n_inputs, auditor.n_outputs
    if not auditor.problems:
        return (
            f"audit OK: {records} record(s), {outputs} output file(s), {inputs} input(s): every "
            "recorded checksum matches the file on disk and every commit was clean"
        )
    lines = problem_lines(auditor.problems)
    kinds = [line.split(":", 1)[0].lower() for line in lines]
    counted = ", ".join(f"{kinds.count(kind)} {kind}" for kind in dict.fromkeys(kinds))
    return f"audit FAILED: {len(lines)} problem(s) ({counted}) in {records} record(s)"


def run_records(folder: Path) -> list[Path]:
    """Every provenance record under `folder` (folder records and figure sidecars), sorted."""
    found = set(folder.rglob(RECORD_NAME)) | set(folder.rglob(f"*{SIDECAR_SUFFIX}"))
    return sorted(path for path in found if path.is_file())


def audit_run(auditor: Auditor, folder: Path) -> int:
    """Audit every record under `folder` (a run's results/<run>/, or any part of it), each with
    its chain; returns how many records were found there."""
    records = run_records(folder)
    if not records:
        raise ProvenanceNotFound(
            f"{folder}: no provenance record in this folder or under it (is it a run's "
            f"results/<run>/ folder?)"
        )
    for record in records:
        auditor.audit(record)
    return len(records)


def main(argv=None) -> int:
    """Command line of workflow_scripts/audit.py; exit status 0 clean, 1 problems (also outputs
    that cannot be checked), 2 no record."""
    parser = argparse.ArgumentParser(
        prog="audit.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a result folder or file, a figure, or a provenance record; a folder without a "
        "record of its own (a run's results/<run>/) audits every record under it, printing "
        "only its problems and the summary",
    )
    parser.add_argument(
        "--brief", action="store_true", help="leave out each record's command and spec"
    )
    args = parser.parse_args(argv)
    auditor = Auditor(show_spec=not args.brief)
    chain_writer = auditor.write
    try:
        for path in args.paths:
            path = Path(path)
            if path.is_dir() and record_for(path) is None:
                auditor.write = lambda line: None  # a whole run: its problems and the summary
                found = audit_run(auditor, path)
                auditor.write = chain_writer
                print(f"{_show(path)}: {found} provenance record(s) under it")
            else:
                auditor.audit(path)
    except ProvenanceNotFound as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print()
    for warning in auditor.warnings:
        print(f"note: {warning}")
    for line in problem_lines(auditor.problems):
        print(line)
    print(summary_line(auditor))
    return 1 if auditor.problems else 0
