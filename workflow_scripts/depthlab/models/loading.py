"""Loading a checkpoint and its tokenizer for the stages: the causal LM where the checkpoint
has one, placed on one device or dispatched over several (depthlab.core.placement), after the
folder's checks (depthlab.models.checkpoint_files)."""

from __future__ import annotations

import shutil
import zipfile
from typing import TYPE_CHECKING

from depthlab.core.errors import CheckpointError

if TYPE_CHECKING:  # torch is imported where it is used: the folder checks below run without it
    import torch

from depthlab.models.checkpoint_files import (
    PICKLE_WEIGHTS,
    SAFETENSORS_WEIGHTS,
    VOCABULARY_FILES,
    _check_tokenizer_fits,
    _is_causal_lm,
    _read_json,
    _register_depthlab_models,
    auto_tokenizer,
    check_model_files,
    local_model_folder,
    resolve_model_path,
)


def load_model(
    path: str,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    revision: str | None = None,
    device_map: str | dict = "auto",
    max_memory: dict | None = None,
):
    """Load a checkpoint for analysis: its causal LM when the checkpoint has one (so the logit
    lens has its head), else the bare model (BERT-style encoders). Refuses checkpoints whose
    weights would be partly random.

    Placement (depthlab.core.placement): on one device (`model.to(device)`) by default, or, when
    `device` is cuda and the model is larger than one of the job's several GPUs (device_map
    auto) or `device_map` names a strategy or a map, dispatched by accelerate over several
    devices, whole decoder layers per device, weights loaded straight onto their device in
    `dtype` (`auto`: depthlab.core.devices.resolve_dtype).

    A local folder is checked first (`check_model_files`): no config.json, missing or truncated
    weights raise CheckpointError naming the file, and so does any error transformers or
    safetensors raise while loading it. Hub ids go to transformers as they are.
    """
    import torch
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    from depthlab.core.devices import torch_dtype
    from depthlab.core.placement import (
        check_device_map,
        check_max_memory,
        offload_folder,
        plan_device_map,
        remove_with,
    )

    _register_depthlab_models()
    folder = local_model_folder(path)
    path = str(folder) if folder is not None else resolve_model_path(path)
    if folder is not None:
        check_model_files(folder)
    dtype = torch_dtype(dtype, device)
    try:
        config = AutoConfig.from_pretrained(path, revision=revision)
    except (OSError, ValueError, KeyError) as error:
        if folder is None:
            raise
        raise CheckpointError(f"{folder / 'config.json'}: {str(error).splitlines()[0]}") from None
    auto = AutoModelForCausalLM if _is_causal_lm(config) else AutoModel
    placed = plan_device_map(
        auto,
        config,
        dtype,
        device,
        check_device_map(device_map),
        check_max_memory(max_memory),
        path,
        torch.cuda.device_count(),
    )
    placement = {}
    if placed is not None:
        placement = {"device_map": placed, "offload_folder": offload_folder(placed)}
    try:
        model, info = auto.from_pretrained(
            path, revision=revision, dtype=dtype, output_loading_info=True, **placement
        )
    except (
        SafetensorError,
        OSError,
        ValueError,
        RuntimeError,
        EOFError,
        zipfile.BadZipFile,
    ) as error:
        if placement.get("offload_folder"):
            shutil.rmtree(placement["offload_folder"], ignore_errors=True)
        if folder is None:
            raise
        weights = next(
            (
                folder / name
                for name in (*SAFETENSORS_WEIGHTS, *PICKLE_WEIGHTS)
                if (folder / name).is_file()
            ),
            folder,
        )
        raise CheckpointError(
            f"{weights}: cannot load the weights ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''})"
        ) from None
    missing = [k for k in info.get("missing_keys", []) if "position_ids" not in k]
    if missing:
        raise CheckpointError(
            f"{path}: checkpoint lacks weights for {missing[:5]} "
            f"({len(missing)} in all); they would be randomly initialised"
        )
    if not placement:
        return model.to(device).eval()
    remove_with(model, placement["offload_folder"])
    return model.eval()


def load_tokenizer(path: str, revision: str | None = None):
    """The checkpoint's own tokenizer, with a pad token (eos, else unk) when it has none.

    A local folder without tokenizer files, whose tokenizer cannot be loaded, or whose
    tokenizer's ids exceed the model's embedding (config.json's vocab_size) is a CheckpointError
    naming the folder.
    """
    folder = local_model_folder(path)
    if folder is not None and not any((folder / n).is_file() for n in VOCABULARY_FILES):
        raise CheckpointError(f"{folder}: no tokenizer (none of {', '.join(VOCABULARY_FILES)})")
    tokenizer = auto_tokenizer(
        str(folder) if folder is not None else resolve_model_path(path), revision, folder
    )
    if folder is not None and (folder / "config.json").is_file():
        ids = tokenizer.get_vocab().values()
        _check_tokenizer_fits(
            folder,
            max(ids, default=-1),
            len(ids),
            _read_json(folder / "config.json", "config.json"),
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if tokenizer.pad_token is None:
        raise CheckpointError(f"{path}: tokenizer has no pad, eos or unk token to pad batches with")
    return tokenizer
