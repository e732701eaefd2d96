"""The code fingerprint's syntax cache: the same fingerprints and import closures as parsing,
content-addressed (an edit is a new entry, a comment edit the same fingerprint), and optional."""

import ast
import hashlib
import os
from pathlib import Path

import pytest
from depthlab.core import code_fingerprint as cf

SCRIPTS = Path(__file__).resolve().parents[3] / "workflow_scripts"


def fresh_process_caches():
    cf._file_syntax.cache_clear()
    cf._imported_modules.cache_clear()


def by_hand(path: Path) -> str:
    """sha256 of ast.dump of the tree with each module, class and function docstring dropped."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    node.body = node.body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()


def test_cached_fingerprints_and_closures_equal_parsing_every_script(tmp_path, monkeypatch):
    scripts = sorted(SCRIPTS.glob("*.py"))

    def everything():
        fresh_process_caches()
        return {
            s.name: (
                cf.code_fingerprint([s, *cf.import_closure(s, SCRIPTS / "depthlab")], SCRIPTS),
                cf.import_closure(s, SCRIPTS / "depthlab"),
            )
            for s in scripts
        }

    monkeypatch.setenv(cf.SYNTAX_CACHE_ENV, "off")
    parsed = everything()
    assert not any(tmp_path.iterdir())
    monkeypatch.setenv(cf.SYNTAX_CACHE_ENV, str(tmp_path / "cache"))
    cold = everything()  # parses and fills the cache
    entries = list((tmp_path / "cache").glob("*.json"))
    assert len(entries) > 50  # one per library file and script
    warm = everything()  # reads the cache only
    assert parsed == cold == warm
    closure = parsed["prune_model.py"][1]
    assert SCRIPTS / "depthlab" / "stages" / "pruning" / "stage.py" in closure
    for path in [scripts[0], *closure[:5]]:
        assert cf.source_fingerprint(path) == by_hand(path)


def test_an_edit_is_a_new_entry_and_a_comment_edit_the_same_fingerprint(tmp_path, monkeypatch):
    monkeypatch.setenv(cf.SYNTAX_CACHE_ENV, str(tmp_path / "cache"))
    package = tmp_path / "depthlab"
    (package / "sub").mkdir(parents=True)
    for init in (package / "__init__.py", package / "sub" / "__init__.py"):
        init.write_text("")
    (package / "sub" / "helper.py").write_text("VALUE = 1\n")
    module = package / "sub" / "user.py"
    module.write_text('"""doc"""\nfrom .helper import VALUE\n\n\ndef f():\n    return VALUE\n')
    fresh_process_caches()
    first = cf.source_fingerprint(module)
    assert cf.imported_modules(module, package) == {"sub.helper"}
    module.write_text(
        '"""other doc"""\nfrom .helper import VALUE  # why\n\n\ndef f():\n    return VALUE\n'
    )
    fresh_process_caches()
    assert cf.source_fingerprint(module) == first  # docstring and comment: no rerun
    module.write_text('"""doc"""\nfrom depthlab.sub import helper\n\n\ndef f():\n    return 2\n')
    os.utime(module, ns=(1, 1))  # even with an old time stamp the bytes decide
    fresh_process_caches()
    assert cf.source_fingerprint(module) != first
    assert cf.imported_modules(module, package) == {"sub.helper"}
    assert len(list((tmp_path / "cache").glob("*.json"))) == 3  # one entry per version of user


def test_a_foreign_or_broken_entry_is_parsed_again_and_an_unwritable_cache_is_skipped(
    tmp_path, monkeypatch
):
    module = tmp_path / "m.py"
    module.write_text("import depthlab.core.errors\nx = 1\n")
    cache = tmp_path / "cache"
    monkeypatch.setenv(cf.SYNTAX_CACHE_ENV, str(cache))
    fresh_process_caches()
    expected = cf.file_syntax(module)
    (entry,) = cache.glob("*.json")
    entry.write_text("{not json")
    fresh_process_caches()
    assert cf.file_syntax(module) == expected
    blocked = tmp_path / "file_not_folder"
    blocked.write_text("")
    monkeypatch.setenv(cf.SYNTAX_CACHE_ENV, str(blocked / "cache"))  # cannot be created
    fresh_process_caches()
    assert cf.file_syntax(module) == expected
    assert expected.imports == ((0, "depthlab.core.errors", None),)


@pytest.mark.parametrize("value, expected", [("off", None), ("/x/y", Path("/x/y"))])
def test_the_cache_folder_is_chosen_by_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv(cf.SYNTAX_CACHE_ENV, value)
    assert cf.syntax_cache_dir() == expected
    monkeypatch.delenv(cf.SYNTAX_CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "/c")
    assert cf.syntax_cache_dir() == Path("/c/depthlab/syntax")


def scratch_checkout(tmp_path: Path) -> Path:
    """workflow_scripts/run_stage.py importing depthlab.stages.a (which imports b), plus the
    spec-shaping depthlab.config that no fingerprint tracks."""
    scripts = tmp_path / "workflow_scripts"
    package = scripts / "depthlab"
    (package / "stages").mkdir(parents=True)
    (package / "config").mkdir()
    for init in (package, package / "stages", package / "config"):
        (init / "__init__.py").write_text("")
    (package / "stages" / "a.py").write_text("from depthlab.stages import b\nX = 1\n")
    (package / "stages" / "b.py").write_text("Y = 2\n")
    (package / "config" / "load.py").write_text("Z = 3\n")
    (scripts / "run_stage.py").write_text(
        "from depthlab.stages import a\nfrom depthlab.config import load\n"
    )
    return scripts


def test_a_jobs_record_names_the_code_it_ran_and_a_code_edit_is_named_by_file(tmp_path):
    """Before, a code edit that reran 35 jobs was explained only by two fingerprints
    ('Params have changed ... before: ec65f5c6... now: cc966b33...'); the jobs' records now hold
    each file's fingerprint, so the planning log names the files."""
    fresh_process_caches()
    scripts = scratch_checkout(tmp_path)
    ran = cf.script_code(scripts / "run_stage.py")
    assert sorted(ran) == [
        "workflow_scripts/depthlab/__init__.py",
        "workflow_scripts/depthlab/stages/__init__.py",
        "workflow_scripts/depthlab/stages/a.py",
        "workflow_scripts/depthlab/stages/b.py",
        "workflow_scripts/run_stage.py",
    ]
    (scripts / "depthlab" / "stages" / "b.py").write_text("Y = 2  # a comment\n")
    (scripts / "depthlab" / "config" / "load.py").write_text("Z = 4\n")
    assert cf.code_changes(ran, cf.script_code(scripts / "run_stage.py")) == []
    (scripts / "depthlab" / "stages" / "b.py").write_text("Y = 3\n")
    (scripts / "depthlab" / "stages" / "c.py").write_text("W = 1\n")
    (scripts / "depthlab" / "stages" / "a.py").write_text("from depthlab.stages import b, c\n")
    assert cf.code_changes(ran, cf.script_code(scripts / "run_stage.py")) == [
        "workflow_scripts/depthlab/stages/a.py",
        "workflow_scripts/depthlab/stages/b.py",
        "workflow_scripts/depthlab/stages/c.py (new)",
    ]
