"""Data stage: corpus collection, stable split, BPE tokenizer, flat token arrays, errors, atomicity.

References are independent of depthlab.data.prepare: the expected docstring set comes from a plain
`ast.walk`, the expected split from hashlib written out here, documents from the arrays are
decoded with AutoTokenizer loaded from disk.
"""

import ast
import copy
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

os.environ.setdefault("RAYON_NUM_THREADS", "1")

from depthlab.data import prepare as data_lib  # noqa: E402
from depthlab.data.prepare import DataError, load_tokens, prepare_corpus, read_meta  # noqa: E402
from requirements_helpers import minilm_folder  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TEST_DATA = yaml.safe_load((REPO / "config/test.yaml").read_text())["data"]
DEFAULT_DATA = yaml.safe_load((REPO / "config/default.yaml").read_text())["data"]


def config(**changes) -> dict:
    """config/test.yaml's data section with nested overrides (`docstrings={...}` merges)."""
    cfg = copy.deepcopy(TEST_DATA)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


def text_config(paths, **changes) -> dict:
    settings = {
        "min_document_chars": 1,
        "val_fraction": 0.3,
        "tokenizer": {"vocab_size": 300},
        **changes,
    }
    return config(source="text_files", text_files={"paths": [str(p) for p in paths]}, **settings)


def hf_config(**hf) -> dict:
    section = {
        **DEFAULT_DATA["hf_dataset"],
        "name": "json",
        "text_field": "body",
        "cache_dir": hf.pop("cache_dir"),
    }
    section.update(hf)
    return config(
        source="hf_dataset",
        hf_dataset=section,
        min_document_chars=1,
        val_fraction=0.3,
        tokenizer={"vocab_size": 300},
    )


def in_val_reference(text: str, fraction: float) -> bool:
    return int(hashlib.sha256(text.encode()).hexdigest()[:16], 16) < fraction * 2**64


def documents_from_array(data_dir) -> dict:
    """Decode each split's array back to its documents, cutting at eos."""
    from transformers import AutoTokenizer

    meta = read_meta(data_dir)
    tokenizer = AutoTokenizer.from_pretrained(Path(data_dir) / "tokenizer")
    out = {}
    for split in ("train", "val"):
        ids = np.asarray(load_tokens(data_dir, split)).tolist()
        assert ids[-1] == meta["eos_id"]
        docs, start = [], 0
        for position, token in enumerate(ids):
            if token == meta["eos_id"]:
                docs.append(tokenizer.decode(ids[start:position]))
                start = position + 1
        out[split] = docs
    return out


def val_jsonl(data_dir) -> list[str]:
    return [json.loads(line)["text"] for line in (Path(data_dir) / "val.jsonl").open()]


