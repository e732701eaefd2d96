"""Device and compute-dtype choice, one rule for every stage: device `auto` is cuda when a GPU is
visible, else cpu (or what $DEPTHLAB_AUTO_DEVICE names: the tests set it to cpu, so that a test
comparing with a CPU reference gets the same answer where CUDA is visible); dtype `auto` is
bfloat16 where the device multiplies bf16 natively, else float32 (an AVX2-only CPU emulates bf16:
SmolLM2-135M's forward ran 3.3x slower in bf16 than in fp32 on one, bench/RESULTS.md)."""

from __future__ import annotations

import os

from depthlab.core.errors import DeviceError

AUTO_DEVICE_VARIABLE = "DEPTHLAB_AUTO_DEVICE"


def resolve_device(name: str = "auto") -> str:
    """`auto` -> $DEPTHLAB_AUTO_DEVICE where set (cpu or cuda), else cuda when a GPU is visible,
    else cpu; `cpu` / `cuda` / `cuda:N` as given."""
    import torch

    if name == "auto":
        pinned = os.environ.get(AUTO_DEVICE_VARIABLE)
        if pinned:
            if pinned not in ("cpu", "cuda"):
                raise DeviceError(f"${AUTO_DEVICE_VARIABLE}: {pinned!r} is not cpu or cuda")
            return resolve_device(pinned)
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceError(f"device {name!r} requested but no CUDA device is visible")
    return name


def native_bf16(device) -> bool:
    """Whether `device` (a torch.device or its name) multiplies bf16 natively: a CUDA GPU with
    bf16, or a CPU whose oneDNN has bf16 kernels (AVX512-BF16 / AMX; elsewhere torch emulates
    them, far slower than fp32)."""
    import torch

    device = torch.device(resolve_device(device) if device == "auto" else device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def resolve_dtype(dtype: str, device) -> str:
    """The compute dtype a job loads its model in: `auto` -> bfloat16 where `device` multiplies
    bf16 natively, else float32; any other name as given."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if native_bf16(device) else "float32"


def torch_dtype(dtype, device):
    """A dtype name (`auto` resolved for `device`, as resolve_dtype) or a torch.dtype, as a
    torch.dtype."""
    import torch

    return dtype if isinstance(dtype, torch.dtype) else getattr(torch, resolve_dtype(dtype, device))
