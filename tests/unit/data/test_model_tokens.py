"""Token ids for a model not pretrained here: the run's documents (val.jsonl; train.bin decoded by
the run's BPE) re-encoded by the model's own tokenizer decode back to exactly the documents the
data stage wrote, with the tokenizer's bos template and eos between documents; the cap cuts the
same stream; a model pretrained here keeps the run's ids bit for bit."""

import json

import numpy as np
import pytest
from depthlab.core.errors import DataError, PruningError
from depthlab.data.model_tokens import model_tokens, run_tokenizer, train_documents
from depthlab.data.prepare import is_validation, load_tokens, prepare_corpus, read_meta
from depthlab.stages.pruning.stage import split_tokens
from depthlab.stages.pruning.strategies import validation_windows

VAL_FRACTION = 0.25


def documents() -> list[str]:
    """Unique documents with what an inexact decode would lose: multi-byte characters, runs of
    spaces, a leading space, tabs, newlines, a space before punctuation."""
    words = ["naïve", "café", "数据", "🙂", "end .", "x  y", "\ttab", "line\nbreak", "«q»"]
    return [
        (" " if i % 7 == 0 else "")
        + f"Doc {i}: "
        + " ".join(words[(i + k) % len(words)] for k in range(3 + i % 5))
        + ("  ." if i % 3 == 0 else ".")
        for i in range(160)
    ]


@pytest.fixture(scope="module")
def run_data(tmp_path_factory):
    """A data stage output (the real writer: text_files source, byte-level BPE)."""
    root = tmp_path_factory.mktemp("model_tokens")
    corpus = root / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in documents()),
        encoding="utf-8",
    )
    data = root / "data"
    prepare_corpus(
        {
            "source": "text_files",
            "text_files": {"paths": [str(corpus)]},
            "min_document_chars": 8,
            "val_fraction": VAL_FRACTION,
            "tokenizer": {"vocab_size": 400, "pretrained": None},
        },
        data,
        seed=0,
    )
    return data


@pytest.fixture(scope="module")
def foreign():
    """Another byte-level BPE (its own vocabulary) whose template prepends <s>, as Llama's and
    Gemma's do; </s> is its eos."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        [t[::-1] for t in documents()],  # other merges than the run's BPE
        trainers.BpeTrainer(
            vocab_size=330,
            special_tokens=["<pad>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    bpe.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bpe.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def expected_split(split: str) -> list[str]:
    """The data stage's split rule applied to the input, independently of its output."""
    return [t for t in documents() if is_validation(t, VAL_FRACTION) == (split == "val")]


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-to-character table, inverted: a byte-level token's characters -> bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_bytes(tokenizer, ids) -> bytes:
    """The bytes a run of ids stands for (a window may cut a character between tokens, so text
    is compared as bytes); special tokens as their text."""
    table = _byte_decoder()
    special = set(tokenizer.all_special_ids)
    out = b""
    for i, token in zip(ids, tokenizer.convert_ids_to_tokens(list(ids))):
        out += token.encode() if i in special else bytes(table[c] for c in token)
    return out


def documents_of(tokenizer, ids) -> list[str]:
    """Cut a stream at eos; each piece must open with bos; decode the rest."""
    ids = [int(i) for i in ids]
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    ends = [k for k, i in enumerate(ids) if i == eos]
    pieces = [ids[a + 1 : b] for a, b in zip([-1, *ends], ends)]
    assert all(piece[0] == bos for piece in pieces)
    return [tokenizer.backend_tokenizer.decode(p[1:], skip_special_tokens=False) for p in pieces]


def test_val_windows_decode_to_the_run_documents(run_data, foreign):
    val = expected_split("val")
    assert [json.loads(line)["text"] for line in open(run_data / "val.jsonl")] == val
    tokens, record = model_tokens(run_data, "val", foreign)
    assert tokens[-1] == foreign.eos_token_id
    assert documents_of(foreign, tokens) == val  # every document, in order, exactly
    assert record["documents"] == len(val) and record["tokens"] == len(tokens)
    # the run's ids are another vocabulary's: the streams differ
    run_ids = np.asarray(load_tokens(run_data, "val"))
    assert len(run_ids) != len(tokens) or not np.array_equal(run_ids, tokens)
    joined = b"".join(b"<s>" + t.encode() + b"</s>" for t in val)
    windows = validation_windows(tokens, 6, 24, 4)
    rows = [row for batch in windows for row in batch.tolist()]
    assert len(rows) == 6
    for row in rows:
        assert token_bytes(foreign, row) in joined


def test_train_documents_are_recovered_exactly(run_data, foreign):
    train = expected_split("train")
    # small chunks: documents cut by chunk boundaries (5: most chunks hold no eos) carried whole
    for chunk_tokens in (5, 37):
        assert list(train_documents(run_data, chunk_tokens=chunk_tokens)) == train
    tokens, record = model_tokens(run_data, "train", foreign)
    assert documents_of(foreign, tokens) == train
    capped, capped_record = model_tokens(run_data, "train", foreign, max_tokens=300)
    assert len(capped) == 300 and np.array_equal(capped, tokens[:300])
    assert capped_record["documents"] < record["documents"] == len(train)


def test_run_tokenizer_reencodes_to_the_run_ids(run_data):
    """The run's own tokenizer as a model's: decode + re-encode gives train.bin / val.bin back."""
    tokenizer = run_tokenizer(run_data)
    spec = {"model_kind": "hf", "data": str(run_data), "retokenize": {"val_tokens": None}}
    spec["retokenize"]["train_tokens"] = None
    for split in ("train", "val"):
        tokens, record = split_tokens(spec, tokenizer, split)
        assert record["tokenizer"] != "run"
        assert np.array_equal(tokens, np.asarray(load_tokens(run_data, split)))


def test_pretrain_model_keeps_the_run_ids(run_data, foreign):
    dtype = np.dtype(read_meta(run_data)["dtype"])
    raw = np.fromfile(run_data / "val.bin", dtype=dtype)
    tokens, record = split_tokens({"model_kind": "pretrain", "data": str(run_data)}, foreign, "val")
    assert record == {"tokenizer": "run", "source": "val.bin", "tokens": len(raw)}
    assert tokens.dtype == raw.dtype and np.array_equal(tokens, raw)
    for got, want in zip(validation_windows(tokens, 5, 16, 2), validation_windows(raw, 5, 16, 2)):
        assert got.dtype == want.dtype and bool((got == want).all())


def test_bad_input_is_named(run_data, foreign, tmp_path):
    with pytest.raises(PruningError, match=r"retokenize\.val_tokens: required for a model of kind"):
        split_tokens({"model_kind": "gguf", "data": str(run_data)}, foreign, "val")
    for name in ("meta.json", "train.bin"):  # a data folder without val.jsonl and tokenizer/
        (tmp_path / name).write_bytes((run_data / name).read_bytes())
    with pytest.raises(DataError, match=r"val\.jsonl: missing"):
        model_tokens(tmp_path, "val", foreign)
    with pytest.raises(DataError, match=r"tokenizer: missing"):
        list(train_documents(tmp_path))
    from transformers import PreTrainedTokenizerFast

    without_eos = PreTrainedTokenizerFast(tokenizer_object=foreign.backend_tokenizer)
    assert without_eos.eos_token_id is None
    with pytest.raises(DataError, match="no eos token to separate documents"):
        model_tokens(run_data, "val", without_eos)
