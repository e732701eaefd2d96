"""Data stage: a text corpus, a byte-level BPE tokenizer and flat token arrays per split.

Sources (``data.source``):
  docstrings   English docstrings of installed packages, read with `ast` (nothing is imported)
               over a sorted walk of each package's .py files; offline and deterministic for a
               pinned environment.
  text_files   local files or glob patterns: a .jsonl file holds one {"text": ...} document per
               line, any other file is one document (UTF-8).
  hf_dataset   `datasets.load_dataset(name, config_name, split=..., streaming=...)`; a local
               builder is named like a hub dataset ("json", "parquet", "text") with `data_files`.

Every source yields documents in a fixed order; exact duplicates, whitespace-only documents and
documents shorter than ``min_document_chars`` are dropped, and so are documents that spell out one
of the tokenizer's special tokens (they would fake a document boundary). A document goes to the
validation split when sha256(text) maps below ``val_fraction``, so its split never depends on the
other documents (an hf_dataset may name its own ``val_split`` instead).

Documents are streamed to the token arrays in batches, so a hub-scale corpus never sits in
memory when ``tokenizer.pretrained`` is set; training a BPE keeps the (laptop-scale) corpus in
memory because the tokenizer must exist before the first document is encoded.

Output folder (written atomically):
  tokenizer/     HF tokenizer (AutoTokenizer.from_pretrained loads it)
  train.bin      flat token ids of the train documents, each followed by eos_id (dtype in meta)
  val.bin        the same for the validation documents
  val.jsonl      one {"text": ...} per validation document, in val.bin order
  meta.json      dtype, vocab_size, eos/pad/bos ids, per-split token and document counts and the
                 sha256 of each .bin (load_tokens checks length, id range and checksum), source
  provenance.json

Size: one module because the three sources, the filtering and split rule, the BPE and the
token-array format with the checks of `load_tokens` are one format contract; writer and reader
must change together.
"""

from __future__ import annotations

import ast
import contextlib
import glob
import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import multiprocessing
import os
import platform
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .atomic_files import atomic_path
from .errors import DataError
from .provenance import Provenance

EOS_TOKEN = "<|endoftext|>"  # also bos, as in GPT-2
PAD_TOKEN = "<|pad|>"
SPLITS = ("train", "val")
ENCODE_BATCH_DOCUMENTS = 2048  # documents per encode_batch call: bounds memory, keeps rayon busy
LOG_EVERY_DOCUMENTS = 200_000


def _require(section: dict | None, key: str, where: str):
    if not isinstance(section, dict) or section.get(key) is None:
        raise DataError(f"{where}.{key}: required (see config/default.yaml for the defaults)")
    return section[key]


