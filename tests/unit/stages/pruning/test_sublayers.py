"""Sub-layer pruning: removing both units of a layer equals removing the layer (pruned_view) in
every family; removing one unit equals the layer computed by hand without that branch (in every
norm scheme of the registry, Peri-LN's output norms included, and the search's candidate losses
with it); the search's first two steps equal a brute force over units removed by module
replacement and scored with full logits; unit parameter counts equal direct counts by parameter
name; bad settings rejected naming the key."""

import copy

import pytest
import torch
import torch.nn.functional as F
from depthlab.core import norm_schemes
from depthlab.core.errors import ConfigError, PruningError, UnsupportedModelError
from depthlab.models.architectures import adapt
from depthlab.settings.pruning import check_sublayer_settings, validate_pruning_settings
from depthlab.stages.pruning.layer_removal import pruned_view
from depthlab.stages.pruning.sublayers import (
    candidate_losses,
    decoder_params,
    layer_params,
    removed_sublayers,
    sublayer_path,
    sublayer_table,
    unit_params,
    units_label,
    units_loss,
)
from test_pruning import FAMILIES, make, markov_tokens
from tiny_models import random_batch

torch.set_num_threads(1)
# every norm scheme of the registry (test_pruning.FAMILIES holds them) and the hub layouts
ALL_FAMILIES = (*FAMILIES, "gemma3_softcap", "olmo2", "opt_post_ln", "gpt_neox_sequential")
SCHEMES = norm_schemes.names()


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_removing_both_units_equals_removing_the_layer(family):
    model = make(family)
    ids = random_batch([12, 12], seed=3)["input_ids"]
    full = logits(model, ids)
    num_layers = adapt(model).num_layers
    for layers in [(0,), (num_layers - 2,), (0, 2)]:
        units = [(layer, kind) for layer in layers for kind in ("attn", "mlp")]
        with pruned_view(model, layers) as view:
            reference = logits(view, ids)
        assert not torch.allclose(reference, full, atol=1e-4)  # the removal matters
        with removed_sublayers(model, units):
            removed = logits(model, ids)
        torch.testing.assert_close(removed, reference, rtol=1e-5, atol=1e-5)
        # one unit alone is neither the full model nor the layer's removal
        with removed_sublayers(model, units[:1]):
            half = logits(model, ids)
        assert not torch.allclose(half, full, atol=1e-4)
        assert not torch.allclose(half, reference, atol=1e-4)
    # the hooks are gone
    torch.testing.assert_close(logits(model, ids), full, rtol=0, atol=0)


def _replace_layer_output(model, layer, compute):
    """A hook replacing layer `layer`'s output by compute(layer, its input) (on the whole layer;
    the sub-layer code is not used); returns its handle."""
    block = adapt(model).layers[layer]

    def hook(module, args, kwargs, output):
        hidden = args[0] if args else kwargs["hidden_states"]
        new = compute(module, hidden)
        return (new, *output[1:]) if isinstance(output, tuple) else new

    return block.register_forward_hook(hook, with_kwargs=True)


# the layer without its attention, computed by hand from the layer's own modules
HAND_WITHOUT_ATTENTION = {
    "llama": lambda m, h: h + m.mlp(m.post_attention_layernorm(h)),
    "gemma3_softcap": lambda m, h: (
        h + m.post_feedforward_layernorm(m.mlp(m.pre_feedforward_layernorm(h)))
    ),
    "gpt2": lambda m, h: h + m.mlp(m.ln_2(h)),
}  # depthlab's schemes: hand_depthlab_layer below


@pytest.mark.parametrize("family", sorted(HAND_WITHOUT_ATTENTION))
def test_removing_attention_equals_the_layer_by_hand(family):
    model = make(family)
    ids = random_batch([10, 10], seed=4)["input_ids"]
    full = logits(model, ids)
    layer = 1
    handle = _replace_layer_output(model, layer, HAND_WITHOUT_ATTENTION[family])
    try:
        reference = logits(model, ids)
    finally:
        handle.remove()
    assert not torch.allclose(reference, full, atol=1e-4)
    with removed_sublayers(model, [(layer, "attn")]):
        removed = logits(model, ids)
    torch.testing.assert_close(removed, reference, rtol=1e-5, atol=1e-5)


