"""Where a loaded model's weights live: on one device, or split by whole decoder layers over the
job's GPUs (a 70B model holds ~140 GB of bf16 weights, more than one GPU).

The choice is one setting, `device_map` (a job spec key; absent means `auto`: the workflow's
specs leave it out, a hand run's `--spec` may set it), read with the job's `device` (auto | cpu |
cuda, depthlab.core.devices):

  auto        one device, `model.to(device)`, unless the device is `cuda`, the job sees more
              than one GPU and the weights do not fit the first one's budget: then `balanced`
              over all of them
  single      always one device, `model.to(device)` (a model too large fails with CUDA OOM)
  balanced | balanced_low_0 | sequential
              accelerate's strategies: the map is inferred on an empty (meta) copy of the model
              with `infer_auto_device_map`, keeping each of the model's `_no_split_modules`
              (its decoder layer class) whole on one device, then transformers loads the
              weights straight onto their devices and accelerate's hooks move each module's
              inputs to its device during the forward pass
  {module: device}
              an explicit map of module names to a GPU index, "cpu" or "disk"

`max_memory` (spec key; absent means null) caps the bytes per device ({0: "70GiB", "cpu":
"8GiB"}); null: 90% of each GPU's free memory and nothing on the host, so a model that does not
fit the job's GPUs stops before its weights are read, naming its size and the GPUs, instead of
running from host memory at a fraction of the speed. Naming "cpu" or "disk" in max_memory allows
accelerate's offloading there (weights are moved in for every forward pass; inference only:
peft cannot train adapters on offloaded layers).

A sharded model's inputs go to the device of its input embedding (`input_device`); every reader
of its hidden states moves them to that one device before combining them.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import weakref
from typing import TYPE_CHECKING

from depthlab.core.errors import DeviceError

if TYPE_CHECKING:  # torch is imported where it is used
    import torch
    from torch import nn

DEVICE_MAP_DEFAULT = "auto"
DEVICE_MAP_STRATEGIES = ("balanced", "balanced_low_0", "sequential")
DEVICE_MAP_CHOICES = ("auto", "single", *DEVICE_MAP_STRATEGIES)
OFFLOAD_TARGETS = ("cpu", "disk")
# Share of a GPU's free memory its weights may take: the rest holds activations, the KV cache
# and the logits (transformers' own default for one GPU is the same 90%).
GPU_MEMORY_FRACTION = 0.9
MEMORY_SIZE = re.compile(r"^\d+(\.\d+)?\s*([KMGT]i?B)?$", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------
# The setting


def _device_key(key, where: str):
    """A device of a map or budget: a GPU index (JSON spells it "0") or cpu / disk."""
    if isinstance(key, bool):
        raise DeviceError(f"{where}: {key!r} is not a GPU index, 'cpu' or 'disk'")
    if isinstance(key, int) and key >= 0:
        return key
    if isinstance(key, str) and key.isdigit():
        return int(key)
    if key in OFFLOAD_TARGETS:
        return key
    raise DeviceError(f"{where}: {key!r} is not a GPU index, 'cpu' or 'disk'")


def check_device_map(device_map, where: str = "device_map"):
    """The setting as load_model takes it (a choice, or a map with GPU indices as ints);
    DeviceError naming `where` otherwise."""
    if isinstance(device_map, str):
        if device_map not in DEVICE_MAP_CHOICES:
            raise DeviceError(
                f"{where}: {device_map!r} is not one of {', '.join(DEVICE_MAP_CHOICES)} "
                f"or a map of module names to devices"
            )
        return device_map
    if isinstance(device_map, dict) and device_map:
        checked = {}
        for module, device in device_map.items():
            if not isinstance(module, str):
                raise DeviceError(f"{where}: module name {module!r} is not a string")
            checked[module] = _device_key(device, f"{where}.{module}")
        return checked
    raise DeviceError(
        f"{where}: {device_map!r} is neither one of {', '.join(DEVICE_MAP_CHOICES)} nor a "
        f"non-empty map of module names to devices"
    )


def check_max_memory(max_memory, where: str = "max_memory") -> dict | None:
    """Bytes (or sizes such as "70GiB") per device, GPU indices as ints; None stays None."""
    if max_memory is None:
        return None
    if not isinstance(max_memory, dict) or not max_memory:
        raise DeviceError(f"{where}: {max_memory!r} is not a map of devices to sizes")
    checked = {}
    for key, size in max_memory.items():
        device = _device_key(key, f"{where}.{key}")
        if isinstance(size, bool) or not (
            (isinstance(size, int) and size > 0)
            or (isinstance(size, str) and MEMORY_SIZE.match(size.strip()))
        ):
            raise DeviceError(
                f"{where}.{key}: {size!r} is not a size (bytes, or e.g. '70GiB', '500MB')"
            )
        checked[device] = size
    return checked


def spec_placement(spec: dict, where: str = "spec") -> dict:
    """load_model's placement arguments from a job spec: its optional `device_map` (absent:
    auto) and `max_memory` (absent: null), checked and named as spec keys."""
    return {
        "device_map": check_device_map(
            spec.get("device_map", DEVICE_MAP_DEFAULT), f"{where}.device_map"
        ),
        "max_memory": check_max_memory(spec.get("max_memory"), f"{where}.max_memory"),
    }


def sharding(device: str, device_map, gpu_count: int):
    """What load_model may do for `device` (resolved: cpu, cuda or cuda:N) and the setting:
    None = one device (`model.to(device)`), else the strategy name or the explicit map (auto's
    `balanced` still keeps a model that fits one GPU there: `plan_device_map`)."""
    if device_map == "single":
        return None
    if device_map == "auto":
        return "balanced" if device == "cuda" and gpu_count > 1 else None
    return device_map


# ---------------------------------------------------------------------------------------------
# The map


def gpu_budget(device: str) -> dict:
    """GPU_MEMORY_FRACTION of the free memory of the GPUs a `cuda` job may use: every visible
    one, or only N for `cuda:N`; {} on a CPU device."""
    import torch

    if not device.startswith("cuda"):
        return {}
    _, _, index = device.partition(":")
    gpus = [int(index)] if index else range(torch.cuda.device_count())
    return {i: int(torch.cuda.mem_get_info(i)[0] * GPU_MEMORY_FRACTION) for i in gpus}


def plan_device_map(
    model_class, config, dtype, device: str, device_map, max_memory, name: str, gpu_count: int
) -> dict | None:
    """The placement of one model (module docstring): None to load it on one device and
    `.to(device)`, else the {module: device} map to load it with. `device_map` and `max_memory`
    as checked by check_device_map / check_max_memory; `name` names the model in errors."""
    from accelerate import init_empty_weights
    from accelerate.utils import compute_module_sizes, convert_file_size_to_int

    strategy = sharding(device, device_map, gpu_count)
    if strategy is None or isinstance(strategy, dict):
        return strategy
    with init_empty_weights():  # sizes and module names only: no weight is read
        empty = model_class.from_config(config, dtype=dtype)
    if device_map == "auto":  # a model that fits the first GPU stays on it, as with one GPU
        budget = max_memory if max_memory is not None else gpu_budget(device)
        gpus = sorted(key for key in budget if isinstance(key, int))
        size = compute_module_sizes(empty, dtype=dtype)[""]
        if gpus and size <= convert_file_size_to_int(budget[gpus[0]]):
            return None
    return infer_device_map(empty, dtype, strategy, max_memory, device, name)


def infer_device_map(
    empty, dtype, strategy: str, max_memory: dict | None, device: str, name: str
) -> dict:
    """{module: device} for `strategy` over an empty (meta) model, with accelerate's
    `get_balanced_memory` / `infer_auto_device_map`, whole decoder layers per device.
    DeviceError naming the model when it does not fit the budget (the GPUs unless max_memory
    names the host)."""
    from accelerate import infer_auto_device_map
    from accelerate.utils import compute_module_sizes, get_balanced_memory

    no_split = sorted(getattr(empty, "_no_split_modules", None) or [])
    if not no_split:
        raise DeviceError(
            f"{name}: {type(empty).__name__} names no decoder layer class (_no_split_modules), "
            f"so it cannot be split by whole layers; use device_map: single"
        )
    budget = max_memory if max_memory is not None else gpu_budget(device)
    if not budget:
        raise DeviceError(
            f"{name}: device_map {strategy!r} on {device} needs max_memory naming where the "
            f"weights may go (e.g. {{cpu: '8GiB', disk: '100GiB'}})"
        )
    if strategy != "sequential":
        budget = get_balanced_memory(
            empty,
            max_memory=dict(budget),
            no_split_module_classes=no_split,
            dtype=dtype,
            low_zero=strategy == "balanced_low_0",
        )
    device_map = infer_auto_device_map(
        empty, max_memory=dict(budget), no_split_module_classes=no_split, dtype=dtype
    )
    allowed = set(budget)
    spilled = sorted({d for d in device_map.values() if d not in allowed}, key=str)
    if spilled:
        size = compute_module_sizes(empty, dtype=dtype)[""]
        raise DeviceError(
            f"{name}: {_gib(size)} of {str(dtype).removeprefix('torch.')} weights do "
            f"not fit the budget {describe_budget(budget)}; modules would spill to "
            f"{', '.join(map(str, spilled))}. Give the job more GPUs, or name "
            f"{' / '.join(map(str, spilled))} in max_memory to offload there (slow)"
        )
    return device_map


def describe_budget(budget: dict) -> str:
    return "{" + ", ".join(f"{k}: {_gib(v)}" for k, v in budget.items()) + "}"


def _gib(size) -> str:
    if not isinstance(size, (int, float)):
        return str(size)
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.2f} MiB"


def offload_folder(device_map: dict) -> str | None:
    """A new temporary folder for the weights a map sends to disk (None when none goes there);
    `remove_with` ties it to the model."""
    return tempfile.mkdtemp(prefix="depthlab-offload-") if "disk" in device_map.values() else None


def remove_with(model, folder: str | None) -> None:
    """Remove `folder` when `model` is garbage-collected (or at exit); copies of the model
    (depthlab.stages.pruning.layer_removal.prune_copy) read the same folder, so they must not outlive it."""
    if folder is not None:
        weakref.finalize(model, shutil.rmtree, folder, True)


# ---------------------------------------------------------------------------------------------
# A loaded model


def is_dispatched(model: nn.Module) -> bool:
    """Whether accelerate dispatched the model over several devices (or offloaded part of it)."""
    device_map = getattr(model, "hf_device_map", None) or {}
    return len(set(device_map.values())) > 1 or "disk" in device_map.values()


def execution_device(module: nn.Module) -> torch.device | None:
    """Where a module computes: its accelerate hook's execution device when it has one (an
    offloaded module's weights sit on `meta` between passes), else its first weight's device."""
    import torch

    hook = getattr(module, "_hf_hook", None)
    device = getattr(hook, "execution_device", None)
    if device is not None:
        return torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    for tensor in module.parameters():
        return tensor.device
    return None


def input_device(model: nn.Module) -> torch.device:
    """The device a model's input ids go to: its input embedding's (on one device, the model's
    only device)."""
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    device = execution_device(embedding) if embedding is not None else None
    if device is None:
        device = next(model.parameters()).device
    return device


def has_offloaded_weights(module: nn.Module) -> bool:
    """Whether some weight of `module` sits on `meta` (offloaded by accelerate to cpu / disk)."""
    return any(p.device.type == "meta" for p in module.parameters())


def materialised_state_dict(model: nn.Module) -> dict:
    """model.state_dict(); when some weights are offloaded, every tensor read back onto the CPU
    (accelerate's get_state_dict_offloaded_model, one module at a time)."""
    if not has_offloaded_weights(model):
        return model.state_dict()
    from accelerate.utils.modeling import get_state_dict_offloaded_model

    return get_state_dict_offloaded_model(model)
