"""The norm-scheme registry: the torch-free reading of modeling_depthlab.NORM_SCHEMES is the
table the model code runs, and the planner, the figures, the export and the config schema take
each scheme's facts from it."""

from __future__ import annotations

import sys

import pytest
import torch
from depthlab.config.load import schema_document
from depthlab.core import norm_schemes
from depthlab.models import decoders, modeling_depthlab
from depthlab.plan.model_shapes import pretrain_shape

ARCH = {"hidden_size": 16, "num_layers": 4, "num_heads": 2, "intermediate_size": 24}


def test_the_torch_free_reading_is_the_table_the_model_code_runs():
    parsed = norm_schemes.schemes()
    assert list(parsed) == list(modeling_depthlab.NORM_SCHEMES)
    for name, scheme in parsed.items():
        declared = modeling_depthlab.NORM_SCHEMES[name]
        assert {k: getattr(scheme, k) for k in declared} == declared


def test_reading_the_registry_imports_no_torch():
    import os
    import subprocess
    from pathlib import Path

    code = (
        "import sys; from depthlab.core import norm_schemes; norm_schemes.schemes(); "
        "from depthlab.plan.model_shapes import pretrain_shape; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    package_root = Path(norm_schemes.__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("scheme", norm_schemes.names())
def test_the_planner_counts_each_schemes_parameters_exactly(scheme):
    """pretrain_shape's count (norms per layer from the registry) equals the built model's."""
    arch = dict(ARCH, **({"mix_ln_post_fraction": 0.25} if scheme == "mix_ln" else {}))
    model = decoders.build_model(decoders.make_config(arch, scheme, 50, 32), seed=0)
    shape = pretrain_shape(arch, 50, 32, "float32", scheme)
    assert shape.parameters == sum(p.numel() for p in model.parameters())
    norms = sum(p.numel() for n, p in model.model.layers[0].named_parameters() if "norm" in n)
    assert norms == norm_schemes.schemes()[scheme].norms_per_layer * ARCH["hidden_size"]


@pytest.mark.parametrize("scheme", norm_schemes.names())
def test_each_scheme_saves_the_way_it_declares(tmp_path, scheme):
    arch = dict(ARCH, **({"mix_ln_post_fraction": 0.25} if scheme == "mix_ln" else {}))
    model = decoders.build_model(decoders.make_config(arch, scheme, 50, 32), seed=0)
    decoders.save_checkpoint(model, None, tmp_path)
    custom_code = (tmp_path / "modeling_depthlab.py").exists()
    assert custom_code == (not norm_schemes.schemes()[scheme].plain_llama)
    reloaded = decoders.AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.arange(12).view(2, 6)
    with torch.no_grad():
        assert torch.allclose(reloaded(ids).logits, model(ids).logits, atol=1e-5)


def test_the_schema_enum_is_the_registry():
    """(tests/unit/config/test_config.py: an undeclared scheme is refused naming the key)"""
    enum = schema_document()["definitions"]["norm_scheme"]["enum"]
    assert enum == list(norm_schemes.names())


def test_a_table_is_read_from_a_planted_file_and_a_missing_one_is_named(tmp_path):
    planted = tmp_path / "modeling.py"
    planted.write_text(
        "import torch\nNORM_SCHEMES = {'x': {'placement': 'pre', 'norms_per_layer': 3, "
        "'plain_llama': False, 'colour': '#000000'}}\n"
    )
    assert norm_schemes.schemes(planted)["x"].norms_per_layer == 3
    without = tmp_path / "without.py"
    without.write_text("SCHEMES = {}\n")
    with pytest.raises(ValueError, match="no module-level NORM_SCHEMES"):
        norm_schemes.schemes(without)


def test_the_deepnorm_variants_are_the_model_codes_and_the_schemas():
    assert norm_schemes.deepnorm_variants() == modeling_depthlab.DEEPNORM_VARIANTS
    variant = schema_document()["definitions"]["architecture"]["properties"]["deepnorm_variant"]
    assert variant["enum"] == list(modeling_depthlab.DEEPNORM_VARIANTS)


@pytest.mark.parametrize(
    ("scheme", "keys", "message"),
    [
        ("mix_ln", {}, "mix_ln_post_fraction: required for norm_scheme mix_ln"),
        ("mix_ln", {"mix_ln_post_fraction": 0.1}, "0.1 of 4 layers rounds to no Post-LN"),
        ("deepnorm", {"deepnorm_variant": "deepnorm"}, "unknown variant 'deepnorm'"),
        ("pre_ln", {"deepnorm_variant": "deepnet"}, "has no effect for norm_scheme pre_ln"),
    ],
)
def test_the_model_builder_and_the_config_share_one_architecture_check(scheme, keys, message):
    """Mix-LN's rounding and the deepnorm_variant check are written once (check_architecture):
    the model builder and the config's model check refuse the same blocks with the same words."""
    arch = dict(ARCH, **keys)
    with pytest.raises(ValueError) as built:
        decoders.make_config(arch, scheme, 50, 32)
    with pytest.raises(ValueError) as checked:
        norm_schemes.check_architecture(arch, scheme, "models.m.architecture")
    assert message in str(built.value) and str(built.value).startswith("architecture.")
    assert str(checked.value) == "models.m." + str(built.value)


def test_mix_ln_rounds_half_up_in_the_model_and_the_config():
    # 0.125 of 4 layers is 0.5: round half up gives 1 Post-LN layer (Python's round gives 0)
    assert (
        norm_schemes.mix_ln_post_layers(0.125, 4) == 1
        and norm_schemes.mix_ln_post_layers(0.25, 12) == 3
    )
    arch = dict(ARCH, mix_ln_post_fraction=0.125)
    assert decoders.make_config(arch, "mix_ln", 50, 32).mix_ln_post_layers == 1
    assert norm_schemes.check_architecture(arch, "mix_ln") == 1