def hand_depthlab_layer(m, h, kwargs, skip=None):
    """A depthlab decoder layer `m` on `h`, written out from its modules with the formulas of
    depthlab.models.modeling_depthlab's docstring, its `skip` sub-layer ("attn", "mlp") left
    out: the stream passes that sub-layer unchanged (a Post-LN layer's norm after it included)."""
    assert m.placement in ("pre", "post", "peri"), f"no hand-written layer for {m.placement}"
    attention_kwargs = {k: v for k, v in kwargs.items() if k != "hidden_states"}

    def attention(x):
        return m.self_attn(hidden_states=x, **attention_kwargs)[0]

    if m.placement == "post":  # N(s h + F(h)); DeepNorm's s = alpha
        s = m.residual_scale
        if skip != "attn":
            h = m.input_layernorm(s * h + attention(h))
        if skip != "mlp":
            h = m.post_attention_layernorm(s * h + m.mlp(h))
        return h
    scale = m.norm_output_scale  # LNS: 1/sqrt(l), else 1
    if skip != "attn":
        update = attention(m.input_layernorm(h) * scale)
        if m.placement == "peri":
            update = m.attention_output_norm(update)
        h = h + update
    if skip != "mlp":
        update = m.mlp(m.post_attention_layernorm(h) * scale)
        if m.placement == "peri":
            update = m.mlp_output_norm(update)
        h = h + update
    return h


def _hand_logits(model, layer, skip, ids):
    """Logits with decoder layer `layer` replaced by hand_depthlab_layer (sublayers.py unused)."""
    block = adapt(model).layers[layer]

    def hook(module, args, kwargs, output):
        hidden = args[0] if args else kwargs["hidden_states"]
        new = hand_depthlab_layer(module, hidden, kwargs, skip)
        return (new, *output[1:]) if isinstance(output, tuple) else new

    handle = block.register_forward_hook(hook, with_kwargs=True)
    try:
        return logits(model, ids)
    finally:
        handle.remove()


def _mean_loss(out, targets) -> float:
    return float(F.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1)))


# a depthlab layer's attention unit by parameter name prefix (the rest of the layer is the MLP's):
# the attention, the norm before it (Post-LN: after it) and Peri-LN's norm of its output
DEPTHLAB_ATTENTION_PREFIXES = ("self_attn.", "input_layernorm.", "attention_output_norm.")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_removing_one_sublayer_equals_the_layer_by_hand_in_every_scheme(scheme):
    """Every scheme of the registry: removing the attention (resp. MLP) unit of each layer gives
    the logits of the layer written by hand without that sub-layer; one search step's candidate
    losses (shared prefix) are those logits' losses, and its removed parameters a direct count."""
    model = make(f"depthlab_{scheme}")
    adapter = adapt(model)
    window = torch.as_tensor(markov_tokens(200, seed=2)[:36], dtype=torch.long).reshape(2, 18)
    ids, targets = window[:, :-1], window[:, 1:]
    full = logits(model, ids)
    # the hand-written layer is the model's own: nothing skipped, the full logits
    torch.testing.assert_close(_hand_logits(model, 1, None, ids), full, rtol=1e-5, atol=1e-5)
    if scheme == "mix_ln":  # both placements of mix_ln are exercised
        assert adapter.post_ln_layers[0] and not adapter.post_ln_layers[-1]
    hand_losses = {}
    for layer in range(adapter.num_layers):
        for kind in ("attn", "mlp"):
            reference = _hand_logits(model, layer, kind, ids)
            assert not torch.allclose(reference, full, atol=1e-4)  # the sub-layer matters
            with removed_sublayers(model, [(layer, kind)]):
                removed = logits(model, ids)
            torch.testing.assert_close(removed, reference, rtol=1e-5, atol=1e-5)
            hand_losses[(layer, kind)] = _mean_loss(reference, targets)
    torch.testing.assert_close(logits(model, ids), full, rtol=0, atol=0)  # the hooks are gone
    (step,) = sublayer_path(model, [window], 1)
    assert set(step["candidates"]) == set(hand_losses)
    for unit, loss in step["candidates"].items():
        assert loss == pytest.approx(hand_losses[unit], rel=1e-5)
    block = adapter.layers[step["layer"]]
    expected = sum(
        p.numel()
        for name, p in block.named_parameters()
        if name.startswith(DEPTHLAB_ATTENTION_PREFIXES) == (step["kind"] == "attn")
    )
    assert step["removed_params"] == expected


