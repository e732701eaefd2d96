"""The mergekit round trip of pruned-model exports, with the real CLI: `mergekit-yaml
<export>/mergekit.yaml OUT` (mergekit pinned in requirements.txt) rebuilds a contiguous and a
non-contiguous removal of a model trained here (a depthlab LNS model trained a few steps, saved
as the pretraining stage saves it: plain Llama, each layer's 1/sqrt(l) folded in) and of a
SmolLM2-shaped Llama (SmolLM2-135M's config: 30 layers, tied embeddings, 9 query / 3 KV heads,
its rope theta and norm epsilon; widths and vocabulary reduced, since converting the real GGUF
takes about a minute), and transformers loads OUT with logits equal to the project's own export
(and to the full model with the removed layers skipped by a hook, the definition of removal).
Exports a passthrough cannot rebuild (a depthlab_llama original, a config whose per-layer list
removal slices, a sub-layer removal) write no mergekit.yaml and say why in pruning.json and
exports.json; for Qwen2's `layer_types` the reason is shown real: mergekit fails on that
passthrough, or writes a folder that does not load as the export does."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers as tf
from depthlab.models.decoders import build_model, make_config, save_checkpoint
from depthlab.models.loading import load_model
from depthlab.stages.pruning.layer_removal import (
    SUBLAYER_OBSTACLE,
    export_pruned,
    mergekit_config,
)
from depthlab.stages.pruning.strategies import export_choices
from requirements_helpers import require_pinned
from test_lm_tasks import train_tiny
from test_pruning import make, markov_tokens, skip_reference
from tiny_models import (
    DEPTHLAB_SCHEMES,
    FFN,
    HEADS,
    HIDDEN,
    POSITIONS,
    VOCAB,
    causal_lm,
    random_batch,
)

require_pinned("mergekit")  # skipped without it, failed under CI=true
torch.set_num_threads(1)
MERGEKIT_YAML = Path(sys.executable).with_name("mergekit-yaml")
LAYERS_HERE = 6
SMOLLM2_LAYERS = 30
# contiguous (one run, Gromov et al.'s deepest-block shape) and non-contiguous removal sets
REMOVALS = {
    "here": {"contiguous": (2, 3, 4), "gaps": (0, 2, 5)},
    "smollm2": {"contiguous": tuple(range(20, 28)), "gaps": (0, 3, 9, 17, 29)},
}


def depthlab_model(scheme: str, layers: int = LAYERS_HERE, seed: int = 0):
    architecture = dict(
        hidden_size=HIDDEN,
        num_layers=layers,
        num_heads=HEADS,
        intermediate_size=FFN,
        mix_ln_post_fraction=0.34,
    )
    config = make_config(architecture, scheme, vocab_size=VOCAB, max_positions=POSITIONS)
    config._attn_implementation = "eager"
    model = build_model(config, seed).eval()
    with torch.no_grad():  # norm gains away from 1, so the folded LNS factors matter
        generator = torch.Generator().manual_seed(seed + 1)
        for param in model.parameters():
            if param.ndim == 1:
                param.copy_(1.0 + 0.3 * torch.randn(param.shape, generator=generator))
    return model


def smollm2_shaped(seed: int = 0):
    """SmolLM2-135M's config (HuggingFaceTB/SmolLM2-135M config.json) at 1/8 of its widths."""
    torch.manual_seed(seed)
    config = tf.LlamaConfig(
        vocab_size=256,
        hidden_size=72,
        head_dim=8,
        intermediate_size=192,
        num_hidden_layers=SMOLLM2_LAYERS,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        tie_word_embeddings=True,
        initializer_range=0.1,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    return tf.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """The two original model folders, as the workflow holds them, and the in-memory models."""
    root = tmp_path_factory.mktemp("originals")
    # trained a little with the language-model loss the pretraining stage uses
    here = train_tiny(depthlab_model("lns"), markov_tokens(4000), steps=20, seq_len=32)
    save_checkpoint(here, None, root / "here")  # what the pretraining stage writes
    smollm2 = smollm2_shaped()
    smollm2.save_pretrained(root / "smollm2")
    return {"here": (here, root / "here"), "smollm2": (smollm2, root / "smollm2")}


def run_mergekit(config: Path, out: Path) -> subprocess.Popen:
    command = [str(MERGEKIT_YAML), str(config), str(out), "--no-copy-tokenizer"]
    command += ["--no-write-model-card", "--quiet", "--out-shard-size", "1B"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def round_trips(originals, tmp_path_factory):
    """For each (model, removal set): the project's export (from the folder, loaded as the export
    job loads it) and mergekit-yaml's output of its mergekit.yaml; the smollm2 gaps case in
    bfloat16 (dtype auto on a GPU). The merges run side by side (each is mostly imports)."""
    root = tmp_path_factory.mktemp("round_trips")
    cases, running = {}, {}
    for name, sets in REMOVALS.items():
        _, folder = originals[name]
        for shape, removed in sets.items():
            dtype = "bfloat16" if (name, shape) == ("smollm2", "gaps") else "float32"
            loaded = load_model(str(folder), dtype=dtype, device="cpu")
            export = root / f"{name}_{shape}"
            record = export_pruned(loaded, removed, export, mergekit_source=str(folder))
            cases[(name, shape)] = (removed, export, record, root / f"{name}_{shape}_merged")
            running[(name, shape)] = run_mergekit(
                export / "mergekit.yaml", root / f"{name}_{shape}_merged"
            )
    # the passthrough the Qwen2 obstacle refuses to write, written by hand, run for real
    qwen = qwen2_model()
    qwen.save_pretrained(root / "qwen2")
    (root / "qwen2.yaml").write_text(mergekit_config(str(root / "qwen2"), (1, 2), 6, "float32"))
    running["qwen2"] = run_mergekit(root / "qwen2.yaml", root / "qwen2_merged")
    logs = {key: process.communicate()[0] for key, process in running.items()}
    return cases, logs, root


def qwen2_model():
    return causal_lm(tf.Qwen2Config, tf.Qwen2ForCausalLM, eager=False, num_hidden_layers=6)


def logits(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    model = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("name", ["here", "smollm2"])
@pytest.mark.parametrize("shape", ["contiguous", "gaps"])
def test_mergekit_yaml_rebuilds_the_export(name, shape, originals, round_trips, tmp_path):
    cases, logs, _ = round_trips
    removed, export, record, merged = cases[(name, shape)]
    assert record["mergekit"] == {"expressible": True, "config": "mergekit.yaml"}
    assert json.loads((export / "pruning.json").read_text())["mergekit"] == record["mergekit"]
    assert (merged / "config.json").exists(), logs[(name, shape)]
    loaded, info = tf.AutoModelForCausalLM.from_pretrained(merged, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    assert type(loaded).__name__ == "LlamaForCausalLM"
    model, _ = originals[name]
    total = model.config.num_hidden_layers
    assert loaded.config.num_hidden_layers == total - len(removed) == record["num_layers"]
    vocab = model.config.vocab_size
    ids = random_batch([12, 12], seed=5, vocab=vocab)["input_ids"]
    rebuilt = logits(merged, ids)
    assert torch.equal(rebuilt, logits(export, ids))  # the project's export, bit for bit
    if name == "here":
        # the depthlab model in memory (not its saved plain-Llama form) exports the same model
        direct = export_pruned(model, removed, tmp_path / "direct")
        assert direct["exported_as"] == "LlamaForCausalLM"
        torch.testing.assert_close(rebuilt, logits(tmp_path / "direct", ids), rtol=0, atol=1e-6)
    # removal's definition: the full model (its weights rounded to the export's precision, not
    # its rotary buffers; computing in float32) with the removed layers skipped by a hook
    dtype = torch.bfloat16 if (name, shape) == ("smollm2", "gaps") else torch.float32
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for param in rounded.parameters():
            param.copy_(param.to(dtype).float())
    reference = skip_reference(rounded, removed, ids)
    torch.testing.assert_close(rebuilt, reference, rtol=0, atol=1e-5)


def test_qwen2_layer_types_are_not_expressible(round_trips):
    """Qwen2 slices config.layer_types with the layers; mergekit sets num_hidden_layers only, so
    its output of the same passthrough does not load as the export does: no config is written."""
    _, logs, root = round_trips
    model = qwen2_model()
    record = export_pruned(model, (1, 2), root / "qwen2_export", mergekit_source="org/q")
    assert record["mergekit"]["expressible"] is False
    assert "layer_types" in record["mergekit"]["reason"]
    assert "max_window_layers" in record["mergekit"]["reason"]
    assert not (root / "qwen2_export" / "mergekit.yaml").exists()
    merged = root / "qwen2_merged"
    if (merged / "config.json").exists():  # written: transformers refuses it, or it differs
        config = json.loads((merged / "config.json").read_text())
        try:
            tf.AutoModelForCausalLM.from_pretrained(merged)
        except ValueError as error:
            assert "layer_types" in str(error)
        else:
            assert len(config["layer_types"]) != config["num_hidden_layers"]
    else:
        assert "layer_types" in logs["qwen2"]


def test_gemma3_layer_types_are_not_expressible(tmp_path):
    model = make("gemma3_softcap")
    record = export_pruned(model, (1,), tmp_path, mergekit_source="org/g")
    assert record["mergekit"]["expressible"] is False
    assert "layer_types" in record["mergekit"]["reason"]
    assert not (tmp_path / "mergekit.yaml").exists()


@pytest.mark.parametrize("scheme", DEPTHLAB_SCHEMES)
def test_depthlab_architectures_say_why_and_write_no_config(scheme, tmp_path):
    """An original mergekit cannot read (depthlab_llama): no mergekit.yaml, the reason recorded
    in pruning.json; the export itself is still written."""
    model = depthlab_model(scheme, layers=4)
    record = export_pruned(model, (1,), tmp_path, mergekit_source="results/x/models/m")
    assert record["mergekit"]["expressible"] is False
    reason = record["mergekit"]["reason"]
    assert "depthlab_llama" in reason and scheme in reason
    if scheme == "deepnorm":
        assert "o_proj/down_proj" in reason
    assert not (tmp_path / "mergekit.yaml").exists()
    assert json.loads((tmp_path / "pruning.json").read_text())["mergekit"] == record["mergekit"]
    assert (tmp_path / "config.json").exists()


def test_a_caller_marks_a_sub_layer_export_and_exports_json_carries_it(originals, tmp_path):
    """The hook for removals that are not whole layers: the caller's reason replaces the config;
    export_choices copies each export's mergekit record into exports.json's entries."""
    model, folder = originals["smollm2"]
    record = export_pruned(
        model, (3,), tmp_path / "unit", mergekit_source=str(folder), obstacle=SUBLAYER_OBSTACLE
    )
    assert record["mergekit"] == {"expressible": False, "reason": SUBLAYER_OBSTACLE}
    assert not (tmp_path / "unit" / "mergekit.yaml").exists()

    choices = [
        {"strategy": s, "metric": "val_loss", "healed": False, "n": n}
        for s, n in (("angular", 2), ("deepest", 0))
    ]
    auto = {"num_layers": SMOLLM2_LAYERS, "choices": choices}
    items = [
        {"strategy": "angular", "metric": "val_loss"},
        {"strategy": "deepest", "metric": "val_loss"},
    ]
    exports = export_choices(
        model, None, auto, {("angular", 2): (4, 5)}, items, tmp_path / "out", str(folder)
    )
    assert exports[0]["mergekit"] == {"expressible": True, "config": "mergekit.yaml"}
    assert (tmp_path / "out" / exports[0]["folder"] / "mergekit.yaml").exists()
    assert exports[1]["folder"] is None and "mergekit" not in exports[1]
    post_ln = depthlab_model("post_ln", layers=4)
    auto = {"num_layers": 4, "choices": choices}
    (export,) = export_choices(
        post_ln, None, auto, {("angular", 2): (1, 2)}, items[:1], tmp_path / "d", "m"
    )
    assert export["mergekit"]["expressible"] is False
    assert "depthlab_llama" in export["mergekit"]["reason"]
