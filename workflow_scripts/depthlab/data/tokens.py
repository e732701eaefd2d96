"""The data stage's tokenizer and token files: the format contract its writer and readers share.

  tokenizer/     HF tokenizer (AutoTokenizer.from_pretrained loads it): a byte-level BPE
                 trained here (`train_bpe`, `hf_tokenizer`) or a pretrained one
  train.bin      flat token ids of the train documents, each followed by eos_id (`token_dtype`)
  val.bin        the same for the validation documents
  val.jsonl      one {"text": ...} per validation document, in val.bin order
  meta.json      dtype, vocab_size, eos/pad/bos ids, per-split token and document counts and the
                 sha256 of each .bin

`SplitWriter` writes a split's .bin (and val.jsonl); `read_meta`, `verify_tokens` and
`load_tokens` read them back, checking length, id range and checksum against meta.json. Writer
and readers live in one module because they must change together.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from pathlib import Path

import numpy as np

from depthlab.core.errors import DataError

EOS_TOKEN = "<|endoftext|>"  # also bos, as in GPT-2
PAD_TOKEN = "<|pad|>"
SPLITS = ("train", "val")


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 holds ids 0..65535, so it serves every vocabulary of at most 65536 entries."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


# --------------------------------------------------------------------------- tokenizer


def train_bpe(documents: list[str], vocab_size: int):
    """Byte-level BPE (GPT-2 pre-tokenization) with eos/bos and pad as special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # every byte encodable
    tokenizer.train_from_iterator(documents, trainer, length=len(documents))
    return tokenizer


def hf_tokenizer(tokenizer):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        clean_up_tokenization_spaces=False,
    )  # decode must give back the exact text


def load_pretrained_tokenizer(name: str, revision: str | None = None):
    from transformers import AutoTokenizer

    where = "data.tokenizer.pretrained"
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, revision=revision)
    except (OSError, ValueError) as error:
        raise DataError(f"{where}: cannot load tokenizer '{name}': {error}") from None
    if tokenizer.eos_token_id is None:
        raise DataError(
            f"{where}: tokenizer '{name}' has no eos token (needed as the document separator)"
        )
    return tokenizer