def test_a_saved_peri_ln_checkpoint_is_pruned_like_the_model_it_saved(tmp_path):
    """The stage loads models from their folders: a Peri-LN checkpoint (custom code) loads with
    its scheme, so its units and their removal are the in-memory model's."""
    from depthlab.models.decoders import save_checkpoint
    from depthlab.models.loading import load_model

    model = make("depthlab_peri_ln")
    save_checkpoint(model, None, tmp_path)
    loaded = load_model(str(tmp_path)).eval()
    ids = random_batch([10, 10], seed=5)["input_ids"]
    units = [(0, "mlp"), (2, "attn")]
    with removed_sublayers(model, units):
        expected = logits(model, ids)
    with removed_sublayers(loaded, units):
        torch.testing.assert_close(logits(loaded, ids), expected, rtol=1e-5, atol=1e-5)
    for layer, kind in units:
        assert unit_params(loaded, layer, kind) == unit_params(model, layer, kind)


def test_a_placement_without_declared_units_is_refused_naming_it(monkeypatch):
    model = make("depthlab_peri_ln")
    monkeypatch.delitem(norm_schemes.SUBLAYER_UNITS, "peri")
    with pytest.raises(UnsupportedModelError, match=r"peri_ln: placement 'peri' declares no sub"):
        unit_params(model, 0, "attn")


class _ZeroAttention(torch.nn.Module):
    def forward(self, hidden_states, **kwargs):
        return torch.zeros_like(hidden_states), None


class _ZeroMLP(torch.nn.Module):
    def forward(self, hidden):
        return torch.zeros_like(hidden)


def brute_force_loss(model, units, windows) -> float:
    """Mean next-token loss from full logits with each unit's module swapped for one returning
    zeros (a Llama-style model: self_attn / mlp), restored afterwards."""
    layers = adapt(model).layers
    saved = []
    for layer, kind in units:
        name = "self_attn" if kind == "attn" else "mlp"
        saved.append((layers[layer], name, getattr(layers[layer], name)))
        setattr(layers[layer], name, _ZeroAttention() if kind == "attn" else _ZeroMLP())
    try:
        total, count = 0.0, 0
        with torch.no_grad():
            for window in windows:
                out = model(input_ids=window[:, :-1]).logits
                total += float(
                    F.cross_entropy(
                        out.reshape(-1, out.shape[-1]), window[:, 1:].reshape(-1), reduction="sum"
                    )
                )
                count += window[:, 1:].numel()
    finally:
        for block, name, module in saved:
            setattr(block, name, module)
    return total / count


