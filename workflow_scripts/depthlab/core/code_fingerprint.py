"""Which library code a stage script runs, and a fingerprint of it that ignores comments.

The workflow reruns a job when the code its script runs changes (Snakemake alone only sees the
script file). The code a script runs is the script plus the `depthlab` modules it imports,
transitively (`import_closure`); its fingerprint (`code_fingerprint`) hashes each file's parsed
syntax tree with docstrings removed, so an edit of a comment or a docstring changes nothing and
reruns nothing, while any edit of code reruns exactly the rules whose scripts import it. The rules
pass the fingerprint as a param (Snakemake reruns a job whose params changed).
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

PACKAGE = "depthlab"


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
    """imported_modules, parsed once per file version: the Snakefile asks for every rule's
    closure, and the rules' closures share most files (file time and size are in the key, so an
    edited file is parsed again)."""
    inside = path.is_relative_to(package_dir)
    here = _dotted_name(package_dir, path) if inside else ""
    if inside and Path(path).name != "__init__.py":
        here = here.rpartition(".")[0]  # a module's relative imports start at its package
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(f"{PACKAGE}."):
                    found.add(alias.name.removeprefix(f"{PACKAGE}."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".") if here else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, *([node.module] if node.module else [])])
            elif node.module == PACKAGE:
                base = ""
            elif (node.module or "").startswith(f"{PACKAGE}."):
                base = node.module.removeprefix(f"{PACKAGE}.")
            else:
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}" if base else alias.name
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


@cache
def source_fingerprint(path: Path) -> str:
    """sha256 of the file's syntax tree without docstrings (comments never reach the tree)."""
    tree = _without_docstrings(ast.parse(Path(path).read_text()))
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()


def code_fingerprint(files, root: Path) -> str:
    """One fingerprint of several files: their paths relative to `root` and their syntax."""
    digest = hashlib.sha256()
    for path in sorted(Path(f).resolve() for f in files):
        digest.update(
            f"{path.relative_to(Path(root).resolve())}\0{source_fingerprint(path)}\n".encode()
        )
    return digest.hexdigest()[:16]
