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
