"""Data stage: a text corpus, a byte-level BPE tokenizer and flat token arrays per split.

`prepare_corpus` builds the stage's folder from three parts, each a module of its own:

  data_corpus   the sources (docstrings, text_files, hf_dataset), the document filter (exact
                duplicates, whitespace-only and short documents) and the hash split rule
  data_texts    JSON-lines files and `datasets` splits read with errors naming file and line
                (the text_files and hf_dataset sources, and every stage's text sets)
  data_tokens   the tokenizer (BPE training, pretrained loading, batch encoding) and the token
                files: the writer and the checked readers (`read_meta`, `load_tokens`)

Here the stage also drops documents that spell out one of the tokenizer's special tokens (they
would fake a document boundary). Every name of those modules that other code uses is importable
from here too (`from depthlab.data.prepare import load_tokens`).

Documents are streamed to the token arrays in batches, so a hub-scale corpus never sits in
memory when ``tokenizer.pretrained`` is set; training a BPE keeps the (laptop-scale) corpus in
memory because the tokenizer must exist before the first document is encoded.

Output folder (written atomically):
  tokenizer/     HF tokenizer (AutoTokenizer.from_pretrained loads it)
  train.bin      flat token ids of the train documents, each followed by eos_id (dtype in meta)
  val.bin        the same for the validation documents
  val.jsonl      one {"text": ...} per validation document, in val.bin order
  meta.json      dtype, vocab_size, eos/pad/bos ids, per-split token and document counts and the
                 sha256 of each .bin (load_tokens checks length, id range and checksum), source
  provenance.json
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path

from depthlab.core.atomic_files import atomic_path
from depthlab.core.errors import DataError
from depthlab.core.provenance import Provenance
from depthlab.data.sources import (
    DocumentFilter,
    _require,
    docstring_prose,
    docstring_source,
    hf_dataset_source,
    is_validation,
    module_docstrings,
    open_source,
    package_source_files,
    resolve_text_files,
    text_file_source,
)
from depthlab.data.texts import (
    _root_cause,
    iter_dataset_texts,
    iter_jsonl_records,
    iter_jsonl_texts,
    iter_texts,
)
from depthlab.data.tokens import (
    EOS_TOKEN,
    PAD_TOKEN,
    SPLITS,
    VERIFY_CHUNK_TOKENS,
    SplitWriter,
    encode_documents,
    hf_tokenizer,
    load_pretrained_tokenizer,
    load_tokens,
    read_meta,
    token_dtype,
    train_bpe,
    verify_tokens,
)

__all__ = [
    "DataError",
    "DocumentFilter",
    "ENCODE_BATCH_DOCUMENTS",
    "EOS_TOKEN",
    "LOG_EVERY_DOCUMENTS",
    "PAD_TOKEN",
    "SPLITS",
    "SplitWriter",
    "VERIFY_CHUNK_TOKENS",
    "_require",
    "_root_cause",
    "docstring_prose",
    "docstring_source",
    "encode_documents",
    "hf_dataset_source",
    "hf_tokenizer",
    "is_validation",
    "iter_dataset_texts",
    "iter_jsonl_records",
    "iter_jsonl_texts",
    "iter_texts",
    "load_pretrained_tokenizer",
    "load_tokens",
    "module_docstrings",
    "open_source",
    "package_source_files",
    "prepare_corpus",
    "read_meta",
    "resolve_text_files",
    "text_file_source",
    "token_dtype",
    "train_bpe",
    "verify_tokens",
]

# Read by prepare_corpus at each call (tests shrink it here to exercise small batches).
ENCODE_BATCH_DOCUMENTS = 2048  # documents per encode_batch call: bounds memory, keeps rayon busy
LOG_EVERY_DOCUMENTS = 200_000


def _log(message: str) -> None:
    print(f"[data] {message}", file=sys.stderr, flush=True)


class _Phases:
    """Seconds of each phase of the stage (provenance.json's phase_seconds), one clock."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.clock = time.perf_counter()

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        self.seconds[name] = now - self.clock
        self.clock = now
        return self.seconds[name]


def _special_pattern(tokenizer) -> re.Pattern:
    """A regex of the special tokens a document must not spell out (eos at least)."""
    specials = (
        sorted(set(tokenizer.all_special_tokens) - {""}) if tokenizer else [EOS_TOKEN, PAD_TOKEN]
    )
    return re.compile("|".join(map(re.escape, specials)))


def _labelled(documents, special_pattern: re.Pattern, keep: DocumentFilter, val_fraction: float):
    """(split, text) after the special-token filter, with the hash split applied."""
    for number, (split, text) in enumerate(documents, 1):
        if number % LOG_EVERY_DOCUMENTS == 0:
            _log(f"{number} documents read")
        if special_pattern.search(text):
            keep.drop("contains_special_token")
            continue
        if split is None:
            split = "val" if is_validation(text, val_fraction) else "train"
        yield split, text


def _train_tokenizer(stream, vocab_size: int, source: dict, phases: _Phases):
    """(tokenizer, its meta.json entry, the stream again): a BPE trained on the train split.

    The BPE must exist before the first document is encoded, so the corpus is held here."""
    held = list(stream)
    seconds = phases.lap("corpus")
    _log(f"corpus: {len(held)} documents from {source['kind']} in {seconds:.1f} s")
    tokenizer = hf_tokenizer(train_bpe([t for s, t in held if s == "train"], vocab_size))
    info = {
        "kind": "byte_level_bpe",
        "trained_on": "train split",
        "vocab_size_requested": vocab_size,
    }
    return tokenizer, info, iter(held)


def _special_ids(tokenizer) -> dict:
    """eos, bos and pad ids of meta.json; a tokenizer without bos or pad uses eos for them."""
    eos_id = tokenizer.eos_token_id
    return {
        "eos_id": eos_id,
        "bos_id": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos_id,
        "pad_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id,
    }


def _encode_splits(folder: Path, stream, tokenizer, eos_id: int, dtype) -> dict:
    """Every (split, text) of the stream into its .bin; {split: meta.json entry}."""
    writers = {
        split: SplitWriter(folder, split, tokenizer, eos_id, dtype, ENCODE_BATCH_DOCUMENTS)
        for split in SPLITS
    }
    for split, text in stream:
        writers[split].add(text)
    return {split: writer.close() for split, writer in writers.items()}


def _check_splits(splits: dict, keep: DocumentFilter, source: dict, data_config: dict) -> None:
    """DataError when the corpus, or one of its splits, is empty after filtering."""
    total = splits["train"]["documents"] + splits["val"]["documents"]
    if total == 0:
        raise DataError(
            f"data.source: the '{data_config['source']}' corpus is empty after "
            f"filtering (dropped: {keep.dropped or 'nothing'})"
        )
    for split in SPLITS:
        if not splits[split]["documents"]:
            key = (
                "data.hf_dataset.val_split"
                if source.get("val_split") is not None
                else "data.val_fraction"
            )
            raise DataError(
                f"{key}: the {split} split is empty ({total} documents in all); "
                f"use a larger corpus or another val_fraction"
            )


def _corpus_meta(
    tokenizer, dtype, splits: dict, source: dict, tokenizer_info: dict, keep, val_fraction
) -> dict:
    """meta.json's content (see the module docstring)."""
    return {
        "format": "flat token ids per split, each document followed by eos_id",
        "dtype": dtype.name,
        "vocab_size": len(tokenizer),
        **_special_ids(tokenizer),
        "splits": splits,
        "split_rule": (
            "source val_split"
            if source.get("val_split") is not None
            else f"sha256(text) < val_fraction={val_fraction}"
        ),
        "source": source,
        "tokenizer": tokenizer_info,
        "dropped_documents": dict(sorted(keep.dropped.items())),
    }


def prepare_corpus(
    data_config: dict, out_dir: str | os.PathLike, seed: int, threads: int = 1
) -> dict:
    """Build the data stage's output folder atomically; returns its meta.json content.

    `seed` is recorded only: the split hashes each document and BPE training is deterministic,
    so the validation set is the same for every seed (models trained with different seeds are
    compared on the same text).
    """
    provenance = Provenance("data", config=data_config, seed=seed)
    val_fraction = float(_require(data_config, "val_fraction", "data"))
    tok_cfg = _require(data_config, "tokenizer", "data")
    pretrained = tok_cfg.get("pretrained")
    vocab_size = None if pretrained else int(_require(tok_cfg, "vocab_size", "data.tokenizer"))
    keep = DocumentFilter(_require(data_config, "min_document_chars", "data"))
    documents, source, input_files = open_source(data_config, keep, threads)
    provenance.inputs = [str(p) for p in input_files]
    phases = _Phases()

    with atomic_path(out_dir, is_dir=True) as tmp, contextlib.closing(documents):
        tokenizer = (
            load_pretrained_tokenizer(pretrained, tok_cfg.get("revision")) if pretrained else None
        )
        stream = _labelled(documents, _special_pattern(tokenizer), keep, val_fraction)
        if tokenizer is None:
            tokenizer, tokenizer_info, stream = _train_tokenizer(stream, vocab_size, source, phases)
        else:
            tokenizer_info = {"kind": "pretrained", "name": pretrained}
        tokenizer.save_pretrained(tmp / "tokenizer")
        _log(f"tokenizer: {tokenizer_info['kind']} in {phases.lap('tokenizer'):.1f} s")

        dtype = token_dtype(len(tokenizer))
        splits = _encode_splits(tmp, stream, tokenizer, tokenizer.eos_token_id, dtype)
        seconds = phases.lap("encode")
        tokens = splits["train"]["tokens"] + splits["val"]["tokens"]
        _log(f"encode: {tokens} tokens in {seconds:.1f} s")
        _check_splits(splits, keep, source, data_config)

        meta = _corpus_meta(tokenizer, dtype, splits, source, tokenizer_info, keep, val_fraction)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        provenance.extra["threads"] = threads
        provenance.extra["phase_seconds"] = {k: round(v, 3) for k, v in phases.seconds.items()}
        provenance.write(tmp / "provenance.json")
    return meta
