"""Atomic outputs and provenance records."""

import hashlib
import json
import os

import pytest

from depthlab.io import atomic_path, write_json
from depthlab.provenance import Provenance, sha256_path, sidecar_path


def test_atomic_file_and_folder_appear_only_on_success(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []

    folder = tmp_path / "model"
    with pytest.raises(RuntimeError):
        with atomic_path(folder, is_dir=True) as tmp:
            (tmp / "weights").write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []

    folder.mkdir()
    (folder / "old").write_text("old")
    with atomic_path(folder, is_dir=True) as tmp:
        (tmp / "new").write_text("new")
    assert sorted(p.name for p in folder.iterdir()) == ["new"]  # replaced whole, not merged
    umask = os.umask(0)
    os.umask(umask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask
    write_json(tmp_path / "p.json", {})
    assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o666 & ~umask


def test_json_outputs_are_strict(tmp_path):
    import numpy as np

    write_json(tmp_path / "x.json", {"nan": float("nan"), "inf": np.float32("inf"),
                                     "n": np.int64(3), "xs": (1.5, np.float64(2.5)), 4: "k"})
    text = (tmp_path / "x.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"nan": None, "inf": None, "n": 3, "xs": [1.5, 2.5], "4": "k"}


def test_sha256_of_file_and_folder(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"abc")
    assert sha256_path(tmp_path / "a.txt") == hashlib.sha256(b"abc").hexdigest()
    before = sha256_path(tmp_path)
    write_json(tmp_path / "provenance.json", {"wall_s": 1})  # ignored: differs between reruns
    assert sha256_path(tmp_path) == before
    (tmp_path / "b.txt").write_bytes(b"")
    assert sha256_path(tmp_path) != before


def test_provenance_records_commit_config_inputs_versions_and_times(tmp_path):
    source = tmp_path / "input.bin"
    source.write_bytes(b"\x00\x01")
    provenance = Provenance("unit", config={"lr": 0.1}, inputs=[source], seed=7)
    record = provenance.write(tmp_path / "provenance.json")
    assert json.loads((tmp_path / "provenance.json").read_text()) == json.loads(json.dumps(record))
    assert len(record["git"]["commit"]) == 40 and isinstance(record["git"]["dirty"], bool)
    assert record["inputs"][str(source)] == hashlib.sha256(b"\x00\x01").hexdigest()
    assert record["config"] == {"lr": 0.1} and record["seed"] == 7
    assert record["packages"]["torch"].startswith("2.13.0")
    assert record["end"] >= record["start"] and record["wall_s"] >= 0
    assert sidecar_path(tmp_path / "fig.png").name == "fig.provenance.json"
