"""The norm schemes of the models trained here, without torch: the planner sizes them and the
figures colour them from the one declaration per scheme, `NORM_SCHEMES` in
depthlab/models/modeling_depthlab.py (and its `DEEPNORM_VARIANTS`). The scheme keys of an
`architecture:` block (Mix-LN's share of Post-LN layers and its rounding, the DeepNorm variant)
are checked here once, for the config (depthlab.config.models) and the model builder
(depthlab.models.decoders) alike.

That file must stay self-contained (it is copied beside every custom-code checkpoint and imports
torch and transformers), and this layer must not import torch, so the table is read from its
source: a dict of plain literals, parsed with `ast.literal_eval`.
"""

from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass
from pathlib import Path

# read from source, not imported (torch): declared with this module as its reader
from depthlab.core.repo_files import MODELING_SOURCE as MODELING_FILE

TABLE_NAME = "NORM_SCHEMES"


@dataclass(frozen=True)
class NormScheme:
    name: str
    placement: str  # where the layer puts its norms (read by modeling_depthlab.py)
    norms_per_layer: int  # RMSNorms in one decoder layer
    plain_llama: bool  # exports as a plain LlamaForCausalLM
    colour: str  # hex RGB, the same in every figure


@functools.cache
def _literal(name: str, path: Path = MODELING_FILE):
    """The value of the module-level `name = <literal>` of modeling_depthlab.py."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == name:
            return ast.literal_eval(node.value)
    raise ValueError(f"{path}: no module-level {name} = <literal>")


@functools.cache
def schemes(path: Path = MODELING_FILE) -> dict[str, NormScheme]:
    """{scheme name: NormScheme}, in declaration order."""
    table = _literal(TABLE_NAME, path)
    out = {}
    for name, fields in table.items():
        out[name] = NormScheme(name=name, **fields)
    return out


def names() -> tuple[str, ...]:
    return tuple(schemes())


def plain_llama_schemes() -> tuple[str, ...]:
    return tuple(name for name, scheme in schemes().items() if scheme.plain_llama)


def deepnorm_variants() -> tuple[str, ...]:
    """architecture.deepnorm_variant's choices, the first the default."""
    return tuple(_literal("DEEPNORM_VARIANTS"))


def mix_ln_post_layers(fraction: float, num_layers: int) -> int:
    """Post-LN layers of a Mix-LN model: round half up (the paper's 25% of 12 layers = 3)."""
    return math.floor(fraction * num_layers + 0.5)


def check_architecture(architecture: dict, norm_scheme: str, where: str = "architecture") -> int:
    """The scheme keys of an `architecture:` block against its norm scheme; returns the Mix-LN
    model's Post-LN layers (0 for the other schemes). ValueError naming the key (`where`: the
    block's own key) when mix_ln has no mix_ln_post_fraction or it rounds to no Post-LN layer,
    or deepnorm_variant is unknown or set for a scheme other than deepnorm."""
    post_layers = 0
    if norm_scheme == "mix_ln":
        fraction = architecture.get("mix_ln_post_fraction")
        if fraction is None:
            raise ValueError(
                f"{where}.mix_ln_post_fraction: required for norm_scheme mix_ln (the paper "
                f"uses 0.25)"
            )
        post_layers = mix_ln_post_layers(fraction, architecture["num_layers"])
        if post_layers < 1:
            raise ValueError(
                f"{where}.mix_ln_post_fraction: {fraction} of {architecture['num_layers']} "
                f"layers rounds to no Post-LN layer (that is pre_ln)"
            )
    variant = architecture.get("deepnorm_variant", deepnorm_variants()[0])
    if variant not in deepnorm_variants():
        raise ValueError(
            f"{where}.deepnorm_variant: unknown variant '{variant}' "
            f"(known: {', '.join(deepnorm_variants())})"
        )
    if "deepnorm_variant" in architecture and norm_scheme != "deepnorm":
        raise ValueError(
            f"{where}.deepnorm_variant: has no effect for norm_scheme {norm_scheme} (only deepnorm)"
        )
    return post_layers


# ============================================================================ sub-layer units
# Declared here, not parsed from modeling_depthlab.py: which direct children of a depthlab
# decoder layer (DepthlabDecoderLayer) serve only its attention or only its MLP sub-layer, by
# the scheme's placement. Sub-layer pruning (depthlab.stages.pruning.sublayers) counts a unit's
# parameters by these and, in a Post-LN layer, passes the stream through the unit's norm. A unit
# is its branch and the norms that serve only it: the norm before the branch (Pre-LN), the norm
# after it (Post-LN: N(s h + F(h))), both and the branch's output norm (Peri-LN). Every child
# with parameters is in exactly one unit (tests/unit/stages/pruning/test_sublayers.py checks it
# for every scheme against the built layers).
_PRE_OR_POST_UNITS = {
    "attn": {"branch": "self_attn", "norms": ("input_layernorm",)},
    "mlp": {"branch": "mlp", "norms": ("post_attention_layernorm",)},
}
SUBLAYER_UNITS = {
    "pre": _PRE_OR_POST_UNITS,
    "post": _PRE_OR_POST_UNITS,
    "mix": _PRE_OR_POST_UNITS,  # post for the first layers, pre after: the same modules
    "peri": {
        "attn": {"branch": "self_attn", "norms": ("input_layernorm", "attention_output_norm")},
        "mlp": {"branch": "mlp", "norms": ("post_attention_layernorm", "mlp_output_norm")},
    },
}


def sublayer_units(scheme: str) -> dict[str, dict]:
    """{"attn": {"branch": module, "norms": (module, ...)}, "mlp": ...}: the layer children of
    each sub-layer unit of `scheme` (SUBLAYER_UNITS by its placement). ValueError naming the
    scheme when it is unknown or its placement declares no units."""
    scheme_entry = schemes().get(scheme)
    if scheme_entry is None:
        raise ValueError(f"norm_scheme: unknown scheme '{scheme}' (known: {', '.join(names())})")
    units = SUBLAYER_UNITS.get(scheme_entry.placement)
    if units is None:
        raise ValueError(
            f"norm_scheme {scheme}: placement {scheme_entry.placement!r} declares no sub-layer "
            f"units (depthlab.core.norm_schemes.SUBLAYER_UNITS)"
        )
    return units
