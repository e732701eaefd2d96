"""The model-type registry (depthlab.core.model_types): one declaration per config.json
model_type, read by the adapter (module paths) and the planner (parameter layout)."""

import pytest
import yaml
from depthlab.core.model_types import LLAMA_PARAMETERS, MODEL_TYPES, module_paths, parameter_layout
from depthlab.models import architectures
from depthlab.plan.model_shapes import HUB_TABLE, Shape, _layout


def test_every_pinned_hub_model_type_declares_its_parameter_layout():
    """A hub row of an undeclared type would be sized with Llama's layout without a word."""
    table = yaml.safe_load(HUB_TABLE.read_text())
    types = {row["model_type"] for row in table.values()}
    undeclared = [
        t for t in sorted(types) if getattr(MODEL_TYPES.get(t), "parameters", None) is None
    ]
    assert undeclared == []


@pytest.mark.parametrize("model_type", sorted(MODEL_TYPES))
def test_the_adapter_and_the_planner_read_the_one_declaration(model_type):
    declared = MODEL_TYPES[model_type]
    assert architectures.LAYOUTS_BY_MODEL_TYPE.get(model_type) is declared.paths
    shape = Shape(model_type, 2, 8, 16, 2, 2, 32, 16, True, 0, "float32")
    assert _layout(shape) is (declared.parameters or LLAMA_PARAMETERS)


def test_an_undeclared_type_is_found_by_structure_and_sized_as_llama():
    assert "mamba" not in module_paths()
    assert parameter_layout("mamba") is LLAMA_PARAMETERS