def _log(message: str) -> None:
    print(f"[data] {message}", file=sys.stderr, flush=True)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 holds ids 0..65535, so it serves every vocabulary of at most 65536 entries."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def is_validation(text: str, val_fraction: float) -> bool:
    """Stable split: the first 8 bytes of sha256(text) as a fraction of 2**64 (not hash())."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < val_fraction


class DocumentFilter:
    """Length filter and exact deduplication shared by every source; counts what it drops.

    Deduplication keeps 16-byte digests, not texts, so a streamed hub corpus stays small in memory.
    """

    def __init__(self, min_chars: int):
        self.min_chars = max(int(min_chars), 1)
        self.seen: set[bytes] = set()
        self.dropped: dict[str, int] = {}

    def drop(self, reason: str) -> bool:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        return False

    def keep(self, text: str) -> bool:
        if len(text) < self.min_chars or not text.strip():
            return self.drop("too_short")
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError:  # a docstring spelling an unpaired surrogate ("\udc80")
            return self.drop("not_utf8")
        digest = hashlib.blake2b(encoded, digest_size=16).digest()
        if digest in self.seen:
            return self.drop("duplicate")
        self.seen.add(digest)
        return True


# --------------------------------------------------------------------------- docstrings source


def package_source_files(name: str, exclude_dirs=()) -> list[Path]:
    """A package's .py files in sorted relative-path order, located without importing it.

    Dotted names (``scipy.stats``) are resolved under the top-level package's folder because
    `find_spec` on a dotted name would import the parent.
    """
    where = "data.docstrings.packages"
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise DataError(f"{where}: package '{name}' is not installed")
    if spec.submodule_search_locations:  # a package (several folders for a namespace package)
        roots = [Path(p) for p in spec.submodule_search_locations]
    else:
        origin = spec.origin
        if origin == "frozen":  # e.g. `os` in Python 3.11: the source file is still on disk
            origin = getattr(spec.loader_state, "filename", None)
        if not origin or not origin.endswith(".py") or rest:
            raise DataError(f"{where}: '{name}' has no Python source to read docstrings from")
        return [Path(origin)]
    if rest:
        candidates = []
        for root in roots:
            sub = root.joinpath(*rest)
            if sub.is_dir():
                candidates.append(sub)
            elif sub.with_suffix(".py").is_file():
                return [sub.with_suffix(".py")]
        if not candidates:
            raise DataError(f"{where}: package '{name}' is not installed")
        roots = candidates
    exclude = set(exclude_dirs)
    files = []
    for root in sorted(roots):
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in exclude and d != "__pycache__")
            found.extend(Path(dirpath, f) for f in filenames if f.endswith(".py"))
        files.extend(sorted(found, key=lambda p: p.relative_to(root).as_posix()))
    return files


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")


def module_docstrings(path: str | os.PathLike) -> list[str]:
    """Docstrings of a module, its classes and functions, in source order; [] if unparsable."""
    try:
        source = Path(path).read_bytes()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes etc. in third-party sources
            tree = ast.parse(source, filename=str(path))
    except (SyntaxError, ValueError, RecursionError, OSError, MemoryError):
        return []
    docstrings, stack = [], [tree]
    while stack:  # only statement lists can hold a def/class: never visit expressions (2x faster)
        node = stack.pop()
        if isinstance(node, _DOCUMENTED):
            text = ast.get_docstring(node, clean=True)
            if text:
                docstrings.append(text)
        children = []
        for field in _STATEMENT_LISTS:
            value = getattr(node, field, None)
            if isinstance(value, list):
                children.extend(value)
        stack.extend(reversed(children))
    return docstrings


# A docstring's reference part starts at its first section: a numpy-style title underlined with
# ---/===, or a Google/Sphinx-style "Args:" line.
_SECTION_NAMES = re.compile(
    r"^(Parameters|Other Parameters|Arguments|Args|Keyword Arguments|Returns?|Yields?|Raises|"
    r"Warns|Warnings?|Examples?|See Also|Attributes|Methods|References|Notes?|Todo)\s*:?$"
)


def docstring_prose(text: str) -> str:
    """The prose of a docstring: its paragraphs before the first section (Parameters, Returns,
    Examples, ...), each reflowed to one line; paragraphs that hold code (indented lines,
    `>>>` prompts, `::` blocks) or are mostly not words are dropped. "" when nothing is left."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        under = lines[i + 1].strip() if i + 1 < len(lines) else ""
        underlined = stripped and len(under) >= 3 and set(under) <= set("-=~^")
        if underlined or _SECTION_NAMES.match(stripped):
            lines = lines[:i]
            break
    kept = []
    for paragraph in "\n".join(lines).split("\n\n"):
        rows = [row for row in paragraph.splitlines() if row.strip()]
        if not rows or any(row[:1].isspace() or ">>>" in row for row in rows):
            continue
        flowed = " ".join(row.strip() for row in rows)
        if flowed.endswith("::") or len(flowed.split()) < 4:
            continue
        letters = sum(c.isalpha() or c.isspace() for c in flowed)
        if letters < 0.85 * len(flowed) or flowed[-1] not in ".!?":
            continue
        kept.append(flowed)
    return "\n\n".join(kept)


def _ascii_fraction(text: str) -> float:
    return len(text.encode("ascii", "ignore")) / len(text)


