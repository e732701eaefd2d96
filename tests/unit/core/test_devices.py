"""Device and compute-dtype choice (depthlab.core.devices): device `auto` is cuda where a GPU is
visible unless $DEPTHLAB_AUTO_DEVICE pins it (the tests pin it to cpu), dtype `auto` follows what
the CPU's oneDNN multiplies natively, and a model loads in the dtype it resolves to."""

import os

import pytest
import torch
from depthlab.core.devices import (
    AUTO_DEVICE_VARIABLE,
    native_bf16,
    resolve_device,
    resolve_dtype,
)
from depthlab.core.errors import DeviceError


def test_every_test_resolves_auto_to_the_cpu():
    """tests/conftest.py pins `auto` for every test and the Snakemake runs they start: no
    test's result depends on whether CUDA is visible."""
    assert os.environ[AUTO_DEVICE_VARIABLE] == "cpu"
    assert resolve_device("auto") == "cpu"


def test_the_pin_wins_over_a_visible_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cpu"
    monkeypatch.delenv(AUTO_DEVICE_VARIABLE)
    assert resolve_device("auto") == "cuda"  # unpinned, a visible GPU is taken
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    monkeypatch.setenv(AUTO_DEVICE_VARIABLE, "tpu")
    with pytest.raises(DeviceError, match=r"DEPTHLAB_AUTO_DEVICE: 'tpu' is not cpu or cuda"):
        resolve_device("auto")
    monkeypatch.setenv(AUTO_DEVICE_VARIABLE, "cuda")  # pinned to a GPU that is not there
    with pytest.raises(DeviceError, match="no CUDA device is visible"):
        resolve_device("auto")


def test_cuda_marked_tests_skip_without_a_gpu(monkeypatch):
    """The `cuda` marker's skip (tests/conftest.py's pytest_runtest_setup): a marked test runs
    only where CUDA is visible, an unmarked one everywhere."""
    import conftest

    class Item:
        def __init__(self, marked):
            self.marked = marked

        def get_closest_marker(self, name):
            return object() if self.marked and name == "cuda" else None

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(pytest.skip.Exception, match="needs a CUDA GPU"):
        conftest.pytest_runtest_setup(Item(marked=True))
    conftest.pytest_runtest_setup(Item(marked=False))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    conftest.pytest_runtest_setup(Item(marked=True))


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