def folder_bytes(folder) -> dict:
    folder = Path(folder)
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "provenance.json"
    }


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def synthetic_documents(n, tag):
    return [
        f"{tag} document {i}: " + " ".join(f"w{(i * 7 + j) % 50}" for j in range(20))
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "data"
    meta = prepare_corpus(config(val_fraction=0.2), out, seed=0, threads=1)
    return out, meta


def test_docstring_corpus_matches_ast_reference_and_hash_split(base_run):
    out, meta = base_run
    expected = set()
    min_ascii = TEST_DATA["docstrings"]["min_ascii_fraction"]
    for name in TEST_DATA["docstrings"]["packages"]:
        spec = importlib.util.find_spec(name)
        paths = (
            sorted(Path(spec.submodule_search_locations[0]).rglob("*.py"))
            if spec.submodule_search_locations
            else [Path(spec.origin)]
        )
        for path in paths:
            for node in ast.walk(ast.parse(path.read_bytes())):
                if isinstance(
                    node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
                ):
                    doc = ast.get_docstring(node)
                    if (
                        doc
                        and len(doc) >= TEST_DATA["min_document_chars"]
                        and sum(c.isascii() for c in doc) >= min_ascii * len(doc)
                    ):
                        expected.add(doc)
    docs = documents_from_array(out)
    assert len(expected) > 50
    assert set(docs["train"]) | set(docs["val"]) == expected
    assert not set(docs["train"]) & set(docs["val"])
    assert set(docs["val"]) == {d for d in expected if in_val_reference(d, 0.2)}
    # each document exactly once (deduplicated)
    assert len(docs["train"]) + len(docs["val"]) == len(expected)
    assert meta["source"]["kind"] == "docstrings"
    assert meta["source"]["reached_max_megabytes"] is False


def test_arrays_round_trip_and_meta_counts(base_run):
    out, meta = base_run
    assert meta == read_meta(out)
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == 512
    docs = documents_from_array(out)
    assert docs["val"] == val_jsonl(out)  # decode(encode(doc)) == doc, in val.jsonl order
    for split in ("train", "val"):
        tokens = load_tokens(out, split)
        assert isinstance(tokens, np.memmap) and tokens.ndim == 1 and tokens.dtype == np.uint16
        assert len(tokens) == meta["splits"][split]["tokens"]
        assert int((tokens == meta["eos_id"]).sum()) == meta["splits"][split]["documents"]
        assert int(tokens.max()) < meta["vocab_size"]
        assert meta["splits"][split]["bytes"] == sum(len(d.encode()) for d in docs[split])
        with pytest.raises(ValueError):
            tokens[0] = 1  # read-only
    assert meta["splits"]["train"]["tokens"] > 2 * meta["splits"]["val"]["tokens"] > 0
    # BPE actually merged: far fewer tokens than bytes
    assert meta["splits"]["train"]["tokens"] < 0.6 * meta["splits"]["train"]["bytes"]

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    assert tokenizer.eos_token == "<|endoftext|>" == tokenizer.bos_token
    assert tokenizer.pad_token == "<|pad|>"
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (meta["eos_id"], meta["pad_id"])
    assert len(tokenizer) == meta["vocab_size"]
    text = "Return the JSON object — naïve café ∑ 🙂\n\n    indented  code()"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # bytes never unknown


def test_rerun_is_byte_identical_with_more_threads(base_run, tmp_path):
    out, meta = base_run
    again = prepare_corpus(config(val_fraction=0.2), tmp_path / "data", seed=0, threads=2)
    assert again == meta
    assert folder_bytes(tmp_path / "data") == folder_bytes(out)


def test_max_megabytes_stops_the_walk_at_the_same_document_with_workers():
    section = TEST_DATA["docstrings"]
    full = list(data_lib.docstring_source(section, data_lib.DocumentFilter(32), threads=1)[0])
    capped_docs, description = data_lib.docstring_source(
        {**section, "max_megabytes": 0.01}, data_lib.DocumentFilter(32), threads=2
    )
    capped = list(capped_docs)
    assert capped == full[: len(capped)]
    sizes = [len(d.encode()) for d in capped]
    assert sum(sizes[:-1]) < 10_000 <= sum(sizes)
    assert description["reached_max_megabytes"] is True
    # each package's megabytes are its accepted bytes rounded to 3 decimals (1 kB): the sum is
    # the documents' bytes within half a kB per package that contributed (here ~0.0105 MB)
    recorded = description["megabytes_per_package"].values()
    contributed = sum(value > 0 for value in recorded)
    assert contributed >= 1
    # with workers a package may also count the one document in flight when the cap is hit
    tolerance = 0.0005 * contributed + max(sizes) / 1e6
    assert sum(recorded) == pytest.approx(sum(sizes) / 1e6, abs=tolerance)


def test_split_of_a_document_does_not_depend_on_the_others(tmp_path):
    small = synthetic_documents(150, "alpha")
    large = synthetic_documents(300, "beta") + small[::-1]  # different neighbours and order
    prepare_corpus(
        text_config([write_jsonl(tmp_path / "a.jsonl", [{"text": d} for d in small])]),
        tmp_path / "a",
        seed=0,
    )
    prepare_corpus(
        text_config([write_jsonl(tmp_path / "b.jsonl", [{"text": d} for d in large])]),
        tmp_path / "b",
        seed=1,
    )
    val_a, val_b = set(val_jsonl(tmp_path / "a")), set(val_jsonl(tmp_path / "b"))
    assert val_a == val_b & set(small)
    assert val_a == {d for d in small if in_val_reference(d, 0.3)}
    assert 0.15 < len(val_b) / len(large) < 0.45


def test_text_files_route(tmp_path):
    (tmp_path / "notes").mkdir()
    files = {
        "notes/one.txt": "First file.\n\nIts second paragraph stays in the same document.\n",
        "notes/two.txt": "Second file, one line.",
        "notes/dup.txt": "Second file, one line.",
        "notes/tiny.txt": "x",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    records = [{"text": d} for d in synthetic_documents(40, "gamma")] + [{"text": "   \n"}]
    jsonl = write_jsonl(tmp_path / "more.jsonl", records)
    cfg = text_config([tmp_path / "notes" / "*.txt", jsonl], min_document_chars=5)
    meta = prepare_corpus(cfg, tmp_path / "out", seed=0)
    docs = documents_from_array(tmp_path / "out")
    expected = {files["notes/one.txt"], files["notes/two.txt"]} | {r["text"] for r in records[:40]}
    assert set(docs["train"]) | set(docs["val"]) == expected
    assert meta["dropped_documents"] == {"duplicate": 1, "too_short": 2}
    assert meta["source"]["files"][0].endswith("notes/dup.txt")  # sorted glob matches


@pytest.mark.parametrize("streaming", [True, False])
def test_hf_dataset_route_with_a_local_json_builder(tmp_path, streaming):
    docs = synthetic_documents(60, "delta")
    path = write_jsonl(
        tmp_path / "corpus.jsonl", [{"id": i, "body": d} for i, d in enumerate(docs)]
    )
    meta = prepare_corpus(
        hf_config(
            data_files=str(path),
            max_documents=40,
            streaming=streaming,
            cache_dir=str(tmp_path / "cache"),
        ),
        tmp_path / "out",
        seed=0,
    )
    got = documents_from_array(tmp_path / "out")
    assert set(got["train"]) | set(got["val"]) == set(docs[:40])  # the first max_documents
    assert set(got["val"]) == {d for d in docs[:40] if in_val_reference(d, 0.3)}
    assert meta["source"]["name"] == "json"


def test_hf_dataset_val_split(tmp_path):
    train = synthetic_documents(30, "train")
    val = synthetic_documents(12, "held-out") + train[:2]  # a leaked train doc stays in val only
    files = {
        "train": str(write_jsonl(tmp_path / "t.jsonl", [{"body": d} for d in train])),
        "validation": str(write_jsonl(tmp_path / "v.jsonl", [{"body": d} for d in val])),
    }
    meta = prepare_corpus(
        hf_config(
            data_files=files,
            val_split="validation",
            cache_dir=str(tmp_path / "cache"),
            max_val_documents=14,
            max_documents=100,
        ),
        tmp_path / "out",
        seed=0,
    )
    assert val_jsonl(tmp_path / "out") == val
    assert documents_from_array(tmp_path / "out")["train"] == train[2:]
    assert meta["splits"]["val"]["documents"] == 14
    assert meta["split_rule"] == "source val_split"


def test_pretrained_tokenizer_reproduces_the_trained_one(base_run, tmp_path, monkeypatch):
    """The streamed path (no corpus held), in small encode batches, gives the same arrays."""
    out, meta = base_run
    monkeypatch.setattr(data_lib, "ENCODE_BATCH_DOCUMENTS", 7)
    cfg = config(val_fraction=0.2, tokenizer={"pretrained": str(out / "tokenizer")})
    again = prepare_corpus(cfg, tmp_path / "data", seed=0)
    assert again["tokenizer"] == {"kind": "pretrained", "name": str(out / "tokenizer")}
    for split in ("train", "val"):
        assert (tmp_path / "data" / f"{split}.bin").read_bytes() == (
            out / f"{split}.bin"
        ).read_bytes()
    assert (again["eos_id"], again["pad_id"], again["vocab_size"]) == (
        meta["eos_id"],
        meta["pad_id"],
        meta["vocab_size"],
    )


def test_token_dtype_rule():
    assert data_lib.token_dtype(512) == np.uint16
    assert data_lib.token_dtype(65536) == np.uint16  # largest id 65535 still fits
    assert np.iinfo(np.uint16).max == 65535
    assert data_lib.token_dtype(65537) == np.uint32
    assert data_lib.token_dtype(151_936) == np.uint32  # e.g. a Qwen vocabulary


def test_special_token_text_is_dropped(tmp_path):
    docs = synthetic_documents(30, "eps") + ["talks about <|endoftext|> literally here"]
    meta = prepare_corpus(
        text_config([write_jsonl(tmp_path / "c.jsonl", [{"text": d} for d in docs])]),
        tmp_path / "out",
        seed=0,
    )
    assert meta["dropped_documents"] == {"contains_special_token": 1}
    assert meta["splits"]["train"]["documents"] + meta["splits"]["val"]["documents"] == 30


def _bad_inputs(tmp_path):
    (tmp_path / "no_text.jsonl").write_text('{"body": "a document without the text key"}\n')
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"body": d} for d in synthetic_documents(5, "e")])
    no_max = config()
    del no_max["docstrings"]["max_megabytes"]
    return [
        (
            config(docstrings={"packages": ["json", "no_such_package_xyz"]}),
            "data.docstrings.packages: package 'no_such_package_xyz' is not installed",
        ),
        (config(docstrings={"packages": ["sys"]}), "data.docstrings.packages: 'sys' has no Python"),
        (no_max, "data.docstrings.max_megabytes: required"),
        (config(min_document_chars=10**7), "data.source: the 'docstrings' corpus is empty"),
        (
            text_config([tmp_path / "missing.txt"]),
            f"data.text_files.paths: file '{tmp_path}/missing.txt' does not exist",
        ),
        (text_config([tmp_path / "*.md"]), "data.text_files.paths: pattern"),
        (text_config([]), "data.text_files.paths: empty list"),
        (text_config([tmp_path / "no_text.jsonl"]), "no_text.jsonl:1: no string 'text' field"),
        (
            hf_config(data_files=str(corpus), text_field="text", cache_dir=str(tmp_path)),
            "data.hf_dataset.text_field: 'text' is not a field of dataset 'json' (fields: body)",
        ),
        (hf_config(name=None, cache_dir=str(tmp_path)), "data.hf_dataset.name: required"),
        (
            hf_config(data_files=str(tmp_path / "absent.jsonl"), cache_dir=str(tmp_path)),
            "data.hf_dataset.data_files: cannot load dataset 'json' split 'train'",
        ),
        (
            hf_config(data_files=str(corpus), split="validation", cache_dir=str(tmp_path)),
            "data.hf_dataset.data_files: cannot load dataset 'json' split 'validation'",
        ),
        (
            config(tokenizer={"pretrained": str(tmp_path / "nowhere")}),
            "data.tokenizer.pretrained: cannot load tokenizer",
        ),
    ]


