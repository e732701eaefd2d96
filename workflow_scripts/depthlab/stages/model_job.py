"""What every job that reads a model's hidden states (analysis, skip interventions, linear maps)
does before its measure: load the model and tokenizer its spec names (path: folder, hub id or
pkg:<package>/<folder>; hub revision; dtype; device; the optional device_map and max_memory that
shard a model over several GPUs, depthlab.core.placement), keep the sequence length within the
model's context, stream the spec's text set as padded token batches, and list the provenance
inputs (the text file of a jsonl text set, the folder of a local model).

The spec's keys are the resolver's (depthlab.config): a job spec is checked there, so nothing
here checks it again.
"""

from __future__ import annotations

import itertools
import os
import sys


def log_stderr(message: str) -> None:
    """The stages' default log: notes and warnings go to the job's stderr."""
    print(message, file=sys.stderr, flush=True)


def load(
    path: str,
    revision: str | None,
    dtype: str,
    device: str,
    tokenizer: bool = True,
    device_map: str | dict = "auto",
    max_memory: dict | None = None,
):
    """(adapter, tokenizer) of one checkpoint: the model loaded in `dtype` on `device` (or
    sharded: device_map, max_memory, depthlab.core.placement) and adapted
    (depthlab.models.architectures), its tokenizer (None with tokenizer=False)."""
    from transformers.utils import logging as hf_logging

    from depthlab.models.architectures import adapt, load_model, load_tokenizer

    hf_logging.disable_progress_bar()
    model = load_model(
        path,
        dtype=dtype,
        device=device,
        revision=revision,
        device_map=device_map,
        max_memory=max_memory,
    )
    loaded = load_tokenizer(path, revision=revision) if tokenizer else None
    return adapt(model), loaded


def context_length(adapter, default: int) -> int:
    """The positions the model was trained for (max_position_embeddings), or `default` when its
    config names none."""
    return getattr(adapter.model.config, "max_position_embeddings", None) or default


def clamp_max_length(max_length: int, adapters, log=log_stderr) -> int:
    """`max_length`, never past any of the models' context (RoPE / learned positions beyond it
    were never trained); says so when it cuts."""
    clamped = min([max_length, *(context_length(a, max_length) for a in adapters)])
    if clamped < max_length:
        log(f"max_length {max_length} exceeds the model's context; using {clamped}")
    return clamped


def text_batches(
    spec: dict,
    tokenizer,
    max_length: int,
    max_samples: int | None = None,
    max_tokens: int | None = None,
    max_documents: int | None = None,
    keep=None,
):
    """Padded token batches (depthlab.stages.residual_stream.iter_token_batches) of the spec's text set
    (spec keys texts, text_field, batch_size, add_special_tokens). max_documents: only the first
    documents are read (None: all); keep(text): which of them are used."""
    from depthlab.data.prepare import iter_texts
    from depthlab.stages.residual_stream import iter_token_batches

    documents = iter_texts(spec["texts"], spec["text_field"])
    if max_documents is not None:
        documents = itertools.islice(documents, max_documents)
    if keep is not None:
        documents = (text for text in documents if keep(text))
    return iter_token_batches(
        documents,
        tokenizer,
        max_length=max_length,
        batch_size=spec["batch_size"],
        max_samples=max_samples,
        max_tokens=max_tokens,
        add_special_tokens=spec["add_special_tokens"],
    )


def provenance_inputs(texts: dict, model_paths=(), files=()) -> list[str]:
    """The inputs a provenance record hashes: the text file of a jsonl text set, then `files`,
    then the folder of every local model (a hub model is named by its id in the config)."""
    from depthlab.models.architectures import resolve_model_path

    inputs = [texts["path"]] if texts["source"] == "jsonl" else []
    inputs += list(files)
    for path in model_paths:
        local = resolve_model_path(path)
        if os.path.isdir(local):
            inputs.append(local)
    return inputs
