"""The data stage's corpus: its three sources, the document filter and the split rule.

Sources (``data.source``):
  docstrings   English docstrings of installed packages, read with `ast` (nothing is imported)
               over a sorted walk of each package's .py files; offline and deterministic for a
               pinned environment.
  text_files   local files or glob patterns: a .jsonl file holds one {"text": ...} document per
               line, any other file is one document (UTF-8).
  hf_dataset   `datasets.load_dataset(name, config_name, split=..., streaming=...)`; a local
               builder is named like a hub dataset ("json", "parquet", "text") with `data_files`.

Every source yields documents in a fixed order; exact duplicates, whitespace-only documents and
documents shorter than ``min_document_chars`` are dropped (`DocumentFilter`). A document goes to
the validation split when sha256(text) maps below ``val_fraction`` (`is_validation`), so its
split never depends on the other documents (an hf_dataset may name its own ``val_split``
instead). `open_source` is the one entry point: (split or None, text) pairs in corpus order.
"""

from __future__ import annotations

import ast
import contextlib
import glob
import hashlib
import importlib.metadata
import importlib.util
import itertools
import multiprocessing
import os
import platform
import re
import sys
import warnings
from pathlib import Path

from depthlab.core.errors import DataError
from depthlab.data.texts import iter_dataset_texts, iter_jsonl_texts


def _require(section: dict | None, key: str, where: str):
    if not isinstance(section, dict) or section.get(key) is None:
        raise DataError(f"{where}.{key}: required (see config/default.yaml for the defaults)")
    return section[key]


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
                    per_package[owner] += len(text.encode("utf-8"))
                    if not keep.keep(text):
                        continue
                    if _ascii_fraction(text) < min_ascii:
                        keep.drop("not_ascii")
                        continue
                    size = len(text.encode("utf-8"))
                    total += size
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
