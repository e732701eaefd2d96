"""Which library code a stage script runs, and a fingerprint of it that ignores comments.

The workflow reruns a job when the code its script runs changes (Snakemake alone only sees the
script file). The code a script runs is the script plus the `depthlab` modules it imports,
transitively (`import_closure`); its fingerprint (`code_fingerprint`) hashes each file's parsed
syntax tree with docstrings removed, so an edit of a comment or a docstring changes nothing and
reruns nothing, while any edit of code reruns exactly the rules whose scripts import it. The rules
pass the fingerprint as a param (Snakemake reruns a job whose params changed). The files of the
checkout that library modules read by path (depthlab.core.repo_files.READ_BY: the schema's
defaults, the caption templates, ...) are part of the fingerprint of every script whose closure
holds one of their readers (`read_files`): a YAML file's parsed content without its
`description:` texts (a description edit reruns nothing), any other file's bytes.

Every Snakemake start computes this for every rule's script, which parsing ~130 files made about
half of a dry run's CPU time. A file's syntax (its fingerprint and import statements) is a pure
function of its bytes and the Python version, so it is kept in a content-addressed cache
(`syntax_cache_dir`: one small JSON file per file version, keyed by the sha256 of the bytes, the
Python version and the cache format): shared by every checkout, never stale (an edited file has
another key), and optional (an unwritable cache directory only costs the parse).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from depthlab.core import repo_files

PACKAGE = "depthlab"
# Bumped when what a cache entry holds changes; with the Python version (ast.dump's output may
# differ between versions) it is part of every key.
SYNTAX_CACHE_FORMAT = 1
SYNTAX_CACHE_ENV = "DEPTHLAB_SYNTAX_CACHE"  # a folder, or "off"
# Shapes specs at DAG time: a change that matters changes the specs (params), so it is not part
# of a script's tracked code (otherwise every edit of it would rerun every job).
SPEC_MODULES = frozenset({"config"})  # the package with its submodules (config.load, ...)


def syntax_cache_dir() -> Path | None:
    """Where file syntaxes are cached: $DEPTHLAB_SYNTAX_CACHE ("off": nowhere), else
    $XDG_CACHE_HOME/depthlab/syntax (default ~/.cache/depthlab/syntax)."""
    chosen = os.environ.get(SYNTAX_CACHE_ENV)
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / PACKAGE / "syntax"


@dataclass(frozen=True)
class Syntax:
    """What the fingerprint and the import closure need of one file: the sha256 of its syntax
    tree without docstrings, and its import statements as (level, module, names) (`import a.b`:
    (0, "a.b", None))."""

    fingerprint: str
    imports: tuple


def _parse(source: bytes) -> Syntax:
    tree = ast.parse(source)
    imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.extend((0, alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imports.append((node.level, node.module, tuple(alias.name for alias in node.names)))
    dump = ast.dump(_without_docstrings(tree), include_attributes=False)
    return Syntax(hashlib.sha256(dump.encode()).hexdigest(), tuple(imports))


def _cache_key(source: bytes) -> str:
    version = f"{SYNTAX_CACHE_FORMAT}-py{sys.version_info[0]}.{sys.version_info[1]}"
    return hashlib.sha256(version.encode() + b"\0" + source).hexdigest()


def _cached(folder: Path, key: str) -> Syntax | None:
    try:
        entry = json.loads((folder / f"{key}.json").read_text())
        return Syntax(
            entry["fingerprint"],
            tuple(
                (level, module, None if names is None else tuple(names))
                for level, module, names in entry["imports"]
            ),  # fmt: skip
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, unreadable or foreign: parse instead


def _store(folder: Path, key: str, syntax: Syntax) -> None:
    entry = {"fingerprint": syntax.fingerprint, "imports": [list(i) for i in syntax.imports]}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{key}.{os.getpid()}.tmp"
        partial.write_text(json.dumps(entry))
        os.replace(partial, folder / f"{key}.json")  # readers see a whole entry or none
    except OSError:
        pass  # a read-only home or cluster file system: the cache is only a shortcut


@cache
def _file_syntax(path: Path, mtime_ns: int, size: int, folder: Path | None) -> Syntax:
    source = path.read_bytes()
    if folder is None:
        return _parse(source)
    key = _cache_key(source)
    syntax = _cached(folder, key)
    if syntax is None:
        syntax = _parse(source)
        _store(folder, key, syntax)
    return syntax


def file_syntax(path: Path) -> Syntax:
    """The Syntax of the file at `path`: from the cache when this version of the file was
    parsed before, else parsed (and cached); once per file version within a process."""
    path = Path(path).resolve()
    stat = path.stat()
    return _file_syntax(path, stat.st_mtime_ns, stat.st_size, syntax_cache_dir())


def _module_file(package_dir: Path, dotted: str) -> Path | None:
    """The file of module `dotted` (relative to the package, e.g. "config.load"), or None."""
    base = package_dir.joinpath(*dotted.split(".")) if dotted else package_dir
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _dotted_name(package_dir: Path, path: Path) -> str:
    """ "config.load" for depthlab/config/load.py, "config" for depthlab/config/__init__.py."""
    parts = list(path.relative_to(package_dir).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, package_dir: Path) -> set[str]:
    """The package modules (dotted, relative to the package) that the file at `path` imports,
    anywhere in it (scripts import inside main()); `from x import name` counts `x.name` when
    that is a module (a subpackage's module), else `x`."""
    package_dir, path = Path(package_dir).resolve(), Path(path).resolve()
    stat = path.stat()
    return set(_imported_modules(path, package_dir, stat.st_mtime_ns, stat.st_size))


@cache
def _imported_modules(path: Path, package_dir: Path, mtime_ns: int, size: int) -> frozenset:
    """imported_modules, resolved once per file version: the Snakefile asks for every rule's
    closure, and the rules' closures share most files (file time and size are in the key, so an
    edited file is resolved again)."""
    inside = path.is_relative_to(package_dir)
    here = _dotted_name(package_dir, path) if inside else ""
    if inside and path.name != "__init__.py":
        here = here.rpartition(".")[0]  # a module's relative imports start at its package
    found = set()
    for level, module, names in file_syntax(path).imports:
        if names is None:  # import a.b
            if module.startswith(f"{PACKAGE}."):
                found.add(module.removeprefix(f"{PACKAGE}."))
            continue
        if level:
            parts = here.split(".") if here else []
            parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
            base = ".".join([*parts, *([module] if module else [])])
        elif module == PACKAGE:
            base = ""
        elif (module or "").startswith(f"{PACKAGE}."):
            base = module.removeprefix(f"{PACKAGE}.")
        else:
            continue
        for name in names:
            child = f"{base}.{name}" if base else name
            found.add(child if _module_file(package_dir, child) else base)
    found.discard("")
    return frozenset(name for name in found if _module_file(package_dir, name))


def _with_parents(name: str) -> list[str]:
    """Importing a.b.c runs a/__init__, a/b/__init__ too."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def import_closure(
    script: Path, package_dir: Path, untracked: frozenset = frozenset()
) -> list[Path]:
    """The package files `script` runs: its imports, transitively, sorted; modules named in
    `untracked` (and their submodules) are left out. The package's __init__.py is included."""
    package_dir = Path(package_dir).resolve()

    def skipped(name):
        return any(name == u or name.startswith(f"{u}.") for u in untracked)

    todo, seen = list(imported_modules(script, package_dir)), set()
    while todo:
        name = todo.pop()
        for module in _with_parents(name):
            if module in seen or skipped(module):
                continue
            seen.add(module)
            todo.extend(imported_modules(_module_file(package_dir, module), package_dir))
    files = [package_dir / "__init__.py", *(_module_file(package_dir, m) for m in sorted(seen))]
    return sorted({f for f in files if f is not None and f.is_file()})


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def read_files(files) -> list[Path]:
    """The files of the checkout declared as read by one of the library modules among `files`
    (depthlab.core.repo_files.READ_BY; a declared folder: every file in it), sorted: what that
    code reads decides what it does as much as its source."""
    package_dir = repo_files.PACKAGE_DIR
    modules = {
        _dotted_name(package_dir, path)
        for path in (Path(f).resolve() for f in files)
        if path.suffix == ".py" and path.is_relative_to(package_dir)
    }
    found = set()
    for declared in repo_files.READ_BY:
        if modules.intersection(declared.readers):
            found.update(path.resolve() for path in declared.files())
    return sorted(found)


def _without_descriptions(node, property_names: bool = False):
    """A parsed YAML document less every `description:` text (a schema's documentation); the
    keys of a `properties:` mapping are names, kept whatever they are."""
    if isinstance(node, dict):
        return {
            key: _without_descriptions(value, key == "properties" and not property_names)
            for key, value in node.items()
            if property_names or not (key == "description" and isinstance(value, str))
        }
    if isinstance(node, list):
        return [_without_descriptions(value) for value in node]
    return node


@cache
def _data_fingerprint(path: Path, mtime_ns: int, size: int) -> str:
    data = path.read_bytes()
    if path.suffix in (".yaml", ".yml"):
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser where built
        document = _without_descriptions(yaml.load(data, Loader=loader))
        data = json.dumps(document, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()


def source_fingerprint(path: Path) -> str:
    """sha256 of what of a file decides what code does: a Python file's syntax tree without
    docstrings (comments never reach the tree); a YAML file's parsed content without its
    `description:` texts; any other file's bytes."""
    path = Path(path).resolve()
    if path.suffix == ".py":
        return file_syntax(path).fingerprint
    stat = path.stat()
    return _data_fingerprint(path, stat.st_mtime_ns, stat.st_size)


def code_fingerprint(files, root: Path) -> str:
    """One fingerprint of several files and of the checkout's files their modules read
    (read_files): their paths relative to `root` and their syntax (or content)."""
    paths = {Path(f).resolve() for f in files}
    paths.update(read_files(paths))
    root = Path(root).resolve()
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(f"{os.path.relpath(path, root)}\0{source_fingerprint(path)}\n".encode())
    return digest.hexdigest()[:16]


def script_code(script: Path) -> dict[str, str]:
    """{path relative to the checkout: fingerprint} of the code a workflow script runs (the
    script, its library closure and the files it reads, as the rule's `code` param fingerprints
    them), for its jobs' provenance records: a rerun for changed code can then name the files."""
    script = Path(script).resolve()
    package_dir = script.parent / PACKAGE
    files = [script, *import_closure(script, package_dir, SPEC_MODULES)]
    files += read_files(files)
    root = script.parent.parent
    return {
        Path(os.path.relpath(path, root)).as_posix(): source_fingerprint(path) for path in files
    }


def code_changes(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """The files whose code differs between two script_code maps: changed, new, or no longer
    run, sorted."""
    lines = []
    for name in sorted(recorded.keys() | current.keys()):
        if name not in recorded:
            lines.append(f"{name} (new)")
        elif name not in current:
            lines.append(f"{name} (no longer run)")
        elif recorded[name] != current[name]:
            lines.append(name)
    return lines