def _package_version(name: str, distributions: dict) -> str:
    top = name.split(".")[0]
    dists = distributions.get(top)
    if dists:
        try:
            return f"{dists[0]} {importlib.metadata.version(dists[0])}"
        except importlib.metadata.PackageNotFoundError:
            pass
    if top in sys.stdlib_module_names:
        return f"python {platform.python_version()} stdlib"
    return "unknown version"


def docstring_source(cfg: dict, keep: DocumentFilter, threads: int = 1):
    """(documents iterator, description): English-ish docstrings of the packages, in order.

    Parsing is the cost (~3-5 MB of source per second per core), so with threads > 1 files are
    parsed in worker processes; results are consumed in walk order, so the corpus is identical.
    The iterator stops once max_megabytes of accepted text is reached; the description's
    megabytes_per_package fills in as it runs.
    """
    where = "data.docstrings"
    packages = _require(cfg, "packages", where)
    if not packages:
        raise DataError(f"{where}.packages: empty list")
    max_bytes = float(_require(cfg, "max_megabytes", where)) * 1e6
    min_ascii = float(_require(cfg, "min_ascii_fraction", where))
    exclude_dirs = _require(cfg, "exclude_dirs", where)
    prose_only = bool(cfg.get("prose_only", False))
    files, owners = [], []
    for name in packages:  # resolve all first: a typo fails before any parsing
        found = package_source_files(name, exclude_dirs)
        files.extend(found)
        owners.extend([name] * len(found))
    distributions = importlib.metadata.packages_distributions()  # scans every installed package
    description = {
        "kind": "docstrings",
        "packages": {name: _package_version(name, distributions) for name in packages},
        "megabytes_per_package": dict.fromkeys(packages, 0.0),
        "max_megabytes": cfg["max_megabytes"],
        "reached_max_megabytes": False,
        **({"prose_only": True} if prose_only else {}),
    }

    def documents():
        pool = None
        if threads > 1 and len(files) > 1:
            # fork: workers only parse, and start in milliseconds (spawn re-imports everything)
            pool = multiprocessing.get_context("fork").Pool(threads)
            per_file = pool.imap(module_docstrings, files, chunksize=8)
        else:
            per_file = map(module_docstrings, files)
        per_package = dict.fromkeys(packages, 0)
        total = 0
        try:
            for owner, docstrings in zip(owners, per_file):
                for text in docstrings:
                    if prose_only:
                        text = docstring_prose(text)
                    if not keep.keep(text):
                        continue
                    if _ascii_fraction(text) < min_ascii:
                        keep.drop("not_ascii")
                        continue
                    size = len(text.encode("utf-8"))
                    total += size
                    per_package[owner] += size
                    description["megabytes_per_package"][owner] = round(per_package[owner] / 1e6, 3)
                    yield text
                    if total >= max_bytes:
                        description["reached_max_megabytes"] = True
                        return
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()

    return documents(), description


# --------------------------------------------------------------------------- text files source


def resolve_text_files(paths: list[str]) -> list[Path]:
    where = "data.text_files.paths"
    if not paths:
        raise DataError(f"{where}: empty list (name files or glob patterns)")
    files = []
    for pattern in paths:
        if glob.has_magic(pattern):
            matches = sorted(
                Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file()
            )
            if not matches:
                raise DataError(f"{where}: pattern '{pattern}' matches no file")
            files.extend(matches)
        else:
            if not Path(pattern).is_file():
                raise DataError(f"{where}: file '{pattern}' does not exist")
            files.append(Path(pattern))
    return files


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


def text_file_source(cfg: dict, keep: DocumentFilter):
    """(documents iterator, description, files): .jsonl = one {"text"} per line, else a file."""
    where = "data.text_files.paths"
    files = resolve_text_files(_require(cfg, "paths", "data.text_files"))

    def documents():
        for path in files:
            if path.suffix != ".jsonl":
                try:
                    text = path.read_text(encoding="utf-8")
                except UnicodeDecodeError as error:
                    raise DataError(f"{where}: {path}: not UTF-8 text ({error})") from None
                if keep.keep(text):
                    yield text
                continue
            for text in iter_jsonl_texts(path, "text", where):
                if keep.keep(text):
                    yield text

    return documents(), {"kind": "text_files", "files": [str(p) for p in files]}, files


