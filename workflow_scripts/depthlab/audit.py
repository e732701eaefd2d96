"""Audit a result: follow provenance records from a result or figure back to the data.

For each record on the chain it prints the rule, command, git commit and dirty flag, the config
files with their checksums, the job's spec, and every input with its recorded sha256 and whether
the file on disk still matches; then it does the same for each input's own record (a file's
`.provenance.json` sidecar, else the `provenance.json` of the output folder holding it). The
chain ends at records without inputs (the data stage) or at source files without a record.

A problem is an input (or config file) whose checksum no longer matches, an input that is gone,
or a record written from a checkout with uncommitted changes; `audit` returns them all.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from .provenance import sha256_files, sha256_path, sidecar_path

RECORD_NAME = "provenance.json"
SHORT = 12  # checksum characters shown


@dataclasses.dataclass(frozen=True)
class Problem:
    kind: str  # changed | missing | dirty | config
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
    if path.name.endswith(".provenance.json") or path.name == RECORD_NAME:
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
        self._digests: dict[Path, str] = {}

    def _sha256(self, path: Path) -> str:
        if path not in self._digests:
            self._digests[path] = sha256_path(path)
        return self._digests[path]

    def audit(self, target: str | Path) -> list[Problem]:
        record_file = record_for(target)
        if record_file is None:
            raise ProvenanceNotFound(
                f"{target}: no provenance record (no .provenance.json "
                f"sidecar, no {RECORD_NAME} in its folder or above)"
            )
        self.write(_show(Path(target)))
        self._node(record_file, indent=1)
        return self.problems

    def _node(self, record_file: Path, indent: int) -> None:
        pad = "  " * indent
        record_file = record_file.resolve()
        shown = _show(record_file)
        if record_file in self.seen:
            self.write(f"{pad}record   {shown} (shown above)")
            return
        self.seen.add(record_file)
        try:
            record = json.loads(record_file.read_text())
        except (OSError, json.JSONDecodeError) as error:
            self.problems.append(Problem("missing", shown, shown, f"unreadable record: {error}"))
            self.write(f"{pad}record   {shown}: UNREADABLE ({error})")
            return
        base = _base_dir(record, record_file)
        self.write(f"{pad}record   {shown}")
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
        if not path.exists():
            self.problems.append(
                Problem("missing", _show(path), record_shown, "recorded input no longer exists")
            )
            self.write(f"{pad}MISSING  {name}  sha256 {recorded[:SHORT]}")
        elif self._sha256(path) == recorded:
            self.write(f"{pad}ok       {name}  sha256 {recorded[:SHORT]}")
        else:
            self.write(
                f"{pad}CHANGED  {name}  sha256 {recorded[:SHORT]}, now {self._sha256(path)[:SHORT]}"
            )
            for changed, detail in self._changed_files(path, recorded_files):
                self.problems.append(Problem("changed", _show(changed), record_shown, detail))
                self.write(f"{pad}           {_show(changed)}: {detail}")
        producer = record_for(path, stop=base.resolve())
        if producer is not None and producer.resolve() != record_file.resolve():
            self._node(producer, indent + 1)
        elif producer is None and path.exists():
            self.write(f"{pad}  (source file: no provenance record)")

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
    records, inputs = len(auditor.seen), auditor.n_inputs
    if not auditor.problems:
        return (
            f"audit OK: {records} record(s), {inputs} input(s): every recorded checksum "
            "matches the file on disk and every commit was clean"
        )
    lines = problem_lines(auditor.problems)
    kinds = [line.split(":", 1)[0].lower() for line in lines]
    counted = ", ".join(f"{kinds.count(kind)} {kind}" for kind in dict.fromkeys(kinds))
    return f"audit FAILED: {len(lines)} problem(s) ({counted}) in {records} record(s)"


def main(argv=None) -> int:
    """Command line of workflow_scripts/audit.py; exit status 0 clean, 1 problems, 2 no record."""
    parser = argparse.ArgumentParser(
        prog="audit.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a result folder or file, a figure, or a provenance record",
    )
    parser.add_argument(
        "--brief", action="store_true", help="leave out each record's command and spec"
    )
    args = parser.parse_args(argv)
    auditor = Auditor(show_spec=not args.brief)
    try:
        for path in args.paths:
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
