"""Nothing hidden from the layer contract and the code fingerprint: the library reads no file of
the checkout by a path of its own (a walk from `__file__`, `parents[N]`) and loads no module by
name (`importlib.import_module`, a "module:function" string); the files it does read are declared
once, with their readers, in depthlab.core.repo_files, and each is part of the code fingerprint
of exactly the scripts whose closure holds a reader."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from depthlab.core import code_fingerprint as cf
from depthlab.core import repo_files
from depthlab.core.repo_files import READ_BY, ReadFile

PACKAGE = repo_files.PACKAGE_DIR
SCRIPTS = PACKAGE.parent
DECLARATION = "core/repo_files.py"  # the one module allowed to walk from its own location
LOADERS = {"import_module", "__import__", "spec_from_file_location", "run_path", "run_module"}
# a string that is a library module's name, with or without ":function" (what importlib loads)
MODULE_NAME = re.compile(r"^depthlab(\.\w+)+(:\w+)?$")


def library_sources() -> dict[str, str]:
    """{path below the package: source} of every library module."""
    return {
        path.relative_to(PACKAGE).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def hidden_dependencies(sources: dict[str, str]) -> list[str]:
    """`<module>:<line>: <what>` for every path walk from the module's own location and every
    module loaded by name, outside the declaration."""
    found = []
    for name, source in sources.items():
        if name == DECLARATION:
            continue
        for node in ast.walk(ast.parse(source)):
            what = None
            if isinstance(node, ast.Name) and node.id == "__file__":
                what = "a path walk from __file__ (declare the file in core/repo_files.py)"
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "parents"
            ):
                what = "a parents[N] path (declare the file in core/repo_files.py)"
            elif isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else None
                called = node.func.id if isinstance(node.func, ast.Name) else called
                if called in LOADERS:
                    what = f"a module loaded by name ({called}: import it instead)"
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if MODULE_NAME.match(node.value):
                    what = f"a module named by a string {node.value!r} (import it instead)"
            if what:
                found.append(f"{name}:{node.lineno}: {what}")
    return sorted(set(found))


def test_the_library_reads_no_file_by_its_own_path_and_loads_no_module_by_name():
    assert hidden_dependencies(library_sources()) == []


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        ('X = Path(__file__).resolve().parents[3] / "config" / "x.yaml"\n', "__file__"),
        ('X = Path(__file__).with_name("table.yaml")\n', "__file__"),
        ("X = HERE.parents[2]\n", "parents[N]"),
        (
            'import importlib\nX = importlib.import_module("depthlab.core.errors")\n',
            "import_module",
        ),
        ('RANK = "depthlab.stages.pruning.criteria:rank_ppl"\n', "named by a string"),
        ('STAGE = "depthlab.stages.pruning.stage"\nRANK = f"{STAGE}:rank_angular"\n', "string"),
    ],
)
def test_a_planted_hidden_dependency_is_found(planted, expected):
    sources = library_sources()
    sources["settings/pruning.py"] += "\n" + planted
    found = hidden_dependencies(sources)
    assert len(found) >= 1 and all(line.startswith("settings/pruning.py:") for line in found)
    assert any(expected in line for line in found), found


def read_file_constants() -> dict[str, Path]:
    """{name: path} of repo_files' constants naming a declared file."""
    declared = {d.path for d in READ_BY}
    return {n: v for n, v in vars(repo_files).items() if isinstance(v, Path) and v in declared}


def readers_found(sources: dict[str, str]) -> dict[Path, set[str]]:
    """{declared file: the modules that import its constant from depthlab.core.repo_files}."""
    constants = read_file_constants()
    found: dict[Path, set[str]] = {path: set() for path in constants.values()}
    for name, source in sources.items():
        dotted = name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module == "depthlab.core.repo_files":
                names = [alias.name for alias in node.names]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "repo_files"
            ):
                names = [node.attr]
            for constant in names:
                if constant in constants:
                    found[constants[constant]].add(dotted)
    return found


def test_every_declared_file_exists_and_its_readers_are_exactly_the_modules_naming_it():
    assert set(read_file_constants().values()) == {d.path for d in READ_BY}
    for declared in READ_BY:
        assert declared.files(), declared.path
        for reader in declared.readers:
            assert (PACKAGE / (reader.replace(".", "/") + ".py")).is_file(), reader
    found = readers_found(library_sources())
    assert {d.path: set(d.readers) for d in READ_BY} == found