# --------------------------------------------------------------------------- hf_dataset source


def _hf_split(cfg: dict, split: str, limit: int, keep: DocumentFilter):
    kwargs = {"streaming": cfg["streaming"]}
    for key in ("data_files", "cache_dir", "revision"):
        if cfg.get(key) is not None:
            kwargs[key] = cfg[key]
    kept = 0
    for text in iter_dataset_texts(
        cfg["name"], cfg.get("config_name"), split, cfg["text_field"], "data.hf_dataset", **kwargs
    ):
        if keep.keep(text):
            yield text
            kept += 1
            if kept >= limit:
                return


def _local_data_files(data_files) -> list[Path]:
    """Local files named by data_files (for provenance checksums); hub patterns match nothing."""
    if data_files is None:
        return []
    if isinstance(data_files, str):
        data_files = [data_files]
    if isinstance(data_files, dict):
        data_files = list(
            itertools.chain.from_iterable(
                [v] if isinstance(v, str) else v for v in data_files.values()
            )
        )
    return sorted(
        {Path(p) for pattern in data_files for p in glob.glob(pattern) if Path(p).is_file()}
    )


def hf_dataset_source(cfg: dict, keep: DocumentFilter):
    """(iterator of (split or None, text), description, local files).

    With val_split, its first max_val_documents come first (split "val"), then the first
    max_documents new documents of `split` (split "train"): a train document equal to a val
    document is a duplicate, so nothing leaks. Without val_split the split is None (hash split).
    """
    where = "data.hf_dataset"
    for key in ("name", "split", "text_field", "max_documents", "streaming"):
        _require(cfg, key, where)
    val_split = cfg.get("val_split")
    max_val = _require(cfg, "max_val_documents", where) if val_split is not None else 0

    def documents():
        if val_split is not None:
            yield from (("val", text) for text in _hf_split(cfg, val_split, max_val, keep))
        train_label = "train" if val_split is not None else None
        yield from (
            (train_label, text) for text in _hf_split(cfg, cfg["split"], cfg["max_documents"], keep)
        )

    description = {
        "kind": "hf_dataset",
        "name": cfg["name"],
        "config_name": cfg.get("config_name"),
        "split": cfg["split"],
        "val_split": val_split,
        "data_files": cfg.get("data_files"),
    }
    try:
        description["datasets_version"] = importlib.metadata.version("datasets")
    except importlib.metadata.PackageNotFoundError:
        pass
    return documents(), description, _local_data_files(cfg.get("data_files"))


def _unlabelled(documents):
    with contextlib.closing(documents):  # closing this closes the source (its worker pool)
        for text in documents:
            yield None, text


def open_source(data_config: dict, keep: DocumentFilter, threads: int = 1):
    """(iterator of (split or None, text), description, input files) for data.source."""
    source = _require(data_config, "source", "data")
    if source == "docstrings":
        docs, description = docstring_source(data_config.get("docstrings"), keep, threads)
        return _unlabelled(docs), description, []
    if source == "text_files":
        docs, description, files = text_file_source(data_config.get("text_files"), keep)
        return _unlabelled(docs), description, files
    if source == "hf_dataset":
        return hf_dataset_source(data_config.get("hf_dataset"), keep)
    raise DataError(
        f"data.source: unknown source '{source}' (docstrings, text_files or hf_dataset)"
    )


# --------------------------------------------------------------------------- tokenizer


def train_bpe(documents: list[str], vocab_size: int):
    """Byte-level BPE (GPT-2 pre-tokenization) with eos/bos and pad as special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # every byte encodable
    tokenizer.train_from_iterator(documents, trainer, length=len(documents))
    return tokenizer


def hf_tokenizer(tokenizer):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        clean_up_tokenization_spaces=False,
    )  # decode must give back the exact text


def load_pretrained_tokenizer(name: str, revision: str | None = None):
    from transformers import AutoTokenizer

    where = "data.tokenizer.pretrained"
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, revision=revision)
    except (OSError, ValueError) as error:
        raise DataError(f"{where}: cannot load tokenizer '{name}': {error}") from None
    if tokenizer.eos_token_id is None:
        raise DataError(
            f"{where}: tokenizer '{name}' has no eos token (needed as the document separator)"
        )
    return tokenizer


def encode_documents(tokenizer, documents: list[str]) -> list[list[int]]:
    """Token ids of a batch of documents, without special tokens added: the training stream's
    encoding (its only special token is the eos written after each document)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # Rust batch encode: parallel over documents (RAYON_NUM_THREADS)
        return [e.ids for e in backend.encode_batch_fast(documents, add_special_tokens=False)]
    return tokenizer(documents, add_special_tokens=False)["input_ids"]


