"""Device choice, one rule for every stage: `auto` is cuda when a GPU is visible, else cpu."""

from __future__ import annotations

from depthlab.core.errors import DeviceError


def resolve_device(name: str = "auto") -> str:
    """`auto` -> cuda when a GPU is visible, else cpu; `cpu` / `cuda` / `cuda:N` as given."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceError(f"device {name!r} requested but no CUDA device is visible")
    return name
