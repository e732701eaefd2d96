"""The shape of a model (layers, widths, heads, vocabulary, parameters, stored dtype) without
loading it: what depthlab.plan.resource_plan sizes a job from, at DAG time and offline.

Where a shape comes from, by where the model is:

  kind: pretrain    its `architecture:` block, the run's vocabulary, Llama's parameter layout
  hub id            the pinned table hub_architectures.yaml (each model's config.json values and
                    published parameter count), so a cluster plan needs no download
  local folder      its config.json; the parameter count and dtype from its safetensors headers
  GGUF file         its header: metadata for the shape, tensor infos for the parameter count

`parameter_count(shape)` recomputes a model's parameters from its shape for each parameter
layout the table uses (config.json's model_type): embedding + layers x (attention + MLP + norms)
+ final norm + an untied head; the tests hold every table row to it. `matmul_parameters` is
the part a token's forward pass multiplies through (every layer's matrices and the head; an
embedding lookup costs no FLOPs), the N of the 2N / 6N FLOP rules.

Torch-free: the Snakefile plans resources with it.
"""

from __future__ import annotations

import functools
import json
import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from depthlab.core import norm_schemes
from depthlab.core.model_types import ParameterLayout, parameter_layout
from depthlab.core.repo_files import HUB_TABLE

# auto: bf16 on the GPUs the plan sizes for (depthlab.core.devices.resolve_dtype)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}
SAFETENSORS_DTYPES = {"F64": "float32", "F32": "float32", "BF16": "bfloat16", "F16": "float16"}