def test_search_steps_equal_brute_force():
    model = make("llama")
    tokens = torch.as_tensor(markov_tokens(400), dtype=torch.long)
    windows = [tokens[:34].reshape(2, 17), tokens[100:134].reshape(2, 17)]
    path = sublayer_path(model, windows, 2)
    num_layers = adapt(model).num_layers
    units = [(layer, kind) for layer in range(num_layers) for kind in ("attn", "mlp")]
    first = {u: brute_force_loss(model, [u], windows) for u in units}
    best = min(units, key=lambda u: (first[u], u))
    assert (path[0]["layer"], path[0]["kind"]) == best
    assert path[0]["loss"] == pytest.approx(first[best], rel=1e-5)
    for unit, loss in path[0]["candidates"].items():
        assert loss == pytest.approx(first[unit], rel=1e-5)
    second = {u: brute_force_loss(model, [best, u], windows) for u in units if u != best}
    best2 = min(second, key=lambda u: (second[u], u))
    assert (path[1]["layer"], path[1]["kind"]) == best2
    assert path[1]["removed"] == tuple(sorted([best, best2]))
    assert path[1]["loss"] == pytest.approx(second[best2], rel=1e-5)
    # removed parameters: the removed units' parameters counted by name
    named = dict(adapt(model).layers[0].named_parameters())
    assert named  # a direct count below
    expected = sum(
        p.numel()
        for layer, kind in path[1]["removed"]
        for name, p in adapt(model).layers[layer].named_parameters()
        if name.startswith(
            ("self_attn.", "input_layernorm.")
            if kind == "attn"
            else ("mlp.", "post_attention_layernorm.")
        )
    )
    assert path[1]["removed_params"] == expected
    total = sum(p.numel() for block in adapt(model).layers for p in block.parameters())
    assert path[1]["removed_fraction"] == pytest.approx(expected / total)
    table = sublayer_table(path)
    assert list(table["removed"]) == [units_label([best]), units_label([best, best2])]
    assert list(table["val_loss"]) == [path[0]["loss"], path[1]["loss"]]
    assert list(table["search_loss"]) == list(table["val_loss"])  # ranked on these windows


def test_search_ranks_on_calibration_windows_and_scores_on_validation_windows():
    """With score_windows the path is chosen by the loss on `windows` (calibration, every
    position) and each chosen set is scored on score_windows (validation, its loss_tokens)."""
    model = make("llama")
    tokens = torch.as_tensor(markov_tokens(600), dtype=torch.long)
    calibration = [tokens[:34].reshape(2, 17), tokens[100:134].reshape(2, 17)]
    validation = [tokens[300:351].reshape(3, 17)]
    path = sublayer_path(model, calibration, 2, loss_tokens=6, score_windows=validation)
    units = [(layer, kind) for layer in range(adapt(model).num_layers) for kind in ("attn", "mlp")]
    first = {u: brute_force_loss(model, [u], calibration) for u in units}
    best = min(units, key=lambda u: (first[u], u))
    second = {u: brute_force_loss(model, [best, u], calibration) for u in units if u != best}
    best2 = min(second, key=lambda u: (second[u], u))
    assert [r["removed"] for r in path] == [(best,), tuple(sorted([best, best2]))]
    assert path[0]["loss"] == pytest.approx(first[best], rel=1e-5)
    for record in path:  # the validation score: the last 6 positions of each window, by hand
        assert record["val_loss"] == pytest.approx(
            units_loss(model, record["removed"], validation, loss_tokens=6), rel=1e-6
        )
        assert record["val_loss"] != pytest.approx(record["loss"], rel=1e-3)
    table = sublayer_table(path)
    assert list(table["search_loss"]) == [r["loss"] for r in path]
    assert list(table["val_loss"]) == [r["val_loss"] for r in path]


@pytest.mark.parametrize("family", ["gpt2", "opt_post_ln", "depthlab_deepnorm", "gemma3_softcap"])
def test_shared_prefix_losses_equal_a_full_pass_per_set(family):
    """candidate_losses (one pass per batch, each candidate rerun from its layer) against
    units_loss (the whole model run once per set) on top of a removed set."""
    model = make(family)
    tokens = torch.as_tensor(markov_tokens(300), dtype=torch.long)
    windows = [tokens[:26].reshape(2, 13), tokens[50:89].reshape(3, 13)]
    removed = [(1, "mlp")]
    candidates = [(0, "attn"), (1, "attn"), (2, "mlp"), (2, "attn")]
    shared = candidate_losses(model, removed, candidates, windows, loss_tokens=5)
    for unit in candidates:
        alone = units_loss(model, [*removed, unit], windows, loss_tokens=5)
        assert shared[unit] == pytest.approx(alone, rel=1e-6)
    assert len(set(shared.values())) == len(candidates)  # the candidates differ