def encode_documents(tokenizer, documents: list[str]) -> list[list[int]]:
    """Token ids of a batch of documents, without special tokens added: the training stream's
    encoding (its only special token is the eos written after each document)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # Rust batch encode: parallel over documents (RAYON_NUM_THREADS)
        return [e.ids for e in backend.encode_batch_fast(documents, add_special_tokens=False)]
    return tokenizer(documents, add_special_tokens=False)["input_ids"]


# --------------------------------------------------------------------------- token files


class SplitWriter:
    """Streams one split: documents in, `<split>.bin` (ids + eos per document) out in batches
    of `batch_documents` (the data stage's ENCODE_BATCH_DOCUMENTS)."""

    def __init__(
        self,
        folder: Path,
        split: str,
        tokenizer,
        eos_id: int,
        dtype: np.dtype,
        batch_documents: int,
    ):
        self.tokenizer, self.eos_id, self.dtype = tokenizer, eos_id, dtype
        self.batch_documents = batch_documents
        self.bin = open(folder / f"{split}.bin", "wb")
        self.jsonl = open(folder / "val.jsonl", "w", encoding="utf-8") if split == "val" else None
        self.pending: list[str] = []
        self.counts = {"documents": 0, "tokens": 0, "bytes": 0}
        self.sha256 = hashlib.sha256()  # of the .bin as written: load_tokens checks it

    def add(self, text: str) -> None:
        self.pending.append(text)
        if len(self.pending) >= self.batch_documents:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        ids = encode_documents(self.tokenizer, self.pending)
        count = sum(len(i) for i in ids) + len(ids)
        flat = np.fromiter(
            itertools.chain.from_iterable(itertools.chain(i, (self.eos_id,)) for i in ids),
            dtype=self.dtype,
            count=count,
        )
        flat.tofile(self.bin)
        self.sha256.update(flat.tobytes())
        if self.jsonl is not None:
            self.jsonl.writelines(
                json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in self.pending
            )
        self.counts["documents"] += len(self.pending)
        self.counts["tokens"] += count
        self.counts["bytes"] += sum(len(t.encode("utf-8")) for t in self.pending)
        self.pending = []

    def close(self) -> dict:
        """The split's meta.json entry: documents, tokens, text bytes and the .bin's sha256."""
        self.flush()
        self.bin.close()
        if self.jsonl is not None:
            self.jsonl.close()
        return {**self.counts, "sha256": self.sha256.hexdigest()}


def read_meta(data_dir: str | os.PathLike) -> dict:
    """A data stage output's meta.json; DataError naming the file when it is missing or bad."""
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        raise DataError(f"{path}: no meta.json (is {data_dir} a data stage output?)")
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise DataError(f"{path}: not a JSON file ({error})") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: not a JSON object")
    return meta


# Per process: (file identity, expected length/range/checksum) already verified -> skip rehashing.
_VERIFIED: set[tuple] = set()
VERIFY_CHUNK_TOKENS = 1 << 22  # 4M tokens (8-16 MB) per read while hashing and range-checking


def _meta_field(meta: dict, key: str, meta_path: Path, check):
    value = meta.get(key)
    if not check(value):
        raise DataError(f"{meta_path}: '{key}' is missing or invalid ({value!r})")
    return value


def verify_tokens(data_dir: str | os.PathLike, split: str, meta: dict | None = None) -> None:
    """Check `<split>.bin` against meta.json: a whole number of tokens, the recorded token count,
    every id below vocab_size, and (folders written since checksums were added) the recorded
    sha256. DataError naming the file and what is wrong otherwise. One pass over the file; a
    file already verified by this process (same inode, size, mtime) is not read again.
    """
    if split not in SPLITS:
        raise ValueError(f"split: '{split}' is not one of {', '.join(SPLITS)}")
    data_dir = Path(data_dir)
    meta = read_meta(data_dir) if meta is None else meta
    meta_path = data_dir / "meta.json"
    dtype = np.dtype(_meta_field(meta, "dtype", meta_path, lambda v: v in ("uint16", "uint32")))
    vocab = _meta_field(
        meta,
        "vocab_size",
        meta_path,
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    )
    splits = meta.get("splits")
    recorded = splits.get(split) if isinstance(splits, dict) else None
    recorded = recorded if isinstance(recorded, dict) else {}
    expected_tokens, expected_sha = recorded.get("tokens"), recorded.get("sha256")
    if expected_tokens is not None and not isinstance(expected_tokens, int):
        raise DataError(f"{meta_path}: splits.{split}.tokens is not a count ({expected_tokens!r})")
    if expected_sha is not None and not isinstance(expected_sha, str):
        raise DataError(f"{meta_path}: splits.{split}.sha256 is not a hex digest")
    path = data_dir / f"{split}.bin"
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise DataError(f"{path}: missing (is {data_dir} a complete data stage output?)") from None
    if not path.is_file():
        raise DataError(f"{path}: not a file")
    if stat.st_size % dtype.itemsize:
        raise DataError(
            f"{path}: {stat.st_size} bytes is not a whole number of {dtype.name} "
            f"tokens (truncated mid-token?); rerun the data stage"
        )
    length = stat.st_size // dtype.itemsize
    if expected_tokens is not None and length != expected_tokens:
        what = "truncated" if length < expected_tokens else "longer than written"
        raise DataError(
            f"{path}: {length} tokens, but meta.json records {expected_tokens} "
            f"({what}); rerun the data stage"
        )
    if length == 0:
        raise DataError(f"{path}: no tokens; rerun the data stage")
    key = (
        str(path.resolve()),
        stat.st_ino,
        stat.st_size,
        stat.st_mtime_ns,
        dtype.name,
        vocab,
        expected_sha,
    )
    if key in _VERIFIED:
        return
    tokens = np.memmap(path, dtype=dtype, mode="r")
    digest = hashlib.sha256()
    for start in range(0, length, VERIFY_CHUNK_TOKENS):
        chunk = np.asarray(tokens[start : start + VERIFY_CHUNK_TOKENS])
        if int(chunk.max()) >= vocab:
            position = start + int(np.argmax(chunk >= vocab))
            raise DataError(
                f"{path}: token id {int(tokens[position])} at position {position} is "
                f"outside the vocabulary (vocab_size {vocab} in meta.json); the file "
                f"does not belong to this tokenizer or is corrupt"
            )
        if expected_sha is not None:
            digest.update(chunk.data)
    del tokens
    if expected_sha is not None and digest.hexdigest() != expected_sha:
        raise DataError(
            f"{path}: sha256 {digest.hexdigest()[:16]}... differs from the "
            f"{expected_sha[:16]}... meta.json records: the file changed after the "
            f"data stage wrote it (overwritten or zeroed?); rerun the data stage"
        )
    _VERIFIED.add(key)


def load_tokens(data_dir: str | os.PathLike, split: str) -> np.memmap:
    """A split's flat token ids as a read-only 1-D memory map (dtype from meta.json), verified
    against meta.json first (`verify_tokens`): a truncated, zeroed or foreign .bin is a
    DataError naming it, never silently trained on."""
    if split not in SPLITS:
        raise ValueError(f"split: '{split}' is not one of {', '.join(SPLITS)}")
    meta = read_meta(data_dir)
    verify_tokens(data_dir, split, meta)
    return np.memmap(Path(data_dir) / f"{split}.bin", dtype=np.dtype(meta["dtype"]), mode="r")