def test_bad_inputs_raise_errors_naming_the_key(tmp_path):
    for index, (cfg, message) in enumerate(_bad_inputs(tmp_path)):
        out = tmp_path / f"out{index}"
        with pytest.raises(DataError) as error:
            prepare_corpus(cfg, out, seed=0)
        assert message in str(error.value), (index, str(error.value))
        assert not out.exists()
    assert not list(tmp_path.glob(".out*"))  # no temporary folders left behind


def test_failure_keeps_the_previous_output_intact(base_run, tmp_path):
    out = tmp_path / "data"
    shutil.copytree(base_run[0], out)
    before = folder_bytes(out)
    cfg = config(tokenizer={"pretrained": str(minilm_folder())})  # BERT: no eos token
    with pytest.raises(DataError, match="data.tokenizer.pretrained: .* has no eos token"):
        prepare_corpus(cfg, out, seed=0)
    assert folder_bytes(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_load_tokens_rejects_unknown_split(base_run):
    with pytest.raises(ValueError, match="split: 'test'"):
        load_tokens(base_run[0], "test")


def test_cli_matches_the_library(base_run, tmp_path):
    script = REPO / "workflow_scripts" / "prepare_data.py"
    assert subprocess.run([sys.executable, script, "--help"], capture_output=True).returncode == 0
    result = subprocess.run(
        [
            sys.executable,
            script,
            "--spec",
            json.dumps(
                {"data": config(val_fraction=0.2), "seed": 0, "out": str(tmp_path / "data")}
            ),
            "--threads",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == base_run[1]
    assert folder_bytes(tmp_path / "data") == folder_bytes(base_run[0])
    provenance = json.loads((tmp_path / "data" / "provenance.json").read_text())
    assert provenance["stage"] == "data" and provenance["config"] == config(val_fraction=0.2)

    bad = subprocess.run(
        [
            sys.executable,
            script,
            "--spec",
            json.dumps(
                {
                    "data": text_config([str(tmp_path / "nope")]),
                    "seed": 0,
                    "out": str(tmp_path / "bad"),
                }
            ),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "data.text_files.paths: file" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()


def test_text_set_shards_are_disjoint_and_cover_the_source(tmp_path):
    from depthlab.data.prepare import iter_texts

    path = tmp_path / "texts.jsonl"
    documents = [f"document number {i}" for i in range(10)]
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents))
    shards = [
        list(iter_texts({"source": "jsonl", "path": str(path), "shard": [i, 3]})) for i in range(3)
    ]
    assert shards[1] == [documents[i] for i in (1, 4, 7)]
    assert sorted(d for shard in shards for d in shard) == sorted(documents)
    assert list(iter_texts({"source": "jsonl", "path": str(path)})) == documents


def test_docstring_prose_keeps_the_description_and_drops_reference_sections_and_code():
    from depthlab.data.prepare import docstring_prose

    docstring = (
        "Compute the mean of an array\nalong one axis.\n\n"
        "The mean is the sum of the elements divided by their count.\n\n"
        "    indented = code(block)\n\n"
        ">>> mean([1, 2])\n1.5\n\n"
        "Use it like this::\n\n"
        "Parameters\n----------\nx : array\n    The input, which is described in prose too.\n"
    )
    assert docstring_prose(docstring) == (
        "Compute the mean of an array along one axis.\n\n"
        "The mean is the sum of the elements divided by their count."
    )
    google = "Load a file from disk and parse it.\n\nArgs:\n    path: where the file is.\n"
    assert docstring_prose(google) == "Load a file from disk and parse it."
    assert docstring_prose("x = f(y, z) + g[0] * 2 / 3.") == ""  # mostly symbols, not words