def test_a_reader_left_out_of_the_declaration_is_found():
    sources = library_sources()
    sources["stages/toy/plots.py"] += "\nfrom depthlab.core.repo_files import CAPTIONS\n"
    found = readers_found(sources)
    assert "stages.toy.plots" in found[repo_files.CAPTIONS]
    assert found != {d.path: set(d.readers) for d in READ_BY}


# --------------------------------------------------------------------------- the fingerprint


@pytest.fixture
def declared_copies(tmp_path, monkeypatch):
    """The schema and the caption templates copied to tmp_path and declared there, with the same
    readers: their edits below touch no file of the checkout."""
    schema = tmp_path / "schema.yaml"
    shutil.copy(repo_files.SCHEMA, schema)
    captions = tmp_path / "captions"
    shutil.copytree(repo_files.CAPTIONS, captions)
    monkeypatch.setattr(
        repo_files,
        "READ_BY",
        (ReadFile(schema, ("settings.defaults",)), ReadFile(captions, ("claims.results_page",))),
    )
    cf._data_fingerprint.cache_clear()
    return schema, captions


def fingerprint(script: str) -> str:
    path = SCRIPTS / script
    return cf.code_fingerprint([path, *cf.import_closure(path, PACKAGE, cf.SPEC_MODULES)], SCRIPTS)


def closure_modules(script: str) -> set[str]:
    files = cf.import_closure(SCRIPTS / script, PACKAGE, cf.SPEC_MODULES)
    return {f.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", ".") for f in files}


def test_an_edited_read_file_reruns_exactly_the_scripts_whose_closure_reads_it(declared_copies):
    schema, captions = declared_copies
    reads_schema, reads_captions, reads_neither = (
        "fit_scaling.py",
        "record_results.py",
        "prepare_data.py",
    )
    assert "settings.defaults" in closure_modules(reads_schema)
    assert "claims.results_page" not in closure_modules(reads_schema)
    assert "claims.results_page" in closure_modules(reads_captions)
    assert not {"settings.defaults", "claims.results_page"} & closure_modules(reads_neither)
    scripts = (reads_schema, reads_captions, reads_neither)
    before = {s: fingerprint(s) for s in scripts}
    ran = cf.script_code(SCRIPTS / reads_schema)
    schema_key = next(name for name in ran if name.endswith("schema.yaml"))

    # a description is documentation: its edit reruns nothing (nor does a comment)
    text = schema.read_text()
    described = 'description: "[low, high]: every fitted exponent is kept inside'
    assert text.count(described) == 1
    schema.write_text(text.replace(described, 'description: "[low, high], reworded') + "# a note\n")
    assert {s: fingerprint(s) for s in scripts} == before

    # a default is what the code fills in: its edit reruns the schema's readers only
    text = schema.read_text()
    assert text.count("default: [0.0, 5.0]") == 1  # scaling.fit.exponent_bounds
    schema.write_text(text.replace("default: [0.0, 5.0]", "default: [0.0, 6.0]"))
    after = {s: fingerprint(s) for s in scripts}
    assert after[reads_schema] != before[reads_schema]
    schema_read = "settings.defaults" in closure_modules(reads_captions)
    assert (after[reads_captions] != before[reads_captions]) == schema_read
    assert after[reads_neither] == before[reads_neither]
    assert cf.code_changes(ran, cf.script_code(SCRIPTS / reads_schema)) == [schema_key]

    # a caption template: the results page's script only
    template = sorted(captions.glob("*.rst"))[0]
    template.write_text(template.read_text() + "\nOne more sentence.\n")
    edited = {s: fingerprint(s) for s in scripts}
    assert edited[reads_captions] != after[reads_captions]
    assert edited[reads_schema] == after[reads_schema]
    assert edited[reads_neither] == after[reads_neither]


def test_the_checkouts_declared_files_are_in_the_readers_fingerprints():
    """Unpatched: the real schema is part of what prune_model.py's jobs record they ran, and
    the real caption templates are not (no module of its closure reads them)."""
    code = cf.script_code(SCRIPTS / "prune_model.py")
    assert "config/schema.yaml" in code
    assert not any(name.startswith("rules/captions/") for name in code)
    assert "rules/captions/claims.rst" in cf.script_code(SCRIPTS / "record_results.py")