class SplitWriter:
    """Streams one split: documents in, `<split>.bin` (ids + eos per document) out in batches."""

    def __init__(self, folder: Path, split: str, tokenizer, eos_id: int, dtype: np.dtype):
        self.tokenizer, self.eos_id, self.dtype = tokenizer, eos_id, dtype
        self.bin = open(folder / f"{split}.bin", "wb")
        self.jsonl = open(folder / "val.jsonl", "w", encoding="utf-8") if split == "val" else None
        self.pending: list[str] = []
        self.counts = {"documents": 0, "tokens": 0, "bytes": 0}
        self.sha256 = hashlib.sha256()  # of the .bin as written: load_tokens checks it

    def add(self, text: str) -> None:
        self.pending.append(text)
        if len(self.pending) >= ENCODE_BATCH_DOCUMENTS:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        ids = encode_documents(self.tokenizer, self.pending)
        count = sum(len(i) for i in ids) + len(ids)
        flat = np.fromiter(
            itertools.chain.from_iterable(itertools.chain(i, (self.eos_id,)) for i in ids),
            dtype=self.dtype,
            count=count,
        )
        flat.tofile(self.bin)
        self.sha256.update(flat.tobytes())
        if self.jsonl is not None:
            self.jsonl.writelines(
                json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in self.pending
            )
        self.counts["documents"] += len(self.pending)
        self.counts["tokens"] += count
        self.counts["bytes"] += sum(len(t.encode("utf-8")) for t in self.pending)
        self.pending = []

    def close(self) -> dict:
        """The split's meta.json entry: documents, tokens, text bytes and the .bin's sha256."""
        self.flush()
        self.bin.close()
        if self.jsonl is not None:
            self.jsonl.close()
        return {**self.counts, "sha256": self.sha256.hexdigest()}


# --------------------------------------------------------------------------- the stage


