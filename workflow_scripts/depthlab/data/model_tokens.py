"""The run's documents as the token ids of a model's own tokenizer.

The data stage stores the corpus as ids of the run's tokenizer (train.bin, val.bin: each document
followed by the eos id of meta.json; depthlab.data.prepare). A model pretrained here reads those ids as
they are. A declared checkpoint (kind hf or gguf) has its own vocabulary, so it must read the same
documents encoded by its own tokenizer. The documents are recovered exactly:

  val    data/val.jsonl, one {"text": ...} per document, in val.bin order
  train  train.bin cut at the eos id into documents, each decoded by the run's tokenizer
         (<data>/tokenizer); exact for the data stage's byte-level BPE (its decoder maps the
         tokens back to the document's bytes; the eos separators are dropped, not decoded)

Each document is encoded with the model tokenizer's own template (`add_special_tokens=True`: e.g.
Gemma's leading <bos>, nothing for a GPT-2-style tokenizer), as the analysis stage reads text for
such a model, and followed by the tokenizer's eos unless the template already ends with it (T5's
</s>). Documents are encoded in order until `max_tokens` ids exist, and the stream is cut there,
so a large corpus is not re-encoded beyond what the validation windows and healing steps read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from depthlab.core.errors import DataError
from depthlab.data.prepare import iter_jsonl_texts, load_tokens, read_meta, token_dtype

ENCODE_BATCH_DOCUMENTS = 256  # documents per encode call: Rust batch encoding, bounded memory
DECODE_CHUNK_TOKENS = 1 << 20  # train.bin ids read (and decoded) per step


def val_documents(data_dir: str | Path) -> Iterator[str]:
    """The validation documents in val.bin order (data/val.jsonl)."""
    path = Path(data_dir) / "val.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: missing (is {data_dir} a complete data stage output?)")
    return iter_jsonl_texts(path, "text", where=str(path))


def run_tokenizer(data_dir: str | Path):
    """The run's tokenizer, saved by the data stage in <data>/tokenizer."""
    from transformers import AutoTokenizer

    folder = Path(data_dir) / "tokenizer"
    if not folder.is_dir():
        raise DataError(f"{folder}: missing (is {data_dir} a complete data stage output?)")
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as error:
        raise DataError(f"{folder}: cannot load the run's tokenizer: {error}") from None


def _decode_batch(tokenizer, documents: list[list[int]]) -> list[str]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # the Rust decoder as is: no clean-up of spaces around punctuation
        return backend.decode_batch(documents, skip_special_tokens=False)
    return tokenizer.batch_decode(
        documents, skip_special_tokens=False, clean_up_tokenization_spaces=False
    )


def train_documents(data_dir: str | Path, chunk_tokens: int = DECODE_CHUNK_TOKENS) -> Iterator[str]:
    """The train documents in train.bin order: the ids between eos separators, decoded by the
    run's tokenizer; read `chunk_tokens` ids at a time (lazily: stopping early reads no more)."""
    meta = read_meta(data_dir)
    eos = meta.get("eos_id")
    if not isinstance(eos, int) or isinstance(eos, bool):
        raise DataError(f"{Path(data_dir) / 'meta.json'}: 'eos_id' is missing or invalid ({eos!r})")
    tokens = load_tokens(data_dir, "train")
    tokenizer = run_tokenizer(data_dir)
    carry = np.empty(0, dtype=tokens.dtype)  # a document cut by the chunk boundary
    for start in range(0, len(tokens), chunk_tokens):
        chunk = np.concatenate([carry, np.asarray(tokens[start : start + chunk_tokens])])
        ends = np.flatnonzero(chunk == eos)
        starts = np.concatenate([[0], ends[:-1] + 1]) if len(ends) else []
        documents = [chunk[s:e].tolist() for s, e in zip(starts, ends) if e > s]
        carry = chunk[ends[-1] + 1 :] if len(ends) else chunk
        yield from _decode_batch(tokenizer, documents)
    if len(carry):  # a stream not ending in eos: its tail is a document too
        yield from _decode_batch(tokenizer, [carry.tolist()])


def encode_stream(
    documents: Iterable[str], tokenizer, max_tokens: int | None = None
) -> tuple[np.ndarray, int]:
    """(flat ids, documents encoded): each document with the tokenizer's template, then its eos
    unless the template ends with it; cut after `max_tokens` ids (None: every document)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise DataError(
            f"tokenizer '{getattr(tokenizer, 'name_or_path', '?')}': no eos token to separate "
            f"documents with"
        )
    dtype = token_dtype(max(len(tokenizer), eos + 1))
    pieces, total, count = [], 0, 0
    documents = iter(documents)
    while max_tokens is None or total < max_tokens:
        batch = list(itertools.islice(documents, ENCODE_BATCH_DOCUMENTS))
        if not batch:
            break
        # verbose=False: a document longer than the model's context is fine in a flat stream
        encoded = tokenizer(batch, add_special_tokens=True, verbose=False)["input_ids"]
        for ids in encoded:
            if not ids or ids[-1] != eos:
                ids = [*ids, eos]
            pieces.append(np.asarray(ids, dtype=dtype))
            total += len(ids)
            count += 1
            if max_tokens is not None and total >= max_tokens:
                break
    if not pieces:
        raise DataError("no documents to encode (the split is empty)")
    flat = np.concatenate(pieces)
    return (flat if max_tokens is None else flat[:max_tokens]), count


def model_tokens(
    data_dir: str | Path, split: str, tokenizer=None, max_tokens: int | None = None
) -> tuple[np.ndarray, dict]:
    """A split's flat token ids as a model reads them, and a record of how they were made.

    tokenizer None (a model pretrained here): the run's ids, the whole split (`load_tokens`,
    exactly what pretraining read). Otherwise the split's documents re-encoded by `tokenizer`
    (see the module docstring), at most `max_tokens` ids (None: the whole split)."""
    if split not in ("train", "val"):
        raise ValueError(f"split: '{split}' is not one of train, val")
    if tokenizer is None:
        tokens = load_tokens(data_dir, split)
        return tokens, {"tokenizer": "run", "source": f"{split}.bin", "tokens": int(len(tokens))}
    documents = val_documents(data_dir) if split == "val" else train_documents(data_dir)
    tokens, count = encode_stream(documents, tokenizer, max_tokens)
    return tokens, {
        "tokenizer": str(getattr(tokenizer, "name_or_path", "")) or type(tokenizer).__name__,
        "tokenizer_class": type(tokenizer).__name__,
        "source": "val.jsonl" if split == "val" else "train.bin decoded by the run's tokenizer",
        "template": "add_special_tokens, then eos",
        "bos_id": tokenizer.bos_token_id,
        "eos_id": tokenizer.eos_token_id,
        "documents": count,
        "tokens": int(len(tokens)),
        "max_tokens": max_tokens,
    }
