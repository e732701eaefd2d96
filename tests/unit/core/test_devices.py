"""Device and compute-dtype choice (depthlab.core.devices): dtype `auto` follows what the CPU's
oneDNN multiplies natively, and a model loads in the dtype it resolves to."""

import pytest
import torch
from depthlab.core.devices import native_bf16, resolve_dtype


def test_auto_dtype_is_bf16_only_where_the_cpu_multiplies_it_natively():
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert native_bf16("cpu") is native
    assert resolve_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
    for declared in ("float32", "bfloat16", "float16"):
        assert resolve_dtype(declared, "cpu") == declared  # a declared dtype stays


@pytest.mark.parametrize("native", [True, False])
def test_a_model_loads_in_the_resolved_dtype(tmp_path, monkeypatch, native):
    from depthlab.models.architectures import load_model
    from depthlab.models.decoders import build_model, make_config, save_checkpoint

    arch = {"hidden_size": 16, "num_layers": 2, "num_heads": 2, "intermediate_size": 32}
    model = build_model(make_config(arch, "pre_ln", vocab_size=32, max_positions=8), seed=0)
    save_checkpoint(model, None, tmp_path / "m")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native)
    loaded = load_model(str(tmp_path / "m"), dtype="auto", device="cpu")
    assert next(loaded.parameters()).dtype == (torch.bfloat16 if native else torch.float32)