def prepare_corpus(
    data_config: dict, out_dir: str | os.PathLike, seed: int, threads: int = 1
) -> dict:
    """Build the data stage's output folder atomically; returns its meta.json content.

    `seed` is recorded only: the split hashes each document and BPE training is deterministic,
    so the validation set is the same for every seed (models trained with different seeds are
    compared on the same text).
    """
    provenance = Provenance("data", config=data_config, seed=seed)
    val_fraction = float(_require(data_config, "val_fraction", "data"))
    tok_cfg = _require(data_config, "tokenizer", "data")
    pretrained = tok_cfg.get("pretrained")
    vocab_size = None if pretrained else int(_require(tok_cfg, "vocab_size", "data.tokenizer"))
    keep = DocumentFilter(_require(data_config, "min_document_chars", "data"))
    documents, source, input_files = open_source(data_config, keep, threads)
    provenance.inputs = [str(p) for p in input_files]
    seconds, clock = {}, time.perf_counter()

    with atomic_path(out_dir, is_dir=True) as tmp, contextlib.closing(documents):
        tokenizer = (
            load_pretrained_tokenizer(pretrained, tok_cfg.get("revision")) if pretrained else None
        )
        specials = (
            sorted(set(tokenizer.all_special_tokens) - {""})
            if tokenizer
            else [EOS_TOKEN, PAD_TOKEN]
        )
        special_pattern = re.compile("|".join(map(re.escape, specials)))  # eos at least

        def labelled():
            """(split, text) after the special-token filter, with the hash split applied."""
            for number, (split, text) in enumerate(documents, 1):
                if number % LOG_EVERY_DOCUMENTS == 0:
                    _log(f"{number} documents read")
                if special_pattern.search(text):
                    keep.drop("contains_special_token")
                    continue
                if split is None:
                    split = "val" if is_validation(text, val_fraction) else "train"
                yield split, text

        stream = labelled()
        if tokenizer is None:
            # The BPE must exist before the first document is encoded: hold this corpus.
            held = list(stream)
            seconds["corpus"] = time.perf_counter() - clock
            _log(
                f"corpus: {len(held)} documents from {source['kind']} in {seconds['corpus']:.1f} s"
            )
            clock = time.perf_counter()
            tokenizer = hf_tokenizer(train_bpe([t for s, t in held if s == "train"], vocab_size))
            tokenizer_info = {
                "kind": "byte_level_bpe",
                "trained_on": "train split",
                "vocab_size_requested": vocab_size,
            }
            stream = iter(held)
        else:
            tokenizer_info = {"kind": "pretrained", "name": pretrained}
        tokenizer.save_pretrained(tmp / "tokenizer")
        seconds["tokenizer"] = time.perf_counter() - clock
        _log(f"tokenizer: {tokenizer_info['kind']} in {seconds['tokenizer']:.1f} s")

        clock = time.perf_counter()
        vocab = len(tokenizer)
        dtype = token_dtype(vocab)
        eos_id = tokenizer.eos_token_id
        bos_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos_id
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
        writers = {split: SplitWriter(tmp, split, tokenizer, eos_id, dtype) for split in SPLITS}
        for split, text in stream:
            writers[split].add(text)
        splits = {split: writer.close() for split, writer in writers.items()}
        seconds["encode"] = time.perf_counter() - clock
        _log(
            f"encode: {splits['train']['tokens'] + splits['val']['tokens']} tokens in "
            f"{seconds['encode']:.1f} s"
        )

        total = splits["train"]["documents"] + splits["val"]["documents"]
        if total == 0:
            raise DataError(
                f"data.source: the '{data_config['source']}' corpus is empty after "
                f"filtering (dropped: {keep.dropped or 'nothing'})"
            )
        for split in SPLITS:
            if not splits[split]["documents"]:
                key = (
                    "data.hf_dataset.val_split"
                    if source.get("val_split") is not None
                    else "data.val_fraction"
                )
                raise DataError(
                    f"{key}: the {split} split is empty ({total} documents in all); "
                    f"use a larger corpus or another val_fraction"
                )

        meta = {
            "format": "flat token ids per split, each document followed by eos_id",
            "dtype": dtype.name,
            "vocab_size": vocab,
            "eos_id": eos_id,
            "bos_id": bos_id,
            "pad_id": pad_id,
            "splits": splits,
            "split_rule": (
                "source val_split"
                if source.get("val_split") is not None
                else f"sha256(text) < val_fraction={val_fraction}"
            ),
            "source": source,
            "tokenizer": tokenizer_info,
            "dropped_documents": dict(sorted(keep.dropped.items())),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        provenance.extra["threads"] = threads
        provenance.extra["phase_seconds"] = {k: round(v, 3) for k, v in seconds.items()}
        provenance.write(tmp / "provenance.json")
    return meta


def read_meta(data_dir: str | os.PathLike) -> dict:
    """A data stage output's meta.json; DataError naming the file when it is missing or bad."""
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        raise DataError(f"{path}: no meta.json (is {data_dir} a data stage output?)")
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise DataError(f"{path}: not a JSON file ({error})") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: not a JSON object")
    return meta


# Per process: (file identity, expected length/range/checksum) already verified -> skip rehashing.
_VERIFIED: set[tuple] = set()
VERIFY_CHUNK_TOKENS = 1 << 22  # 4M tokens (8-16 MB) per read while hashing and range-checking


def _meta_field(meta: dict, key: str, meta_path: Path, check):
    value = meta.get(key)
    if not check(value):
        raise DataError(f"{meta_path}: '{key}' is missing or invalid ({value!r})")
    return value


def verify_tokens(data_dir: str | os.PathLike, split: str, meta: dict | None = None) -> None:
    """Check `<split>.bin` against meta.json: a whole number of tokens, the recorded token count,
    every id below vocab_size, and (folders written since checksums were added) the recorded
    sha256. DataError naming the file and what is wrong otherwise. One pass over the file; a
    file already verified by this process (same inode, size, mtime) is not read again.
    """
    if split not in SPLITS:
        raise ValueError(f"split: '{split}' is not one of {', '.join(SPLITS)}")
    data_dir = Path(data_dir)
    meta = read_meta(data_dir) if meta is None else meta
    meta_path = data_dir / "meta.json"
    dtype = np.dtype(_meta_field(meta, "dtype", meta_path, lambda v: v in ("uint16", "uint32")))
    vocab = _meta_field(
        meta,
        "vocab_size",
        meta_path,
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    )
    splits = meta.get("splits")
    recorded = splits.get(split) if isinstance(splits, dict) else None
    recorded = recorded if isinstance(recorded, dict) else {}
    expected_tokens, expected_sha = recorded.get("tokens"), recorded.get("sha256")
    if expected_tokens is not None and not isinstance(expected_tokens, int):
        raise DataError(f"{meta_path}: splits.{split}.tokens is not a count ({expected_tokens!r})")
    if expected_sha is not None and not isinstance(expected_sha, str):
        raise DataError(f"{meta_path}: splits.{split}.sha256 is not a hex digest")
    path = data_dir / f"{split}.bin"
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise DataError(f"{path}: missing (is {data_dir} a complete data stage output?)") from None
    if not path.is_file():
        raise DataError(f"{path}: not a file")
    if stat.st_size % dtype.itemsize:
        raise DataError(
            f"{path}: {stat.st_size} bytes is not a whole number of {dtype.name} "
            f"tokens (truncated mid-token?); rerun the data stage"
        )
    length = stat.st_size // dtype.itemsize
    if expected_tokens is not None and length != expected_tokens:
        what = "truncated" if length < expected_tokens else "longer than written"
        raise DataError(
            f"{path}: {length} tokens, but meta.json records {expected_tokens} "
            f"({what}); rerun the data stage"
        )
    if length == 0:
        raise DataError(f"{path}: no tokens; rerun the data stage")
    key = (
        str(path.resolve()),
        stat.st_ino,
        stat.st_size,
        stat.st_mtime_ns,
        dtype.name,
        vocab,
        expected_sha,
    )
    if key in _VERIFIED:
        return
    tokens = np.memmap(path, dtype=dtype, mode="r")
    digest = hashlib.sha256()
    for start in range(0, length, VERIFY_CHUNK_TOKENS):
        chunk = np.asarray(tokens[start : start + VERIFY_CHUNK_TOKENS])
        if int(chunk.max()) >= vocab:
            position = start + int(np.argmax(chunk >= vocab))
            raise DataError(
                f"{path}: token id {int(tokens[position])} at position {position} is "
                f"outside the vocabulary (vocab_size {vocab} in meta.json); the file "
                f"does not belong to this tokenizer or is corrupt"
            )
        if expected_sha is not None:
            digest.update(chunk.data)
    del tokens
    if expected_sha is not None and digest.hexdigest() != expected_sha:
        raise DataError(
            f"{path}: sha256 {digest.hexdigest()[:16]}... differs from the "
            f"{expected_sha[:16]}... meta.json records: the file changed after the "
            f"data stage wrote it (overwritten or zeroed?); rerun the data stage"
        )
    _VERIFIED.add(key)


def load_tokens(data_dir: str | os.PathLike, split: str) -> np.memmap:
    """A split's flat token ids as a read-only 1-D memory map (dtype from meta.json), verified
    against meta.json first (`verify_tokens`): a truncated, zeroed or foreign .bin is a
    DataError naming it, never silently trained on."""
    if split not in SPLITS:
        raise ValueError(f"split: '{split}' is not one of {', '.join(SPLITS)}")
    meta = read_meta(data_dir)
    verify_tokens(data_dir, split, meta)
    return np.memmap(Path(data_dir) / f"{split}.bin", dtype=np.dtype(meta["dtype"]), mode="r")
