"""The norm schemes of the models trained here, without torch: the planner sizes them and the
figures colour them from the one declaration per scheme, `NORM_SCHEMES` in
depthlab/models/modeling_depthlab.py.

That file must stay self-contained (it is copied beside every custom-code checkpoint and imports
torch and transformers), and this layer must not import torch, so the table is read from its
source: a dict of plain literals, parsed with `ast.literal_eval`.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

MODELING_FILE = Path(__file__).resolve().parents[1] / "models" / "modeling_depthlab.py"
TABLE_NAME = "NORM_SCHEMES"


@dataclass(frozen=True)
class NormScheme:
    name: str
    placement: str  # where the layer puts its norms (read by modeling_depthlab.py)
    norms_per_layer: int  # RMSNorms in one decoder layer
    plain_llama: bool  # exports as a plain LlamaForCausalLM
    colour: str  # hex RGB, the same in every figure


@functools.cache
def schemes(path: Path = MODELING_FILE) -> dict[str, NormScheme]:
    """{scheme name: NormScheme}, in declaration order."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == TABLE_NAME:
            table = ast.literal_eval(node.value)
            break
    else:
        raise ValueError(f"{path}: no module-level {TABLE_NAME} = {{...}} table")
    out = {}
    for name, fields in table.items():
        out[name] = NormScheme(name=name, **fields)
    return out


def names() -> tuple[str, ...]:
    return tuple(schemes())


def plain_llama_schemes() -> tuple[str, ...]:
    return tuple(name for name, scheme in schemes().items() if scheme.plain_llama)
