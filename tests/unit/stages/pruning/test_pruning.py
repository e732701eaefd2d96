"""Layer removal: the pruned view and the exported folder equal the full model with the removed
layers skipped by a hook (an independent reference), on several architectures; the exported
folder's mergekit.yaml rebuilds its kept layers; the prefix-cached, chunked-head loss sweep equals
rebuilding every variant with full logits; greedy, auto depth, the angular block choice and the
ShortGPT block-influence choice against independent computations; the greedy cap, the loss on
the last positions of each window and the per-window losses against independent computations;
bad settings rejected naming the key; the stage script end to end on a tiny model."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import transformers as tf
import yaml
from depthlab.core.errors import PruningError
from depthlab.models.architectures import adapt
from depthlab.stages.pruning.blocks import (
    angular_block_choice,
    angular_removal,
    block_choice_table,
    deepest_removal,
)
from depthlab.stages.pruning.layer_removal import (
    config_updates,
    export_pruned,
    head_losses,
    kept_ranges,
    model_loss,
    prune_copy,
    pruned_view,
)
from depthlab.stages.pruning.strategies import (
    LossSweep,
    auto_depth,
    block_influence_removal,
    block_influence_table,
    check_prunable,
    greedy_path,
    greedy_steps,
    read_cos_adjacent,
    validation_windows,
)
from depthlab.stages.pruning.tables import removed_label
from script_runs import run_stage_script
from tiny_models import DEPTHLAB_SCHEMES, VOCAB, build, causal_lm, llama, random_batch

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[4]
SCRIPTS = REPO / "workflow_scripts"
# the hub layouts and every norm scheme of the registry
FAMILIES = (
    "llama",
    "qwen2_sliding",
    "gpt2",
    "opt",
    "gpt_neox",
    *(f"depthlab_{scheme}" for scheme in DEPTHLAB_SCHEMES),
)


@pytest.fixture(scope="module")
def pruning_spec(test_config):
    """The prune_model spec config/test.yaml resolves to (schema defaults applied)."""
    from depthlab.config import resolve

    (spec,) = resolve(test_config).jobs("prune_model").values()
    return spec


def make(family: str):
    if family == "qwen2_sliding":
        # alternating attention types: removal must slice config.layer_types with the layers
        return causal_lm(
            tf.Qwen2Config, tf.Qwen2ForCausalLM, num_hidden_layers=4, use_sliding_window=True,
            sliding_window=3, layer_types=["full_attention", "sliding_attention"] * 2,
        )  # fmt: skip
    if family == "gemma3_softcap":
        # Gemma 3's sandwich norms and local/global layers; a strong final-logit softcap, which
        # the loss must apply as the model's forward does
        return causal_lm(
            tf.Gemma3TextConfig, tf.Gemma3ForCausalLM, num_hidden_layers=4, head_dim=8,
            sliding_window=4, layer_types=["sliding_attention", "full_attention"] * 2,
            final_logit_softcapping=2.0,
        )  # fmt: skip
    return build(family)


def skip_reference(model, removed, ids):
    """Logits of the full model with each removed layer replaced by the identity (a hook
    returning the layer's input): the definition of removal, computed without depthlab.stages.pruning.strategies."""
    layers = adapt(model).layers
    handles = []
    for index in removed:

        def identity(module, args, kwargs, output):
            hidden = args[0] if args else kwargs["hidden_states"]
            return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

        handles.append(layers[index].register_forward_hook(identity, with_kwargs=True))
    try:
        with torch.no_grad():
            return model(input_ids=ids).logits
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("family", FAMILIES)
def test_pruned_view_and_copy_equal_hook_skip(family):
    model = make(family)
    ids = random_batch([12, 12], seed=1)["input_ids"]
    with torch.no_grad():
        full = model(input_ids=ids).logits
    layer_types = list(getattr(model.config, "layer_types", None) or [])
    for removed in [(1,), (0, 2)]:
        reference = skip_reference(model, removed, ids)
        assert not torch.allclose(reference, full, atol=1e-4)  # the removal matters
        with pruned_view(model, removed) as view:
            kept = [l for l in range(adapt(model).num_layers + len(removed)) if l not in removed]
            assert view.config.num_hidden_layers == len(kept)
            assert adapt(view).num_layers == len(kept)
            if layer_types:
                assert list(view.config.layer_types) == [layer_types[l] for l in kept]
            with torch.no_grad():
                viewed = view(input_ids=ids).logits
        torch.testing.assert_close(viewed, reference, rtol=1e-5, atol=1e-6)
        copied = prune_copy(model, removed)
        with torch.no_grad():
            torch.testing.assert_close(
                copied(input_ids=ids).logits, reference, rtol=1e-5, atol=1e-6
            )
        # the view left the model as it was
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids=ids).logits, full, rtol=0, atol=0)
        if layer_types:
            assert list(model.config.layer_types) == layer_types


