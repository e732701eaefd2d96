"""A kind: gguf model's declared sha256 is checked when the config is resolved, before any job
(depthlab.config.models.check_gguf_model): a wrong one used to pass planning, and Snakemake then
deleted the already converted model folder before convert_gguf found the checksum wrong. The
checksum of the files joined in order is cached by (path, size, mtime), so dry runs hash once.

The fake GGUF files here are a header only (what the config reads), written by hand: no `gguf`
package needed."""

import hashlib
import os
import struct
import subprocess

import pytest
import yaml
from depthlab.config import ConfigError, load_config, resolve
from depthlab.models import gguf
from local_snakemake import ROOT, SNAKEMAKE, local_env

LAYERS = 2


def _text(value: str) -> bytes:
    data = value.encode()
    return struct.pack("<Q", len(data)) + data


def fake_gguf(path, padding: bytes = b"") -> str:
    """A GGUF header of a tiny llama (LAYERS blocks, an embedding tensor's info, no weights),
    then `padding`; its sha256."""
    metadata = [("general.architecture", 8, _text("llama"))] + [
        (f"llama.{key}", 4, struct.pack("<I", value))
        for key, value in (("block_count", LAYERS), ("attention.head_count", 2),
                           ("feed_forward_length", 32), ("context_length", 64))
    ]  # fmt: skip
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, len(metadata))
    for key, kind, value in metadata:
        header += _text(key) + struct.pack("<I", kind) + value
    header += _text("token_embd.weight") + struct.pack("<IQQIQ", 2, 16, 100, 0, 0)
    path.write_bytes(header + padding)
    return hashlib.sha256(header + padding).hexdigest()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "sha256-cache"
    monkeypatch.setenv(gguf.SHA256_CACHE_ENV, str(folder))
    gguf._cached_sha256.cache_clear()
    yield folder
    gguf._cached_sha256.cache_clear()


def with_model(files, sha256) -> dict:
    config = load_config(ROOT / "config" / "test.yaml")
    config["models"]["fake_gguf"] = {"kind": "gguf", "files": [str(f) for f in files],
                                     "sha256": sha256}  # fmt: skip
    return config


def test_a_wrong_checksum_is_refused_naming_key_declared_and_actual(tmp_path, cache):
    actual = fake_gguf(tmp_path / "m.gguf", b"weights")
    wrong = "ab" * 32
    with pytest.raises(ConfigError) as error:
        resolve(with_model([tmp_path / "m.gguf"], wrong))
    message = str(error.value)
    assert message.startswith(f"models.fake_gguf.sha256: declared {wrong}, but ")
    assert f"m.gguf has sha256 {actual} " in message
    assert "no job was started, nothing was deleted" in message
    # the right one (any case) resolves, and the job's spec carries it
    resolved = resolve(with_model([tmp_path / "m.gguf"], actual.upper()))
    assert resolved.jobs("convert_gguf")["fake_gguf"]["sha256"] == actual


def test_chunks_are_checked_joined_in_order(tmp_path, cache):
    whole = tmp_path / "whole.gguf"
    digest = fake_gguf(whole, bytes(range(256)) * 8)
    data = whole.read_bytes()
    chunks = [tmp_path / f"m.part{i}" for i in range(3)]
    for chunk, part in zip(chunks, (data[:-1000], data[-1000:-500], data[-500:])):
        chunk.write_bytes(part)
    resolve(with_model(chunks, digest))
    with pytest.raises(
        ConfigError, match=r"m\.part0 .. .*m\.part1 \(joined in order\) has sha256 "
    ):
        resolve(with_model([chunks[0], chunks[2], chunks[1]], digest))


def test_the_checksum_is_cached_by_path_size_and_mtime(tmp_path, cache, monkeypatch):
    path = tmp_path / "m.gguf"
    digest = fake_gguf(path, b"weights")
    hashed = []
    real = gguf._joined_sha256
    monkeypatch.setattr(gguf, "_joined_sha256", lambda paths: hashed.append(paths) or real(paths))
    assert gguf.sources_sha256([path]) == digest
    assert gguf.sources_sha256([path]) == digest  # this process
    gguf._cached_sha256.cache_clear()
    assert gguf.sources_sha256([path]) == digest  # the cache file (a later dry run)
    assert len(hashed) == 1 and len(list(cache.glob("*.json"))) == 1
    # a new version of the file (another size and mtime) is hashed again
    changed = fake_gguf(path, b"other weights")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert gguf.sources_sha256([path]) == changed != digest
    assert len(hashed) == 2
    # an unreadable cache entry is ignored, never trusted
    for entry in cache.glob("*.json"):
        entry.write_text("{not json")
    gguf._cached_sha256.cache_clear()
    assert gguf.sources_sha256([path]) == changed and len(hashed) == 3
    # off: no cache folder
    monkeypatch.setenv(gguf.SHA256_CACHE_ENV, "off")
    assert gguf.sha256_cache_dir() is None


@pytest.mark.workflow
def test_a_wrong_checksum_leaves_the_converted_folder_intact(tmp_path):
    """A real `snakemake` run that would rerun convert_gguf over an already converted folder
    (--forcerun, as after a changed spec): before, Snakemake deleted the folder and then the job
    failed on the checksum; now planning refuses and the folder stays as it was."""
    model = tmp_path / "m.gguf"
    fake_gguf(model, b"weights")
    wrong = "cd" * 32
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "models": {"fake_gguf": {"kind": "gguf", "files": [str(model)], "sha256": wrong}},
            }
        )
    )
    converted = tmp_path / "results" / "test" / "models" / "fake_gguf"
    converted.mkdir(parents=True)
    (converted / "config.json").write_text('{"model_type": "llama"}')
    (converted / "model.safetensors").write_bytes(b"converted weights")
    before = {p.name: p.read_bytes() for p in converted.iterdir()}
    result = subprocess.run(
        [SNAKEMAKE, "--cores", "1", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(tmp_path), "--configfile", str(ROOT / "config" / "test.yaml"),
         str(overlay), "--forcerun", "convert_gguf", "--", "results/test/models/fake_gguf"],
        capture_output=True, text=True, timeout=300, env=local_env(),
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert f"models.fake_gguf.sha256: declared {wrong}, but " in output, output[-3000:]
    assert "convert_gguf" not in output.split("models.fake_gguf.sha256")[0]  # no job planned
    assert {p.name: p.read_bytes() for p in converted.iterdir()} == before


def test_one_gguf_parse_shares_each_files_reader_inside_the_block_only(tmp_path):
    """transformers builds a gguf.GGUFReader in every from_pretrained (config, weights,
    tokenizer); inside the block each file is parsed once, and the library's own reader is back
    afterwards."""
    import gguf as gguf_package
    from depthlab.models.gguf import _one_gguf_parse

    built = []

    class Reader:
        def __init__(self, path, mode="r"):
            built.append((path, mode))

    original = gguf_package.GGUFReader
    gguf_package.GGUFReader = Reader
    try:
        with _one_gguf_parse():
            first = gguf_package.GGUFReader(tmp_path / "a.gguf")
            assert gguf_package.GGUFReader(str(tmp_path / "a.gguf")) is first
            assert gguf_package.GGUFReader(tmp_path / "b.gguf") is not first
        assert gguf_package.GGUFReader is Reader
        assert len(built) == 2
    finally:
        gguf_package.GGUFReader = original