def test_ties_go_to_the_smallest_unit():
    model = make("llama")
    path = sublayer_path(model, [], 2, loss_of=lambda units: 1.0)
    assert [(r["layer"], r["kind"]) for r in path] == [(0, "attn"), (0, "mlp")]


# each family's attention unit by parameter name prefix (the rest of the layer is the MLP's)
ATTENTION_PREFIXES = {
    "llama": ("self_attn.", "input_layernorm."),
    "qwen2_sliding": ("self_attn.", "input_layernorm."),
    **{f"depthlab_{scheme}": DEPTHLAB_ATTENTION_PREFIXES for scheme in SCHEMES},
    "gpt2": ("attn.", "ln_1."),
    "opt": ("self_attn.", "self_attn_layer_norm."),
    "opt_post_ln": ("self_attn.", "self_attn_layer_norm."),
    "gpt_neox": ("attention.", "input_layernorm."),
    "gpt_neox_sequential": ("attention.", "input_layernorm."),
    "gemma3_softcap": ("self_attn.", "input_layernorm.", "post_attention_layernorm."),
    "olmo2": ("self_attn.", "post_attention_layernorm."),
}


@pytest.mark.parametrize("family", sorted(ATTENTION_PREFIXES))
def test_unit_parameters_equal_a_direct_count(family):
    model = make(family)
    blocks = adapt(model).layers
    for layer, block in enumerate(blocks):
        named = dict(block.named_parameters())
        attention = sum(
            p.numel() for n, p in named.items() if n.startswith(ATTENTION_PREFIXES[family])
        )
        everything = sum(p.numel() for p in named.values())
        assert 0 < attention < everything
        assert unit_params(model, layer, "attn") == attention
        assert unit_params(model, layer, "mlp") == everything - attention
        assert layer_params(model, layer) == everything
    assert decoder_params(model) == sum(p.numel() for b in blocks for p in b.parameters())


def test_bad_settings_are_refused_naming_the_key(test_config):
    from depthlab.config import resolve

    (spec,) = resolve(test_config).jobs("prune_model").values()
    assert spec["sublayer"] == test_config["pruning"]["sublayer"]
    validate_pruning_settings(spec, 4)
    check_sublayer_settings({"enabled": False}, 4)
    with pytest.raises(ValueError, match=r"^pruning\.sublayer\.max_units: an integer in 1\.\.7"):
        validate_pruning_settings({**spec, "sublayer": {"enabled": True, "max_units": 8}}, 4)
    with pytest.raises(ValueError, match=r"^pruning\.sublayer\.max_units"):
        check_sublayer_settings({"enabled": True}, 4)
    with pytest.raises(ValueError, match=r"^pruning\.sublayer\.enabled: missing"):
        check_sublayer_settings({"max_units": 2}, 4)  # a per_model override's alone
    with pytest.raises(PruningError, match=r"sub-layer steps 9"):
        sublayer_path(make("llama"), [], 9, loss_of=lambda units: 0.0)
    config = copy.deepcopy(test_config)
    config["pruning"]["sublayer"] = {"enabled": True, "max_units": 0}
    with pytest.raises(ConfigError, match=r"pruning\.sublayer\.max_units"):
        resolve(config)
    config["pruning"]["sublayer"] = {"enabled": True}
    with pytest.raises(ConfigError, match=r"pruning\.sublayer"):
        resolve(config)
    # a per-model override is named where it sets the bad value (the lns model has 4 layers)
    config["pruning"]["sublayer"] = {"enabled": False}
    config["pruning"]["per_model"] = {"lns": {"sublayer": {"enabled": True, "max_units": 50}}}
    with pytest.raises(ConfigError, match=r"pruning\.per_model\.lns\.sublayer\.max_units"):
        resolve(config)