@pytest.mark.parametrize("family", ["llama", "gpt2", "depthlab_mix_ln"])
def test_view_generates_with_renumbered_cache(family):
    """Generation with a KV cache indexes the cache by layer_idx: the view must renumber."""
    model = make(family)
    ids = random_batch([6], seed=2)["input_ids"]
    copied = prune_copy(model, (1,))
    with pruned_view(model, (1,)) as view, torch.no_grad():
        indices = [
            m.layer_idx
            for layer in adapt(view).layers
            for m in layer.modules()
            if isinstance(getattr(m, "layer_idx", None), int)
        ]
        assert sorted(set(indices)) == list(range(adapt(view).num_layers))
        generated = view.generate(input_ids=ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected = copied.generate(input_ids=ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(generated, expected)


@pytest.mark.parametrize("family", ["llama", "gpt2", "opt", "depthlab_deepnorm", "depthlab_lns"])
def test_export_loads_without_missing_weights(family, tmp_path):
    from transformers import AutoModelForCausalLM

    model = make(family)
    ids = random_batch([10], seed=3)["input_ids"]
    record = export_pruned(model, (1,), tmp_path)
    assert record["removed_layers"] == [1] and record["num_layers"] == 2
    loaded, info = AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    assert loaded.config.num_hidden_layers == 2
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.eval()(input_ids=ids).logits,
            skip_reference(model, (1,), ids),
            rtol=1e-4,
            atol=1e-5,
        )
    if family == "depthlab_lns":
        assert type(loaded).__name__ == "LlamaForCausalLM"  # LNS folded, kept layers' depth


def test_export_of_reference_deepnorm_keeps_its_constant_alpha(tmp_path):
    """The LNS reference DeepNorm's alpha does not depend on depth: the export must not rescale
    the kept layers to the DeepNet alpha of the pruned depth."""
    from depthlab.models.decoders import build_model, make_config
    from tiny_models import FFN, HEADS, HIDDEN, LAYERS, POSITIONS
    from transformers import AutoModelForCausalLM

    config = make_config(
        dict(
            hidden_size=HIDDEN,
            num_layers=LAYERS,
            num_heads=HEADS,
            intermediate_size=FFN,
            deepnorm_variant="lns_reference",
        ),
        "deepnorm",
        vocab_size=VOCAB,
        max_positions=POSITIONS,
    )
    config._attn_implementation = "eager"
    model = build_model(config, 0).eval()
    ids = random_batch([10], seed=3)["input_ids"]
    export_pruned(model, (1,), tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(input_ids=ids).logits, skip_reference(model, (1,), ids), rtol=1e-4, atol=1e-5
        )


def deep_llama(layers: int = 8, seed: int = 0):
    # updates large enough that adjacent states differ clearly
    return llama(layers, seed, initializer_range=0.2)


def test_mergekit_config_rebuilds_the_kept_layers(tmp_path):
    from safetensors.torch import load_file

    L = 8
    model = deep_llama(L)
    original = model.state_dict()
    influence_set = block_influence_removal(np.random.default_rng(3).uniform(0.5, 1, L), 3)
    sets = [(3, 4, 5), (0,), (L - 1,), (0, 2, 5, L - 1), (1, 3, 6), influence_set]
    for index, removed in enumerate(sets):
        out = tmp_path / f"export{index}"
        revision = "abc123" if index == 1 else None
        record = export_pruned(model, removed, out, mergekit_source="org/model", revision=revision)
        text = (out / "mergekit.yaml").read_text()
        assert "END-EXCLUSIVE" in text.splitlines()[1]  # the convention, stated at the top
        config = yaml.safe_load(text)
        assert config["merge_method"] == "passthrough" and config["dtype"] == "float32"
        kept, ends = [], []
        for piece in config["slices"]:
            (source,) = piece["sources"]
            assert source["model"] == ("org/model@abc123" if revision else "org/model")
            start, end = source["layer_range"]
            assert start < end and (not ends or ends[-1] < start)  # maximal runs, in order
            kept += range(start, end)
            ends.append(end)
        assert kept == [l for l in range(L) if l not in removed]
        assert [tuple(r) for r in kept_ranges(removed, L)] == [
            tuple(p["sources"][0]["layer_range"]) for p in config["slices"]
        ]
        exported = json.loads((out / "config.json").read_text())
        assert exported["num_hidden_layers"] == len(kept) == record["num_layers"]
        # layer k of the export is layer kept[k] of the original, as the slices say
        weights = load_file(out / "model.safetensors")
        for k, layer in enumerate(kept):
            name = "self_attn.q_proj.weight"
            assert torch.equal(
                weights[f"model.layers.{k}.{name}"], original[f"model.layers.{layer}.{name}"]
            )
    # no source: no mergekit.yaml (speed's temporary exports)
    export_pruned(model, (1,), tmp_path / "plain")
    assert not (tmp_path / "plain" / "mergekit.yaml").exists()


def test_config_updates_slice_and_recount():
    config = tf.Qwen2Config(
        num_hidden_layers=6,
        max_window_layers=3,
        layer_types=["full_attention"] * 3 + ["sliding_attention"] * 3,
    )
    updates = config_updates(config, [0, 2, 4, 5], 6)
    assert updates["num_hidden_layers"] == 4
    assert updates["max_window_layers"] == 2  # kept layers 0 and 2 lie below the old boundary
    assert updates["layer_types"] == [
        "full_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
    ]


# ------------------------------------------------------------------ loss sweep with reuse


def full_logits_loss(model, windows) -> float:
    """The loss as computed before the head was chunked: the model's own [B, T, vocab] logits,
    one cross-entropy per window."""
    total, count = 0.0, 0
    with torch.no_grad():
        for window in windows:
            logits = model(input_ids=window[:, :-1]).logits
            total += float(
                F.cross_entropy(
                    logits.float().reshape(-1, logits.shape[-1]),
                    window[:, 1:].reshape(-1),
                    reduction="sum",
                )
            )
            count += window[:, 1:].numel()
    return total / count


def rebuild_loss(model, removed, windows) -> float:
    """The sweep's oracle, without reuse: copy the pruned model and run it on every window."""
    return full_logits_loss(prune_copy(model, removed), windows)


def markov_tokens(count: int, vocab: int = VOCAB, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    table = rng.integers(0, vocab, size=(vocab, 3))
    tokens = [0]
    for _ in range(count - 1):
        tokens.append(table[tokens[-1], rng.integers(3)])
    return np.asarray(tokens, dtype=np.uint16)


@pytest.mark.parametrize("family", ["llama", "gpt2", "opt", "depthlab_post_ln", "gemma3_softcap"])
def test_sweep_equals_rebuilding_every_variant(family):
    model = make(family)
    windows = validation_windows(markov_tokens(3000), 6, 16, 4)
    sets = [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2)]
    sweep = LossSweep(model, windows)
    got = sweep.losses(sets)
    expected = [rebuild_loss(model, s, windows) for s in sets]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
    assert len(set(np.round(got, 6))) == len(sets)  # every variant differs
    L = adapt(model).num_layers
    naive = sum((L - len(s)) for s in sets) * len(windows)
    assert sweep.layer_calls < naive
    # states cached across calls (greedy steps) or none at all: the same losses
    uncached = LossSweep(model, windows, cache_mib=0)
    for part in (sets[:3], sets[3:]):
        np.testing.assert_allclose(uncached.losses(part), sweep.losses(part), rtol=1e-6)
    # memoised: asking again runs nothing
    calls = sweep.layer_calls
    assert sweep.losses([(1,)]) == [got[2]] and sweep.layer_calls == calls


@pytest.mark.parametrize("family", ["llama", "opt", "gemma3_softcap"])
def test_chunked_head_loss_equals_full_logits(family):
    """Several chunks of positions per batch: the same loss as full logits, and never more than
    the chunk's logits at once."""
    model = make(family)
    windows = validation_windows(markov_tokens(2000, seed=2), 6, 16, 4)
    chunk = 5 * VOCAB  # 5 positions per chunk, 13 chunks per 4 x 16 batch
    shapes = []
    handle = adapt(model).lm_head.register_forward_hook(
        lambda module, args, output: shapes.append(tuple(output.shape))
    )
    try:
        loss = model_loss(model, windows, chunk_elements=chunk)
        sweep = LossSweep(model, windows, chunk_elements=chunk).losses([(), (1,)])
    finally:
        handle.remove()
    assert max(int(np.prod(s)) for s in shapes) <= chunk
    assert len(shapes) >= 2 * 13 * len(windows)
    reference = full_logits_loss(model, windows)
    assert loss == pytest.approx(reference, rel=1e-6)
    np.testing.assert_allclose(sweep, [reference, rebuild_loss(model, (1,), windows)], rtol=1e-6)


def test_greedy_first_step_is_the_best_single_layer():
    model = build("llama")
    windows = validation_windows(markov_tokens(3000, seed=1), 6, 16, 3)
    sweep = LossSweep(model, windows)
    path = greedy_path(sweep.losses, 3, 2)
    singles = [rebuild_loss(model, (l,), windows) for l in range(3)]
    assert path[0]["removed"] == (int(np.argmin(singles)),)
    assert path[0]["loss"] == pytest.approx(min(singles), rel=1e-6)
    # step 2 extends step 1 by the best remaining layer
    pairs = {
        l: rebuild_loss(model, tuple(sorted(path[0]["removed"] + (l,))), windows)
        for l in range(3)
        if l not in path[0]["removed"]
    }
    assert path[1]["layer"] == min(pairs, key=pairs.get)


def test_greedy_cap_keeps_the_path_and_scores_fewer_sets():
    """The path capped at n = 3 is the uncapped path's first three steps; a fresh sweep scores
    exactly the candidates of those steps, L + (L - 1) + (L - 2) sets instead of all L - 1."""
    L = 8
    model = deep_llama(L, seed=2)
    windows = validation_windows(markov_tokens(3000, seed=4), 4, 16, 2)
    full_sweep, capped_sweep = LossSweep(model, windows), LossSweep(model, windows)
    full = greedy_path(full_sweep.losses, L, greedy_steps(range(1, L), None))
    capped = greedy_path(capped_sweep.losses, L, greedy_steps(range(1, L), 3))
    assert [r["n"] for r in full] == list(range(1, L)) and [r["n"] for r in capped] == [1, 2, 3]
    assert [r["removed"] for r in capped] == [r["removed"] for r in full[:3]]
    assert len(capped_sweep.memo) == L + (L - 1) + (L - 2)
    assert len(full_sweep.memo) == sum(L - k + 1 for k in range(1, L))
    # the cap never grows the path beyond the grid
    assert greedy_steps([1, 2, 4], 6) == 4 and greedy_steps([1, 2, 4], 2) == 2


def old_head_loss_sum(adapter, hidden, targets, chunk_elements):
    """head_loss_sum as it was before loss_tokens (a frozen copy): cross_entropy summed per chunk
    of positions over every position. loss_tokens null must give exactly these numbers."""
    rows = hidden.reshape(-1, hidden.shape[-1])
    flat = targets.reshape(-1)
    step = max(1, int(chunk_elements) // int(adapter.lm_head.weight.shape[0]))
    cap = getattr(adapter.model.config, "final_logit_softcapping", None)
    total = 0.0
    for start in range(0, rows.shape[0], step):
        logits = adapter.logits(rows[start : start + step]).float()
        if cap:
            logits = torch.tanh(logits / cap) * cap
        total += float(F.cross_entropy(logits, flat[start : start + step], reduction="sum"))
    return total


def last_positions_losses(model, windows, k):
    """Per window, the mean cross-entropy of the model's own full [B, T, vocab] logits over the
    last k target positions (k None: all), computed by hand."""
    per_window = []
    with torch.no_grad():
        for window in windows:
            logits = model(input_ids=window[:, :-1]).logits.double()
            targets = window[:, 1:]
            k_ = targets.shape[1] if k is None else k
            log_probs = logits[:, -k_:].log_softmax(-1)
            picked = log_probs.gather(-1, targets[:, -k_:, None])[..., 0]
            per_window += list((-picked).mean(1).numpy())
    return np.asarray(per_window)


@pytest.mark.parametrize("family", ["llama", "gemma3_softcap"])
def test_loss_tokens_scores_the_last_positions(family):
    model = make(family)
    adapter = adapt(model)
    windows = validation_windows(markov_tokens(2500, seed=5), 6, 16, 4)
    chunk = 3 * VOCAB  # chunks of 3 positions: they straddle the scored slice's ends
    sets = [(), (1,), (0, 2)]
    # null is today's loss, bit for bit: the frozen pre-change head on the same states (the
    # full model's last-layer outputs, which the sweep caches from one full pass)
    captured = {}
    handle = adapter.layers[-1].register_forward_hook(
        lambda m, a, out: captured.__setitem__("h", out[0] if isinstance(out, tuple) else out)
    )
    total = 0.0
    with torch.no_grad():
        for window in windows:
            adapter.backbone(input_ids=window[:, :-1], use_cache=False)
            total += old_head_loss_sum(adapter, captured["h"], window[:, 1:], chunk)
            assert head_losses(adapter, captured["h"], window[:, 1:], chunk)[0] == (
                old_head_loss_sum(adapter, captured["h"], window[:, 1:], chunk)
            )
    handle.remove()
    old = total / sum(w[:, 1:].numel() for w in windows)
    assert LossSweep(model, windows, chunk_elements=chunk).losses([()]) == [old]
    assert model_loss(model, windows, chunk_elements=chunk) == old
    assert model_loss(model, windows, chunk_elements=chunk, loss_tokens=16) == old
    unscored = LossSweep(model, windows, chunk_elements=chunk).losses(sets)
    for k in (1, 5):
        sweep = LossSweep(model, windows, chunk_elements=chunk, loss_tokens=k)
        for removed, loss, per_window in zip(sets, sweep.losses(sets), sweep.window_losses(sets)):
            expected = last_positions_losses(prune_copy(model, removed), windows, k)
            np.testing.assert_allclose(per_window, expected, rtol=1e-5)
            assert loss == pytest.approx(expected.mean(), rel=1e-5)
            assert loss != pytest.approx(unscored[sets.index(removed)], rel=1e-4)  # k matters
        assert sweep.scored_tokens == k * 6 and sweep.tokens == 16 * 6
        assert model_loss(model, windows, chunk_elements=chunk, loss_tokens=k) == pytest.approx(
            last_positions_losses(model, windows, k).mean(), rel=1e-5
        )
    # the head reads only the scored positions: k per window, in chunks
    read = []
    handle = adapter.lm_head.register_forward_hook(lambda m, a, out: read.append(out.shape[0]))
    LossSweep(model, windows, chunk_elements=chunk, loss_tokens=5).losses([()])
    handle.remove()
    assert sum(read) == 5 * 6
    with pytest.raises(PruningError, match=r"val\.loss_tokens: 17 scored positions"):
        LossSweep(model, windows, loss_tokens=17)


def test_window_losses_average_to_the_sweep_loss():
    """Each set's per-window losses (every window scores as many positions) average to its
    val loss, and equal the per-window mean computed from full logits."""
    model = make("opt")
    windows = validation_windows(markov_tokens(3000, seed=6), 7, 12, 3)  # a short last batch
    sweep = LossSweep(model, windows)
    sets = [(), (0,), (2,), (1, 2)]
    losses = sweep.losses(sets)
    for removed, loss, per_window in zip(sets, losses, sweep.window_losses(sets)):
        assert per_window.shape == (7,)
        # float32 chunk sums vs float64 sums of float32 positions: equal to float32 rounding
        assert per_window.mean() == pytest.approx(loss, rel=1e-6)
        np.testing.assert_allclose(
            per_window, last_positions_losses(prune_copy(model, removed), windows, None), rtol=1e-5
        )
    assert len({tuple(np.round(w, 6)) for w in sweep.window_losses(sets)}) == len(sets)


# ------------------------------------------------------------------ strategies


def test_block_choice_equals_independent_argmin():
    rng = np.random.default_rng(4)
    L = 9
    points = rng.normal(size=(L + 1, 5))
    unit = points / np.linalg.norm(points, axis=1, keepdims=True)
    distance = np.arccos(np.clip(unit @ unit.T, -1, 1)) / np.pi
    table = block_choice_table(distance, range(1, L))
    for n, l_star, d in table.itertuples(index=False):
        diagonal = np.array([distance[i, i + n] for i in range(L + 1 - n)])
        assert l_star == int(np.flatnonzero(diagonal == diagonal.min())[0])
        assert d == diagonal.min()
        assert angular_removal(distance, n) == tuple(range(l_star, l_star + n))
    tied = np.ones((5, 5))
    tied[1, 3] = tied[2, 4] = 0.1
    assert angular_block_choice(tied, 2) == (1, 0.1)  # ties: the smallest l


def test_block_influence_equals_independent_choice(tmp_path):
    """ShortGPT's choice from the analysis stage's cos_adjacent (measures.csv) equals lowest-n
    Block Influence computed here from hooked layer inputs in float64 over the non-pad tokens."""
    from depthlab.stages.analysis.measures import analyse

    L = 8
    model = deep_llama(L, seed=1)
    batch = random_batch([16, 11, 7, 16], seed=5)
    states = [None] * (L + 1)
    layers = model.model.layers
    handles = [
        layer.register_forward_pre_hook(
            lambda m, args, kwargs, l=l: states.__setitem__(
                l, args[0] if args else kwargs["hidden_states"]
            ),
            with_kwargs=True,
        )
        for l, layer in enumerate(layers)
    ]
    handles.append(
        layers[-1].register_forward_hook(
            lambda m, args, output: states.__setitem__(
                L, output[0] if isinstance(output, tuple) else output
            )
        )
    )
    with torch.no_grad():
        model(**batch)
    for handle in handles:
        handle.remove()
    real = batch["attention_mask"].bool().numpy()
    cos = []
    for l in range(L):
        x, y = states[l].double().numpy()[real], states[l + 1].double().numpy()[real]
        cos.append(
            np.mean((x * y).sum(-1) / (np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1)))
        )
    influence = 1 - np.asarray(cos)
    assert len(set(np.round(influence, 6))) == L  # no near tie: the order is well defined

    result = analyse(adapt(model), [batch], logit_lens=False)
    result.to_frame(model="m", text_set="val").to_csv(tmp_path / "measures.csv", index=False)
    read = read_cos_adjacent(tmp_path / "measures.csv", L)
    np.testing.assert_allclose(read, cos, rtol=0, atol=1e-9)
    order = np.argsort(influence)
    for n in range(1, L):
        assert block_influence_removal(read, n) == tuple(sorted(int(l) for l in order[:n]))
    table = block_influence_table(read)
    assert list(table["layer"]) == list(range(L))
    assert list(table.sort_values("rank")["layer"]) == [int(l) for l in order]
    np.testing.assert_allclose(table["block_influence"], influence, atol=1e-9)
    # ties: the lower layer first, so each set extends the previous one
    tied = np.array([0.9, 0.5, 0.9, 0.9, 0.7])
    assert [block_influence_removal(tied, n) for n in (1, 2, 3)] == [(0,), (0, 2), (0, 2, 3)]
    # bad input names the file
    frame = pd.read_csv(tmp_path / "measures.csv")
    frame[~((frame["measure"] == "cos_adjacent") & (frame["layer"] == 3))].to_csv(
        tmp_path / "short.csv", index=False
    )
    with pytest.raises(PruningError, match=r"short\.csv: cos_adjacent rows for layers"):
        read_cos_adjacent(tmp_path / "short.csv", L)


def test_deepest_keeps_the_last_layer():
    assert deepest_removal(12, 3) == (8, 9, 10)
    assert deepest_removal(12, 11) == tuple(range(0, 11))
    with pytest.raises(PruningError):
        deepest_removal(12, 12)


def test_auto_depth_on_a_hand_made_table():
    table = pd.DataFrame(
        {
            "n": [0, 1, 2, 3, 4, 5],
            "val_loss": [2.0, 2.05, 2.1, 2.3, 2.15, 3.0],
            "acc": [0.60, 0.61, 0.58, 0.56, 0.57, 0.30],
        }
    )
    assert auto_depth(table, "val_loss", 0.1, higher_is_better=False)["n"] == 2
    # n = 4 is within tolerance again, but n = 3 broke it: the drop must *stay* within
    assert auto_depth(table, "val_loss", 0.3, higher_is_better=False)["n"] == 4
    assert auto_depth(table, "acc", 0.03, higher_is_better=True)["n"] == 2
    assert auto_depth(table, "acc", 0.05, higher_is_better=True)["n"] == 4
    assert auto_depth(table, "acc", 0.001, higher_is_better=True)["n"] == 1
    assert auto_depth(table, "val_loss", 0.01, higher_is_better=False)["n"] == 0


# ------------------------------------------------------------------ bad input


def test_resolver_hands_the_kind_and_the_caps_to_models_not_pretrained_here(test_config):
    """A declared hub model gets its kind and the re-encoding caps (schema default when the
    config omits them); a model pretrained here gets no caps, which cannot change its job."""
    import copy

    from depthlab.config import resolve
    from depthlab.core.errors import ConfigError

    config = copy.deepcopy(test_config)
    config["models"]["hub_lm"] = {"kind": "hf", "path": "org/tiny-lm"}
    config["analysis"]["models"] = [*config["analysis"]["models"], "hub_lm"]
    config["pruning"]["models"] = ["lns", "hub_lm"]
    config["pruning"]["strategies"] = [*config["pruning"]["strategies"], "block_influence"]
    jobs = resolve(config).jobs("prune_model")
    assert (jobs["lns"]["model_kind"], jobs["hub_lm"]["model_kind"]) == ("pretrain", "hf")
    assert "retokenize" not in jobs["lns"]
    # config/schema.yaml's default
    assert jobs["hub_lm"]["retokenize"] == {"val_tokens": 1_000_000, "train_tokens": 1_000_000}
    assert jobs["hub_lm"]["strategies"][-1] == "block_influence"
    config["pruning"]["retokenize"] = {"val_tokens": 5000, "train_tokens": None}
    jobs = resolve(config).jobs("prune_model")
    assert jobs["hub_lm"]["retokenize"] == {"val_tokens": 5000, "train_tokens": None}
    config["pruning"]["retokenize"] = {"val_tokens": 0}
    with pytest.raises(ConfigError, match=r"^pruning\.retokenize\.val_tokens: 0 is less than"):
        resolve(config)
    config["pruning"]["retokenize"] = {"val_token": 5}
    with pytest.raises(ConfigError, match=r"^pruning\.retokenize: unknown key .*'val_token'"):
        resolve(config)


def test_per_model_overrides_and_the_new_keys_reach_their_jobs_only(test_config):
    """pruning.per_model.<name>.lm_eval.batch_size (and val.loss_tokens) reach that model's job
    only; greedy_max_n and val.loss_tokens default to null; loss_tokens is checked against the
    seq_len that applies to the model, naming the keys that set both; healing / speed naming
    greedy beyond its cap are rejected."""
    import copy

    from depthlab.config import resolve
    from depthlab.core.errors import ConfigError

    config = copy.deepcopy(test_config)
    config["models"]["hub_lm"] = {"kind": "hf", "path": "org/tiny-lm"}
    config["analysis"]["models"] = [*config["analysis"]["models"], "hub_lm"]
    config["pruning"]["models"] = ["lns", "hub_lm"]
    jobs = resolve(config).jobs("prune_model")
    for job in jobs.values():  # omitted: today's behaviour, and today's specs
        assert "greedy_max_n" not in job and "loss_tokens" not in job["val"]
    batch = config["pruning"]["lm_eval"]["batch_size"]
    config["pruning"]["per_model"] = {
        "hub_lm": {"lm_eval": {"batch_size": 3}, "val": {"seq_len": 16, "loss_tokens": 8}}
    }
    jobs = resolve(config).jobs("prune_model")
    assert jobs["hub_lm"]["lm_eval"]["batch_size"] == 3 != batch
    assert jobs["lns"]["lm_eval"]["batch_size"] == batch
    # the rest of lm_eval is the shared section's
    assert {k: v for k, v in jobs["hub_lm"]["lm_eval"].items() if k != "batch_size"} == {
        k: v for k, v in jobs["lns"]["lm_eval"].items() if k != "batch_size"
    }
    assert jobs["hub_lm"]["val"]["loss_tokens"] == 8 and "loss_tokens" not in jobs["lns"]["val"]
    config["pruning"]["per_model"]["hub_lm"]["lm_eval"]["batch_size"] = 0
    with pytest.raises(ConfigError, match=r"^pruning\.per_model\.hub_lm\.lm_eval\.batch_size"):
        resolve(config)
    config["pruning"]["per_model"]["hub_lm"] = {"val": {"seq_len": 16, "loss_tokens": 17}}
    with pytest.raises(
        ConfigError,
        match=r"^pruning\.per_model\.hub_lm\.val\.loss_tokens: 17 scored positions per window "
        r"exceed the window's 16 target positions \(pruning\.per_model\.hub_lm\.val\.seq_len\)",
    ):
        resolve(config)
    # the shared loss_tokens against a per-model seq_len: each key named where it is set
    config["pruning"]["per_model"]["hub_lm"] = {"val": {"seq_len": 16}}
    config["pruning"]["val"]["loss_tokens"] = 20
    with pytest.raises(
        ConfigError,
        match=r"^pruning\.val\.loss_tokens: 20 .* \(pruning\.per_model\.hub_lm\.val\.seq_len\)",
    ):
        resolve(config)
    config["pruning"]["val"]["loss_tokens"] = 40  # the shared seq_len is 32
    with pytest.raises(
        ConfigError, match=r"^pruning\.val\.loss_tokens: 40 .*\(pruning\.val\.seq_len\)"
    ):
        resolve(config)

    # the greedy cap (lns: 4 layers, grid 1..3)
    config = copy.deepcopy(test_config)
    config["pruning"]["greedy_max_n"] = 2
    config["pruning"]["val"]["loss_tokens"] = 8
    (job,) = resolve(config).jobs("prune_model").values()
    assert job["greedy_max_n"] == 2 and job["val"]["loss_tokens"] == 8
    config["pruning"]["healing"]["strategies"] = ["greedy"]  # healing.n_grid [2]: within
    resolve(config)
    config["pruning"]["healing"]["n_grid"] = [2, 3]
    with pytest.raises(
        ConfigError,
        match=r"^pruning\.healing\.n_grid: greedy has no removal set for n = 3 \(the greedy "
        r"path stops at pruning\.greedy_max_n = 2\)",
    ):
        resolve(config)
    config["pruning"]["healing"]["n_grid"] = [2]
    config["pruning"]["speed"]["strategy"] = "greedy"
    config["pruning"]["speed"]["n_grid"] = None  # every n: 3 is beyond the cap
    with pytest.raises(ConfigError, match=r"^pruning\.speed\.n_grid: greedy has no removal set"):
        resolve(config)
    config["pruning"]["speed"]["n_grid"] = [1, 2]
    resolve(config)
    config["pruning"]["strategies"] = ["angular", "deepest"]
    config["pruning"]["healing"]["strategies"] = ["angular"]
    config["pruning"]["speed"]["strategy"] = "angular"
    with pytest.raises(ConfigError, match=r"^pruning\.greedy_max_n: has no effect without greedy"):
        resolve(config)
    config["pruning"]["greedy_max_n"] = 0
    with pytest.raises(ConfigError, match=r"^pruning\.greedy_max_n: 0 is less than"):
        resolve(config)


def test_model_without_lm_head_is_rejected():
    bert = build("bert")
    with pytest.raises(ValueError, match=r"pruning\.models: model 'minilm' has no LM head"):
        check_prunable(adapt(bert), name="minilm")
    check_prunable(adapt(build("llama")), name="pre_ln")
    with pytest.raises(ValueError, match="no LM head"):
        LossSweep(bert, validation_windows(markov_tokens(200), 2, 8, 2))


# ------------------------------------------------------------------ the stage script


def _per_set_lm_eval_equals_lm_eval_in_the_job(spec, gather_spec, out, tmp_path):
    """lm_eval.per_set_jobs: prune_model scores nothing, one evaluate_pruned job per removal set
    (the full model, each strategy at lm_eval.n_grid, each single layer) and gather_pruning give
    the very tables of lm-eval inside prune_model."""
    from depthlab.stages.pruning.tables import gather
    from depthlab.stages.pruning.variants import evaluate_variant

    measured = tmp_path / "per_set" / "measured"
    per_set = {
        **spec,
        "lm_eval": {**spec["lm_eval"], "per_set_jobs": True},
        "speed": {**spec["speed"], "enabled": False},
        "out": str(measured),
    }
    from depthlab.stages.pruning.stage import run as measure

    summary = measure(per_set, "cpu", lambda message: None)
    assert summary["lm_eval_variants"] == 0
    layers = summary["num_layers"]
    variants = ["full"] + [
        f"{s}_n{n}" for s in spec["strategies"] for n in spec["lm_eval"]["n_grid"]
    ]
    variants += [f"single{layer}" for layer in range(layers)]
    folders = []
    for variant in variants:
        folder = tmp_path / "per_set" / "lm_eval" / variant
        job = {**{key: spec[key] for key in ("model_name", "model_kind", "model", "revision",
                                             "tasks", "datasets_cache", "seed", "device", "dtype",
                                             "lm_eval")},
               "measured": str(measured), "variant": variant, "out": str(folder)}  # fmt: skip
        if variant == "full":  # one through its script
            result = subprocess.run(
                [sys.executable, str(SCRIPTS / "evaluate_pruned.py"), "--spec", json.dumps(job)],
                capture_output=True, text=True, timeout=300, cwd=REPO,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr[-3000:]
        else:
            evaluate_variant(job, "cpu", lambda message: None)
        folders.append(str(folder))
    tables = tmp_path / "per_set" / "tables"
    gathered = gather({**gather_spec, "measured": str(measured), "evaluations": folders,
                       "out": str(tables)})  # fmt: skip
    in_job = json.loads((out / "summary.json").read_text())
    assert gathered["lm_eval_variants"] == in_job["lm_eval_variants"] > 1 + layers
    assert gathered["tasks_full_model"] == in_job["tasks_full_model"]
    for name in ("sweep.csv", "single_layer.csv", "window_losses.csv"):
        assert (tables / name).read_bytes() == (out / name).read_bytes(), name
    with pytest.raises(PruningError, match=r"angular_n9: prune_model of 'm' measured no angular set of n = 9"):  # fmt: skip
        evaluate_variant({**job, "variant": "angular_n9", "out": str(tmp_path / "x")}, "cpu")


def test_prune_model_script_end_to_end(tmp_path, pruning_spec, test_config):
    from depthlab.stages.analysis.measures import analyse
    from depthlab.stages.residual_stream import iter_token_batches
    from test_lm_tasks import make_run, run_prune_spec

    run = make_run(tmp_path, train_steps=40)
    L = run["num_layers"]
    # the analysis stage's per-layer measures, which block_influence reads
    batches = iter_token_batches(run["val_texts"], run["tokenizer"], max_length=32, batch_size=8)
    measures = analyse(adapt(run["trained"].eval()), batches, logit_lens=False).to_frame(
        model="m", text_set="val"
    )
    measures.to_csv(run["analysis"] / "measures.csv", index=False)
    out = tmp_path / "pruning" / "m"
    measured = tmp_path / "pruning_jobs" / "m" / "measured"
    spec = run_prune_spec(pruning_spec, run, tmp_path) | {
        "device": "cpu",
        "dtype": "float32",
        "strategies": ["angular", "deepest", "greedy", "block_influence"],
        "n_grid": None,
        "val": {"windows": 8, "seq_len": 32, "batch_size": 4},
        "lm_eval": {
            "enabled": True,
            "tasks": None,
            "n_grid": [2],
            "single_layer": True,
            "batch_size": 32,
            "bootstrap_iters": 100,
        },
        "speed": {
            "enabled": True,
            "strategy": "deepest",
            "n_grid": [1, 2],
            "batch_size": 2,
            "prompt_length": 8,
            "new_tokens": 4,
            "repeats": 1,
        },
    }
    # prune_model measures, gather_pruning writes the tables (no healed variant here)
    gather_spec = {"model_name": "m", "measured": str(measured), "heals": [], "evaluations": [],
                   "seed": 0, "out": str(out)}  # fmt: skip
    for script, job in (("prune_model.py", spec), ("gather_pruning.py", gather_spec)):
        result = run_stage_script(script, job)
        assert result.returncode == 0, result.stderr[-3000:]
    sweep = pd.read_csv(out / "sweep.csv")
    blocks = pd.read_csv(out / "block_choice.csv")
    distance = (
        pd.read_csv(run["analysis"] / "angular_distance_last.csv").drop(columns="layer").to_numpy()
    )
    for n, l_star, _ in blocks.itertuples(index=False):
        assert l_star == int(np.argmin([distance[i, i + n] for i in range(L + 1 - n)]))
        row = sweep[(sweep["strategy"] == "angular") & (sweep["n"] == n)].iloc[0]
        assert row["removed"] == "-".join(str(i) for i in range(l_star, l_star + n))
    assert set(sweep["n"]) == set(range(L))
    # block_influence: the lowest 1 - cos_adjacent, from measures.csv read here
    cos = measures[measures["measure"] == "cos_adjacent"].sort_values("layer")["value"].to_numpy()
    order = np.argsort(1 - cos, kind="stable")
    influence = pd.read_csv(out / "block_influence.csv")
    assert list(influence.sort_values("rank")["layer"]) == [int(l) for l in order]
    for n in range(1, L):
        row = sweep[(sweep["strategy"] == "block_influence") & (sweep["n"] == n)].iloc[0]
        assert row["removed"] == "-".join(str(l) for l in sorted(order[:n]))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["token_source"]["val"]["tokenizer"] == "run"
    single = pd.read_csv(out / "single_layer.csv")
    assert sorted(single["layer"].unique()) == list(range(L))
    # window_losses.csv: every set's per-window losses average to its loss in the tables
    windows = pd.read_csv(out / "window_losses.csv", keep_default_na=False)
    assert list(windows.columns) == [
        "removed", "strategy", "n", "healed", "window", "loss", "method"
    ]  # fmt: skip
    assert not windows["healed"].any() and set(windows["method"]) == {
        ""
    }  # healing is off here (see the loss_tokens part below)
    per_set = windows.groupby(["strategy", "n", "removed"])
    assert all(sorted(group["window"]) == list(range(8)) for _, group in per_set)
    means = per_set["loss"].mean()
    assert means[("full", 0, "")] == pytest.approx(summary["val_loss"], rel=1e-6)
    for row in single.drop_duplicates("layer").itertuples():
        assert means[("single", 1, str(row.layer))] == pytest.approx(row.val_loss, rel=1e-6)
    unhealed = sweep[(sweep["n"] > 0) & (~sweep["healed"])].drop_duplicates(["strategy", "n"])
    assert len(means) == 1 + L + len(unhealed)
    for row in unhealed.itertuples():
        label = str(row.removed) if isinstance(row.removed, str) else str(int(row.removed))
        assert means[(row.strategy, row.n, label)] == pytest.approx(row.val_loss, rel=1e-6)
    record = summary["window_losses"]
    assert record["file"] == "window_losses.csv" and record["windows"] == 8
    assert record["scored_positions_per_window"] == 32 and summary["val_loss_tokens"] is None
    assert len(record["window_starts"]) == 8 and record["window_starts"][0] == 0
    assert summary["greedy_max_n"] is None and summary["greedy_steps"] == L - 1
    assert set(single["task"]) == {"depthlab_word_order", "depthlab_continuation"}
    speed = pd.read_csv(out / "speed.csv")
    assert sorted(speed["n"]) == [0, 1, 2] and (speed["prefill_tokens_per_s"] > 0).all()
    assert (speed["prefill_speedup_low"] <= speed["prefill_speedup"]).all()
    assert (speed["generation_speedup"] <= speed["generation_speedup_high"]).all()
    # a toy model's variants fit in memory together: timed in the same rounds
    assert speed["paired"].all() and (speed.query("n == 0")["prefill_speedup"] == 1.0).all()
    assert list(speed.sort_values("n")["ideal_speedup"]) == [1.0, L / (L - 1), L / (L - 2)]
    # pruning.sublayer (config/test.yaml): the sub-layer path travels to the gathered folder
    path = pd.read_csv(out / "sublayer_path.csv", keep_default_na=False)
    steps = spec["sublayer"]["max_units"]
    assert list(path["step"]) == list(range(1, steps + 1))
    assert (
        path["removed"].iloc[-1].count(".") == steps
        and path["removed_params"].diff().iloc[1:].gt(0).all()
    )
    record = summary["sublayer"]
    assert record["steps"] == steps and sum(record["layer_params"]) == record["decoder_params"]
    assert np.allclose(path["removed_fraction"], path["removed_params"] / record["decoder_params"])
    # the choices made on these tables are jobs of their own: auto depth, then its exports
    assert not (out / "auto_depth.json").exists() and "exports" not in summary
    chosen = tmp_path / "auto_depth" / "m"
    choose = {
        "model_name": "m",
        "pruning": str(out),
        "auto_depth": {"tolerances": {"val_loss": 0.5, "mean_acc": 0.1}},
        "metric": "acc",
        "out": str(chosen),
    }
    exported = tmp_path / "pruned_models" / "m"
    export_spec = {
        "model_name": "m",
        "model": str(run["model"]),
        "revision": None,
        "dtype": "float32",
        "pruning": str(out),
        "auto_depth": str(chosen),
        "export": [
            {"strategy": "angular", "metric": "val_loss"},
            {"strategy": "block_influence", "metric": "val_loss"},
        ],
        "out": str(exported),
    }
    for script, job in (("choose_depth.py", choose), ("export_pruned.py", export_spec)):
        result = run_stage_script(script, job)
        assert result.returncode == 0, result.stderr[-3000:]
    auto = json.loads((chosen / "auto_depth.json").read_text())
    assert {c["strategy"] for c in auto["choices"]} == set(spec["strategies"])
    assert auto["num_layers"] == L and auto["tolerances"] == choose["auto_depth"]["tolerances"]
    exports = json.loads((exported / "exports.json").read_text())["exports"]
    assert [(e["strategy"], e["metric"]) for e in exports] == [
        (item["strategy"], item["metric"]) for item in export_spec["export"]
    ]
    for export in exports:
        choice = next(
            c
            for c in auto["choices"]
            if (c["strategy"], c["metric"], c["healed"])
            == (export["strategy"], export["metric"], False)
        )
        assert export["n"] == choice["n"]
        if export["folder"]:
            row = sweep[
                (sweep["strategy"] == export["strategy"])
                & (sweep["n"] == export["n"])
                & ~sweep["healed"]
            ].iloc[0]
            assert "-".join(map(str, export["removed"])) == str(row["removed"])
            record = json.loads((exported / export["folder"] / "pruning.json").read_text())
            assert record["num_layers"] == L - export["n"]
            # a Pre-LN model trained here is saved as plain Llama: a passthrough rebuilds it
            assert (
                export["mergekit"]
                == record["mergekit"]
                == {
                    "expressible": True,
                    "config": "mergekit.yaml",
                }
            )
            slices = yaml.safe_load((exported / export["folder"] / "mergekit.yaml").read_text())
            kept = [l for p in slices["slices"] for l in range(*p["sources"][0]["layer_range"])]
            assert kept == [l for l in range(L) if l not in export["removed"]]

    figures = {k: str(tmp_path / f"{k}.png") for k in ("delta_p", "sweep", "speedup")}
    plot = {
        "prunings": {"m": str(out)},
        "labels": {"m": "Pre-LN"},
        "metric": "acc",
        "chance": 0.25,
        "run_name": "test",
        "figures": figures,
    }
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "plot_pruning.py"), "--spec", json.dumps(plot)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for path in figures.values():
        assert Path(path).stat().st_size > 1000
        assert Path(path).with_suffix("").with_name(Path(path).stem + ".provenance.json").is_file()

    _per_set_lm_eval_equals_lm_eval_in_the_job(spec, gather_spec, out, tmp_path)
    # bad input: a missing task file is named, with no traceback
    (run["tasks"] / "depthlab_continuation.jsonl").unlink()
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "prune_model.py"),
            "--spec",
            json.dumps({**spec, "out": str(tmp_path / "other")}),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode == 2
    assert "depthlab_continuation.jsonl does not exist" in result.stderr
    assert "Traceback" not in result.stderr

    # the same checkpoint declared as kind hf: its tokenizer (the run's BPE, saved beside it,
    # with no special-token template) re-encodes the documents to exactly the run's ids
    from depthlab.stages.pruning.stage import PhaseClock, plan

    retokenized = {
        **spec,
        "model_kind": "hf",
        "retokenize": {"val_tokens": None, "train_tokens": None},
        "lm_eval": {**spec["lm_eval"], "enabled": False},
        "strategies": ["angular", "deepest"],
    }
    planned = plan(retokenized, "cpu", lambda message: None, PhaseClock())
    assert planned.token_source["val"]["source"] == "val.jsonl"
    assert planned.base_loss == pytest.approx(summary["val_loss"], rel=1e-6)

    # greedy capped at 2: the same first two greedy sets as the full path, and exactly the
    # removal sets the capped path needs scored (counted here from the tables of the full run)
    from depthlab.stages.pruning.stage import split_tokens

    capped = plan(
        {**spec, "greedy_max_n": 2, "lm_eval": {**spec["lm_eval"], "enabled": False}},
        "cpu",
        lambda message: None,
        PhaseClock(),
    )
    path = pd.read_csv(out / "greedy_path.csv", keep_default_na=False)
    path_sets = [tuple(int(l) for l in str(r).split("-")) for r in path["removed"]]
    assert {n for (s, n) in capped.removals if s == "greedy"} == {1, 2}
    assert [capped.removals[("greedy", n)] for n in (1, 2)] == path_sets[:2]

    def expected_sets(steps):
        labelled = sweep[(sweep["strategy"] != "greedy") & (sweep["n"] > 0)]["removed"]
        sets = {()} | {(l,) for l in range(L)}
        sets |= {tuple(int(l) for l in str(r).split("-")) for r in labelled}
        previous = ()
        for step in range(steps):
            sets |= {tuple(sorted(previous + (l,))) for l in range(L) if l not in previous}
            previous = path_sets[step]
        return len(sets)

    assert len(capped.sweep.memo) == expected_sets(2) < summary["removal_sets"]
    assert summary["removal_sets"] == expected_sets(L - 1)
    # auto depth on the shorter greedy curve says where it ends
    from depthlab.stages.pruning.strategies import auto_depth_choices, mark_greedy_cap

    table = sweep[(sweep["strategy"] != "greedy") | (sweep["n"] <= 2)]
    choices = mark_greedy_cap(auto_depth_choices(table, {"val_loss": 100.0}, "acc"), table, 2)
    greedy = [c for c in choices if c["strategy"] == "greedy"]
    assert greedy and all(c["curve_end_n"] == 2 and c["at_curve_end"] for c in greedy)
    assert all("curve_end_n" not in c for c in choices if c["strategy"] != "greedy")
    assert mark_greedy_cap(choices[:1], table, None) == choices[:1]

    # val.loss_tokens reaches every val loss of the stage: the sweep and a healed variant's,
    # healed by its own heal_pruned job and gathered into the tables
    from depthlab.stages.pruning.healing import HealSettings, heal
    from depthlab.stages.pruning.stage import run as measure
    from depthlab.stages.pruning.tables import gather
    from depthlab.stages.pruning.variants import heal_variant

    k = 5
    from depthlab.config import resolve

    heal_jobs = resolve(test_config).jobs("heal_pruned")
    heal_job = next(iter(heal_jobs.values()))
    healing = heal_job["healing"]
    # test.yaml heals with lora, qlora, then full (continued pretraining) on the same tokens
    full_healing = heal_jobs["lns/angular_n2_full"]["healing"]
    assert (healing["method"], full_healing["method"]) == ("lora", "full")
    scored = {
        **spec,
        "val": {**spec["val"], "loss_tokens": k},
        "lm_eval": {**spec["lm_eval"], "enabled": False},
        "speed": {**spec["speed"], "enabled": False},
        "out": str(tmp_path / "scored" / "measured"),
    }
    planned = plan(scored, "cpu", lambda message: None, PhaseClock())
    by_hand = last_positions_losses(planned.model, planned.windows, k)
    assert planned.base_loss == pytest.approx(by_hand.mean(), rel=1e-5)
    assert planned.base_loss != pytest.approx(summary["val_loss"], rel=1e-3)
    measure(scored, "cpu", lambda message: None)
    heal_spec = {
        **{key: scored[key] for key in ("model_name", "model_kind", "model", "revision", "data",
                                        "tasks", "datasets_cache", "seed", "device", "dtype",
                                        "val", "lm_eval")},
        "measured": scored["out"],
        "strategy": "deepest",
        "n": 1,
        "healing": healing,
        "tracking": {**heal_job["tracking"], "tensorboard": False},
        "out": str(tmp_path / "scored" / "heal" / "deepest_n1"),
    }  # fmt: skip
    heal_variant(heal_spec, "cpu", lambda message: None)
    full_spec = {**heal_spec, "healing": full_healing,
                 "out": str(tmp_path / "scored" / "heal" / "deepest_n1_full")}  # fmt: skip
    heal_variant(full_spec, "cpu", lambda message: None)
    gathered = tmp_path / "scored" / "tables"
    gather({"model_name": "m", "measured": scored["out"], "heals": [heal_spec["out"]],
            "evaluations": [], "seed": 0, "out": str(gathered)})  # fmt: skip
    (record,) = pd.read_csv(gathered / "healing.csv").to_dict("records")
    assert record["method"] == "lora"
    both = tmp_path / "scored" / "both"
    gather({"model_name": "m", "measured": scored["out"], "evaluations": [], "seed": 0,
            "heals": [heal_spec["out"], full_spec["out"]], "out": str(both)})  # fmt: skip
    removed = planned.removals[("deepest", 1)]
    assert str(record["removed"]) == removed_label(removed) and record["strategy"] == "deepest"
    merged, _ = heal(
        prune_copy(planned.model, removed),
        split_tokens(scored, planned.tokenizer, "train")[0],
        HealSettings.from_dict(healing),
        seed=0,
        device="cpu",
    )
    healed_by_hand = last_positions_losses(merged, planned.windows, k)
    assert record["val_loss_healed"] == pytest.approx(healed_by_hand.mean(), rel=1e-5)
    # the healed variant's rows in window_losses.csv and sweep.csv
    table = pd.read_csv(gathered / "window_losses.csv", keep_default_na=False)
    rows = table[table["healed"]]
    assert set(rows["strategy"]) == {"deepest"} and set(rows["n"]) == {1}
    np.testing.assert_allclose(rows.sort_values("window")["loss"], healed_by_hand, rtol=1e-5)
    assert not table[~table["healed"]].empty
    healed_row = pd.read_csv(gathered / "sweep.csv").query("healed")
    assert list(healed_row["val_loss"]) == [record["val_loss_healed"]]
    # both methods: each in healing.csv, healing_sweep.csv and window_losses.csv by its method;
    # sweep.csv keeps the first method's healed row, as with lora alone
    records = pd.read_csv(both / "healing.csv")
    assert list(records["method"]) == ["lora", "full"]
    assert records["val_loss_healed"].iloc[0] == record["val_loss_healed"]
    assert records["trainable_parameters"].iloc[1] == sum(
        p.numel() for p in prune_copy(planned.model, removed).parameters()
    )
    full_model, _ = heal(
        prune_copy(planned.model, removed),
        split_tokens(scored, planned.tokenizer, "train")[0],
        HealSettings.from_dict(full_healing),
        seed=0,
        device="cpu",
    )
    full_by_hand = last_positions_losses(full_model, planned.windows, k)
    assert records["val_loss_healed"].iloc[1] == pytest.approx(full_by_hand.mean(), rel=1e-5)
    assert records["lr"].iloc[1] == full_healing["lr"] != healing["lr"]
    pd.testing.assert_frame_equal(
        pd.read_csv(both / "sweep.csv"), pd.read_csv(gathered / "sweep.csv")
    )
    healing_sweep = pd.read_csv(both / "healing_sweep.csv")
    assert list(healing_sweep.columns) == [*pd.read_csv(both / "sweep.csv").columns, "method"]
    assert list(healing_sweep["method"]) == ["lora", "full"]
    assert list(healing_sweep["val_loss"]) == list(records["val_loss_healed"])
    table = pd.read_csv(both / "window_losses.csv", keep_default_na=False)
    for method, by_hand in (("lora", healed_by_hand), ("full", full_by_hand)):
        rows = table[table["healed"] & (table["method"] == method)].sort_values("window")
        np.testing.assert_allclose(rows["loss"], by_hand, rtol=1e-5)
    assert set(table[~table["healed"]]["method"]) == {""}
    assert record["val_loss_unhealed"] == pytest.approx(
        last_positions_losses(prune_copy(planned.model, removed), planned.windows, k).mean(),
        rel=1e-5,
    )
    (run["analysis"] / "measures.csv").unlink()
    with pytest.raises(PruningError, match=r"measures\.csv does not exist"):
        plan(
            {**retokenized, "strategies": ["block_influence"]},
            "cpu",
            lambda message: None,
            PhaseClock(),
        )
