"""Documents read from JSON-lines files and `datasets` splits, every failure a DataError that
names the file and line (or the dataset and record).

The data stage's text_files and hf_dataset sources read through these, and so does every stage
that reads a text set (`iter_texts`: analysis, linear maps, fine-tuning data, benchmark files).
"""

from __future__ import annotations

import itertools
import json
import os

from depthlab.core.errors import DataError


def _jsonl_lines(path: str | os.PathLike):
    """(line number, bytes) of a file, numbered as an editor does: a line ends at LF, CR LF or
    CR. Read as bytes so that an undecodable line is named, not the file's chunk."""
    number = 0
    with open(path, "rb") as handle:
        for raw in handle:  # splits at LF only; a lone CR inside is split below
            pieces = raw.splitlines() if b"\r" in raw else [raw]
            for piece in pieces:
                number += 1
                yield number, piece.rstrip(b"\r\n")


def _decode_jsonl_line(path, number: int, raw: bytes, where: str) -> str:
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark (Windows editors write one)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{where}: {path}:{number}: not UTF-8 (byte 0x{raw[error.start]:02x} at "
            f"column {error.start + 1}: {error.reason})"
        ) from None


def _unencodable(text: str) -> str | None:
    """None for text that UTF-8 can hold, else a description of the first bad character."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (
            f"character {error.start + 1} is {text[error.start]!r}, an unpaired surrogate "
            f"(not UTF-8 text)"
        )
    return None


def iter_jsonl_records(path: str | os.PathLike, where: str = "texts"):
    """(line number, record) of every non-blank line of a JSON-lines file; every failure is a
    DataError naming `path:line`: a missing file, bytes that are not UTF-8, a line that is not
    JSON (including JSON nested too deeply for the parser or with an integer too long to
    convert), a record that is not an object."""
    try:
        lines = _jsonl_lines(path)
        first = next(lines, None)
    except OSError as error:
        raise DataError(f"{where}: {path}: cannot read ({error.strerror or error})") from None
    if first is None:
        return
    for number, raw in itertools.chain([first], lines):
        line = _decode_jsonl_line(path, number, raw, where)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            at = "" if error.msg.endswith(" at") else " at"
            raise DataError(
                f"{where}: {path}:{number}: not JSON ({error.msg}{at} column {error.colno})"
            ) from None
        except (RecursionError, ValueError) as error:  # deep nesting; int over 4300 digits
            reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
            raise DataError(
                f"{where}: {path}:{number}: not JSON that can be read ({reason})"
            ) from None
        if not isinstance(record, dict):
            raise DataError(f"{where}: {path}:{number}: not a JSON object")
        yield number, record


def iter_jsonl_texts(path: str | os.PathLike, field: str = "text", where: str = "texts"):
    """The `field` of every record of a JSON-lines file; errors name the file and line.

    Every failure is a DataError naming `path:line` (see iter_jsonl_records), also a record
    without a string `field` and a string holding an unpaired surrogate escape (valid JSON, but
    no UTF-8 text; the tokenizer and the data stage's hashes would fail on it much later,
    without a name).
    """
    for number, record in iter_jsonl_records(path, where):
        if not isinstance(record.get(field), str):
            raise DataError(f"{where}: {path}:{number}: no string '{field}' field")
        problem = _unencodable(record[field])
        if problem:
            raise DataError(f"{where}: {path}:{number}: '{field}': {problem}")
        yield record[field]


def _root_cause(error: BaseException) -> str:
    """The innermost cause's message (datasets wraps parse errors in a generic one)."""
    seen = set()
    while (error.__cause__ or error.__context__) is not None and id(error) not in seen:
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def iter_dataset_texts(
    name: str,
    config_name: str | None,
    split: str,
    field: str,
    where: str = "dataset",
    **load_kwargs,
):
    """The `field` of every record of a `datasets` dataset split (streamed when asked).

    A dataset that cannot be loaded or read (a local data file with a line that is not JSON or
    not UTF-8 included, whether it fails at load time or while streaming) is a DataError.
    """
    import datasets

    key = "data_files" if load_kwargs.get("data_files") is not None else "name"
    try:
        dataset = datasets.load_dataset(name, config_name, split=split, **load_kwargs)
    except (OSError, ValueError, datasets.exceptions.DatasetsError) as error:
        # not found, offline, bad config name or split, unreadable data files
        cause = (
            f"{error}"
            if not isinstance(error, datasets.exceptions.DatasetsError)
            else _root_cause(error)
        )
        files = load_kwargs.get("data_files")
        raise DataError(
            f"{where}.{key}: cannot load dataset '{name}' split '{split}'"
            f"{f' from {files}' if files is not None else ''}: {cause}"
        ) from None
    records = iter(dataset)
    number = 0
    while True:
        try:
            record = next(records)
        except StopIteration:
            return
        except (OSError, ValueError, datasets.exceptions.DatasetsError) as error:
            files = load_kwargs.get("data_files")
            raise DataError(
                f"{where}.{key}: cannot read dataset '{name}' split '{split}'"
                f"{f' from {files}' if files is not None else ''} past record "
                f"{number}: {_root_cause(error)}"
            ) from None
        number += 1
        if field not in record:
            raise DataError(
                f"{where}.text_field: '{field}' is not a field of dataset '{name}' "
                f"(fields: {', '.join(sorted(record))})"
            )
        if not isinstance(record[field], str):
            raise DataError(f"{where}.text_field: '{field}' of dataset '{name}' is not text")
        yield record[field]


def iter_texts(texts: dict, field: str = "text"):
    """The documents of a resolved text set: {source: jsonl, path} (a local JSON-lines file) or
    {source: hf_dataset, name, config_name, split, revision} (streamed with `datasets`). With
    `shard: [index, count]` only documents index, index + count, index + 2 count, ...: disjoint
    subsamples of one source, whose spread carries the sampling variance of a measure."""
    documents = _source_texts(texts, field)
    if "shard" in texts:
        index, count = texts["shard"]
        return itertools.islice(documents, index, None, count)
    return documents


def _source_texts(texts: dict, field: str):
    if texts["source"] == "jsonl":
        return iter_jsonl_texts(texts["path"], field, "texts.path")
    pinned = {"revision": texts["revision"]} if texts.get("revision") else {}
    return iter_dataset_texts(
        texts["name"],
        texts.get("config_name"),
        texts["split"],
        field,
        "texts.name",
        streaming=True,
        **pinned,
    )