@dataclass(frozen=True)
class Shape:
    """A decoder's shape; `parameters` is the model's total (embeddings included, a tied matrix
    once), `dtype` the dtype its weights are stored in."""

    model_type: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    max_positions: int | None
    tied_embeddings: bool
    parameters: int
    dtype: str
    head_dim: int | None = None
    embedding_size: int | None = None
    source: str = ""  # where the shape was read (table row, folder, file, architecture block)
    norms_per_layer: int | None = None  # overrides the layout's (a depthlab norm scheme's)
    hub: bool = False  # downloaded from the hub by the job that first reads it

    @property
    def attention_width(self) -> int:
        return self.num_heads * (self.head_dim or self.hidden_size // self.num_heads)

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * (self.head_dim or self.hidden_size // self.num_heads)

    def weight_bytes(self, dtype: str | None = None) -> int:
        """Bytes of the weights in `dtype` (default: as stored)."""
        return self.parameters * DTYPE_BYTES[dtype or self.dtype]


def _layout(shape: Shape) -> ParameterLayout:
    """The model family's parameter layout (depthlab.core.model_types; Llama's by default)."""
    return parameter_layout(shape.model_type)


def layer_matrix_parameters(shape: Shape) -> int:
    """One decoder layer's matrix weights: q, k, v, o and the MLP's two or three matrices."""
    d, i = shape.hidden_size, shape.intermediate_size
    attention = 2 * d * shape.attention_width + 2 * d * shape.kv_width
    return attention + (3 if _layout(shape).gated_mlp else 2) * d * i


def head_matrix_parameters(shape: Shape) -> int:
    """The LM head's matrix (the tied embedding where tied) and OPT's projection to it."""
    embedding = shape.embedding_size or shape.hidden_size
    projection = 0 if embedding == shape.hidden_size else embedding * shape.hidden_size
    return shape.vocab_size * embedding + projection


def matmul_parameters(shape: Shape) -> int:
    """Weights a token's forward pass multiplies through: every layer's matrices and the head."""
    return shape.num_layers * layer_matrix_parameters(shape) + head_matrix_parameters(shape)


def parameter_count(shape: Shape) -> int:
    """A model's parameters from its shape and its family's layout (see the module docstring)."""
    layout = _layout(shape)
    d, i = shape.hidden_size, shape.intermediate_size
    head_dim = shape.head_dim or d // shape.num_heads
    biases = (shape.attention_width + 2 * shape.kv_width) if layout.qkv_bias else 0
    if layout.output_bias:
        biases += d + i + d  # attention output, MLP up, MLP down
    qk_norm = {None: 0, "head": 2 * head_dim, "full": shape.attention_width + shape.kv_width}
    norms_per_layer = shape.norms_per_layer or layout.norms_per_layer
    norms = norms_per_layer * layout.norm_params * d + qk_norm[layout.qk_norm]
    per_layer = layer_matrix_parameters(shape) + biases + norms
    embedding = shape.embedding_size or d
    total = shape.num_layers * per_layer + shape.vocab_size * embedding + layout.norm_params * d
    if embedding != d:  # OPT-350m: project in and out of the 512-wide embedding
        total += 2 * embedding * d
    if not shape.tied_embeddings:
        total += shape.vocab_size * embedding
    if layout.learned_positions is not None and shape.max_positions:
        total += (shape.max_positions + layout.learned_positions) * d
    return total


# --- the pinned hub table ---------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def hub_table() -> dict[str, dict]:
    """hub_architectures.yaml: {hub id or `hub id@revision`: row}."""
    return yaml.safe_load(HUB_TABLE.read_text())


def _shape_from_row(row: dict, source: str, hub: bool) -> Shape:
    return Shape(
        model_type=row["model_type"],
        num_layers=row["num_layers"],
        hidden_size=row["hidden_size"],
        intermediate_size=row["intermediate_size"],
        num_heads=row["num_heads"],
        num_kv_heads=row["num_kv_heads"],
        vocab_size=row["vocab_size"],
        max_positions=row["max_positions"],
        tied_embeddings=row["tied_embeddings"],
        parameters=row["parameters"],
        dtype=row["dtype"],
        head_dim=row.get("head_dim"),
        embedding_size=row.get("embedding_size"),
        source=source,
        hub=hub,
    )


def hub_shape(hub_id: str, revision: str | None = None) -> Shape | None:
    """The pinned row of a hub model (the `hub id@revision` row first); None when it has none."""
    table = hub_table()
    for key in ([f"{hub_id}@{revision}"] if revision else []) + [hub_id]:
        if key in table:
            return _shape_from_row(table[key], f"{HUB_TABLE.name}: {key}", hub=True)
    return None


# --- models trained here ----------------------------------------------------------------------


def pretrain_shape(
    architecture: dict, vocab_size: int, max_positions: int, dtype: str, norm_scheme: str = "pre_ln"
) -> Shape:
    """A model trained here: Llama's layout (untied head, RMSNorm, SwiGLU, no biases) with its
    norm scheme's RMSNorms per layer (depthlab.core.norm_schemes)."""
    shape = Shape(
        model_type="depthlab_llama",
        num_layers=architecture["num_layers"],
        hidden_size=architecture["hidden_size"],
        intermediate_size=architecture["intermediate_size"],
        num_heads=architecture["num_heads"],
        num_kv_heads=architecture.get("num_kv_heads", architecture["num_heads"]),
        vocab_size=vocab_size,
        max_positions=max_positions,
        tied_embeddings=False,
        parameters=0,
        dtype=dtype,
        source="architecture",
        norms_per_layer=norm_schemes.schemes()[norm_scheme].norms_per_layer,
    )
    return replace(shape, parameters=parameter_count(shape))


# --- local folders: config.json and safetensors headers ----------------------------------------


def _first(config: dict, *keys, default=None):
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


def _safetensors_totals(folder: Path) -> tuple[int, str] | None:
    """(parameters, the dtype most of them are stored in) from the folder's safetensors headers
    (8-byte length + JSON; no tensor data is read); None without safetensors files."""
    counts: dict[str, int] = {}
    for path in sorted(folder.glob("*.safetensors")):
        with open(path, "rb") as handle:
            header = json.loads(handle.read(struct.unpack("<Q", handle.read(8))[0]))
        for name, info in header.items():
            if name != "__metadata__":
                elements = 1
                for size in info["shape"]:
                    elements *= size
                dtype = SAFETENSORS_DTYPES.get(info["dtype"], "float32")
                counts[dtype] = counts.get(dtype, 0) + elements
    if not counts:
        return None
    return sum(counts.values()), max(counts, key=counts.get)


def folder_shape(folder: str | os.PathLike) -> Shape:
    """A local HF folder's shape: config.json (GPT-2/OPT spellings too), its parameters and
    dtype from the safetensors headers (else the layout's count and config.json's dtype)."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    config = {**config.get("text_config", {}), **config}  # multimodal wrappers keep it inside
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    heads = _first(config, "num_attention_heads", "n_head")
    shape = Shape(
        model_type=config.get("model_type", "llama"),
        num_layers=_first(config, "num_hidden_layers", "n_layer", "num_layers"),
        hidden_size=hidden,
        intermediate_size=_first(
            config, "intermediate_size", "ffn_dim", "n_inner", default=4 * hidden
        ),
        num_heads=heads,
        num_kv_heads=_first(config, "num_key_value_heads", default=heads),
        vocab_size=config["vocab_size"],
        max_positions=_first(config, "max_position_embeddings", "n_positions"),
        tied_embeddings=bool(config.get("tie_word_embeddings", True)),
        parameters=0,
        dtype=_first(config, "torch_dtype", "dtype", default="float32"),
        head_dim=config.get("head_dim"),
        embedding_size=config.get("word_embed_proj_dim")
        if config.get("word_embed_proj_dim") != hidden
        else None,
        source=f"{folder}/config.json",
    )
    if shape.dtype not in DTYPE_BYTES:
        shape = replace(shape, dtype="float32")
    totals = _safetensors_totals(folder)
    if totals is None:
        return replace(shape, parameters=parameter_count(shape))
    return replace(shape, parameters=totals[0], dtype=totals[1])


# --- GGUF headers ----------------------------------------------------------------------------

GGUF_MODEL_TYPES = {"gemma3": "gemma3_text"}  # GGUF architecture -> config.json model_type


def gguf_shape(path: str | os.PathLike, dtype: str) -> Shape:
    """A GGUF model's shape from its header (the first chunk of a chunked file holds it): the
    metadata's `<architecture>.*` keys, the vocabulary from the embedding's rows and the exact
    parameter count from the tensor infos; `dtype`: what it is converted to."""
    from depthlab.models.gguf import gguf_header  # torch-free

    metadata, tensors = gguf_header(path)
    arch = metadata.get("general.architecture")
    hidden, vocab = tensors["token_embd.weight"]  # GGUF lists dims fastest first
    heads = metadata[f"{arch}.attention.head_count"]
    parameters = 0
    for dims in tensors.values():
        elements = 1
        for size in dims:
            elements *= size
        parameters += elements
    return Shape(
        model_type=GGUF_MODEL_TYPES.get(arch, arch),
        num_layers=metadata[f"{arch}.block_count"],
        hidden_size=hidden,
        intermediate_size=metadata[f"{arch}.feed_forward_length"],
        num_heads=heads,
        num_kv_heads=metadata.get(f"{arch}.attention.head_count_kv", heads),
        vocab_size=vocab,
        max_positions=metadata.get(f"{arch}.context_length"),
        tied_embeddings="output.weight" not in tensors,
        parameters=parameters,
        dtype=dtype,
        head_dim=metadata.get(f"{arch}.attention.key_length"),
        source=str(path),
    )
