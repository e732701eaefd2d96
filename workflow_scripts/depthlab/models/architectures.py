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

Size: one adapter for every supported family (their module paths: depthlab.core.model_types);
the family rules must be read together.
Model paths and checkpoint-folder checks live in depthlab.models.checkpoint_files, the loaders in
depthlab.models.loading (both re-exported here: callers import them from either).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from depthlab.core.errors import CheckpointError, UnsupportedModelError  # noqa: F401 (CheckpointError re-exported)
from depthlab.core.model_types import STRUCTURAL_PATHS, ModulePaths, module_paths

if TYPE_CHECKING:  # torch is imported where it is used: the folder checks below run without it
    import torch
    from torch import nn


# Each family's module paths are declared once, with its parameter layout, in
# depthlab.core.model_types (the planner reads the same table).
Layout = ModulePaths
LAYOUTS_BY_MODEL_TYPE = module_paths()
STRUCTURAL_LAYOUTS = STRUCTURAL_PATHS


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
        """Where input ids go: the input embedding's device (depthlab.core.placement)."""
        from depthlab.core.placement import input_device

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
    if layout.family == "bert":
        return [True] * len(layers)
    if layout.family == "opt":
        return [not getattr(config, "do_layer_norm_before", True)] * len(layers)
    # depthlab's own blocks say which scheme they run (mix_ln: the first layers are Post-LN)
    return [bool(getattr(layer, "post_ln", False)) for layer in layers]


def first_output(value):
    """The hidden state a decoder layer or a sub-block returns: the first item of a tuple or list
    (most families return (hidden, attention weights, ...)), else the value itself."""
    return value[0] if isinstance(value, (tuple, list)) else value


def with_first_output(value, tensor):
    """`value` (a layer's or sub-block's output) with its hidden state replaced by `tensor`, in
    the same container, so hooks can return it in place of the output."""
    if isinstance(value, tuple):
        return (tensor, *value[1:])
    if isinstance(value, list):
        return [tensor, *value[1:]]
    return tensor


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
        # depthlab's own blocks name the modules whose outputs join the residual (a scheme that
        # normalises a sub-layer's output adds the norm's output)
        updates = getattr(layer, "update_modules", {})
        for path, sink, what in (
            (updates.get("attention", layout.attention), attention, "attention"),
            (updates.get("mlp", layout.mlp), mlp, "MLP"),
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
        layout.final_norm is not None and final_norm is None and layout.family != "opt"
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
        and layout.family == "gpt_neox",
        post_ln_layers=_post_ln_layers(model, layout, layers),
        notes=notes,
    )


# Re-exported: the adapter's callers load and check models through this module too.
from depthlab.models.checkpoint_files import (  # noqa: E402, F401
    ADAPTER_WEIGHTS,
    CAUSAL_LM_SUFFIXES,
    LAYER_COUNT_KEYS,
    PACKAGE_PREFIX,
    PICKLE_WEIGHTS,
    SAFETENSORS_MAX_HEADER,
    SAFETENSORS_WEIGHTS,
    VOCABULARY_FILES,
    _register_depthlab_models,
    check_local_model,
    check_model_files,
    check_safetensors_file,
    config_layer_count,
    embedding_size,
    is_causal_lm,
    local_model_folder,
    resolve_model_path,
)
from depthlab.models.loading import load_model, load_tokenizer  # noqa: E402, F401
