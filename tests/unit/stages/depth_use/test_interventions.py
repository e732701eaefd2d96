"""Layer-skip interventions: the batched, prefix-reusing, row-stacked evaluation equals the
one-prompt-per-full-forward-pass reference loop on tiny random models of several families (with
left and right padding); a layer whose output projections are zero has no effect, a normal one a
positive effect; the depth score of a one-hot effect vector is its index."""

import math

import numpy as np
import pytest
import torch
from depthlab.models.architectures import adapt
from depthlab.settings.depth_use import VARIANTS
from depthlab.stages.depth_use.depth_score import depth_score, depth_scores_by_group
from depthlab.stages.depth_use.interventions import SkipSettings, future_positions, skip_effects
from depthlab.stages.depth_use.reference_loop import reference_skip_effects
from script_runs import run_stage_script
from tiny_models import build, random_batch

torch.set_num_threads(1)

SETTINGS = dict(no_skip_front=1, future_positions=2, future_min_position=3, seed=5)


def build64(family, seed):
    # sdpa: HF's eager attention turns a fully masked (left-pad) query row into NaN in float64
    return build(family, seed=seed, dtype=torch.float64, attn_implementation="sdpa")


def unpadded(batch, row):
    mask = batch["attention_mask"][row].bool()
    return batch["input_ids"][row][mask]


def reference(adapter, batches, settings: SkipSettings):
    """Aggregate reference_skip_effects over prompts, t's, variants and layers, one prompt per
    pass: {variant: (update_max, update_mean, output_max, output_mean)}."""
    L = adapter.num_layers
    out = {}
    for variant in settings.variants:
        umax, usum = np.zeros((L, L)), np.zeros((L, L))
        omax, osum, count = np.zeros(L), np.zeros(L), np.zeros(L)
        prompt_id = 0
        for batch in batches:
            for row in range(batch["input_ids"].shape[0]):
                ids = unpadded(batch, row)
                ts = (
                    [None]
                    if variant.endswith("_all")
                    else future_positions(len(ids), prompt_id, settings)
                )
                for s in range(L):
                    for t in ts:
                        change, output = reference_skip_effects(
                            adapter, ids, variant, s, t, settings.no_skip_front
                        )
                        if change.shape[1] == 0:
                            continue
                        umax[s] = np.maximum(umax[s], change.max(axis=1))
                        usum[s] += change.sum(axis=1)
                        omax[s] = max(omax[s], output.max())
                        osum[s] += output.sum()
                        count[s] += change.shape[1]
                prompt_id += 1
        for s in range(L):
            umax[s, :s] = 0.0
            usum[s, :s] = 0.0
        out[variant] = (umax, usum / count[:, None], omax, osum / count)
    return out


@pytest.mark.parametrize(
    "family,padding",
    [
        ("depthlab_pre_ln", "right"),
        ("depthlab_post_ln", "left"),
        ("gpt2", "left"),
        ("gpt_neox", "right"),
        ("opt", "right"),
    ],
)
def test_batched_equals_one_prompt_reference(family, padding):
    model = build64(family, 1)
    adapter = adapt(model)
    batches = [
        random_batch([9, 6, 11], padding_side=padding, seed=2),
        random_batch([7, 12], padding_side=padding, seed=3),
    ]
    # max_rows small enough that the staircase is cut into several chunks
    settings = SkipSettings(variants=VARIANTS, max_rows=7, **SETTINGS)
    result = skip_effects(adapter, batches, settings)
    expected = reference(adapter, batches, settings)
    for variant in VARIANTS:
        umax, umean, omax, omean = expected[variant]
        np.testing.assert_allclose(result.update_max[variant], umax, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(result.update_mean[variant], umean, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(result.output_max[variant], omax, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(result.output_mean[variant], omean, rtol=1e-9, atol=1e-12)
    # a skipped layer's own update is gone at every intervened position
    assert np.allclose(np.diag(result.update_max["layer_all"]), 1.0)
    assert np.all(np.diag(result.update_max["layer_future"]) < 1e-12)  # untouched at t.. itself
    assert np.all(result.output_max["layer_all"] > 0)


def test_batching_does_not_change_the_effects():
    """Same prompts, one batch vs three, big vs tiny max_rows: identical matrices."""
    model = build64("depthlab_pre_ln", 3)
    adapter = adapt(model)
    lengths = [10, 8, 12, 9]
    whole = random_batch(lengths, seed=4)
    split = [{k: v[i:j] for k, v in whole.items()} for i, j in ((0, 1), (1, 3), (3, 4))]
    a = skip_effects(adapter, [whole], SkipSettings(variants=VARIANTS, max_rows=1000, **SETTINGS))
    b = skip_effects(adapter, split, SkipSettings(variants=VARIANTS, max_rows=3, **SETTINGS))
    for variant in VARIANTS:
        np.testing.assert_allclose(
            a.update_max[variant], b.update_max[variant], rtol=1e-10, atol=1e-14
        )
        np.testing.assert_allclose(
            a.update_mean[variant], b.update_mean[variant], rtol=1e-10, atol=1e-14
        )
        np.testing.assert_allclose(
            a.output_mean[variant], b.output_mean[variant], rtol=1e-10, atol=1e-14
        )


def test_zero_output_projections_have_zero_effect():
    model = build64("depthlab_pre_ln", 7)
    layers = model.model.layers
    with torch.no_grad():
        layers[1].self_attn.o_proj.weight.zero_()  # layer 1: no update at all
        layers[1].mlp.down_proj.weight.zero_()
        layers[2].self_attn.o_proj.weight.zero_()  # layer 2: attention update only zero
    adapter = adapt(model)
    batch = random_batch([10, 7, 12], seed=8)
    result = skip_effects(adapter, [batch], SkipSettings(variants=VARIANTS, **SETTINGS))
    for variant in VARIANTS:
        assert np.all(result.update_max[variant][1] == 0.0), variant
        assert result.output_max[variant][1] == 0.0, variant
    for variant in ("attention_all", "attention_future"):
        assert np.all(result.update_max[variant][2] == 0.0)
        assert result.output_max[variant][2] == 0.0
    # a normal layer changes the later (non-zero) update and the output
    assert np.all(result.update_max["layer_all"][:, 1] == [0.0, 0.0, 0.0])  # no update to change
    for variant in ("layer_all", "mlp_all", "attention_all"):
        assert result.update_max[variant][0, 2] > 1e-6, variant
        assert result.update_mean[variant][0, 2] > 1e-8, variant
        assert result.output_mean[variant][0] > 0, variant
    # future scope: with layer 1 an identity and layer 2 attention-free, nothing carries layer
    # 0's change at positions < t over to the positions >= t
    assert result.update_max["layer_future"][0, 2] == 0.0
    assert result.output_max["layer_future"][0] == 0.0
    assert result.counts["layer_all"][0] == sum(n - 1 for n in (10, 7, 12))


def test_answer_positions_and_per_prompt_effects():
    """measure_mask restricts the measured positions; per-prompt effects average them."""
    model = build64("depthlab_pre_ln", 2)
    adapter = adapt(model)
    batch = random_batch([8, 6], seed=9)
    measure = torch.zeros_like(batch["attention_mask"], dtype=torch.bool)
    measure[0, 7] = measure[0, 5] = measure[1, 5] = True
    batch["measure_mask"] = measure
    settings = SkipSettings(variants=("layer_all",), **SETTINGS)
    result = skip_effects(adapter, [batch], settings, per_prompt=True)
    per_prompt = result.per_prompt_output["layer_all"]
    assert per_prompt.shape == (2, adapter.num_layers)
    for row, positions in ((0, [5, 7]), (1, [5])):
        ids = unpadded(batch, row)
        for s in range(adapter.num_layers):
            mask = torch.zeros(len(ids), dtype=torch.bool)
            mask[positions] = True
            _, output = reference_skip_effects(adapter, ids, "layer_all", s, measure=mask)
            assert per_prompt[row, s] == pytest.approx(output.mean(), rel=1e-9)
    assert result.counts["layer_all"][0] == 3
    with pytest.raises(ValueError, match="_all"):
        skip_effects(
            adapter, [batch], SkipSettings(variants=("layer_future",), **SETTINGS), per_prompt=True
        )


def test_depth_score():
    for index in range(6):
        assert depth_score(np.eye(6)[index]) == index
    assert depth_score(np.ones(5)) == pytest.approx(2.0)
    assert depth_score([0.0, 1.0, 3.0]) == pytest.approx(1.75)
    assert math.isnan(depth_score(np.zeros(4)))
    with pytest.raises(ValueError):
        depth_score([1.0, -1.0])
    rng = np.random.default_rng(0)
    effects = np.concatenate(
        [
            np.eye(4)[np.full(30, 1)] + 0.1 * rng.random((30, 4)),
            np.eye(4)[np.full(30, 3)] + 0.1 * rng.random((30, 4)),
        ]
    )
    frame = depth_scores_by_group(effects, [1] * 30 + [2] * 30, resamples=200)
    assert list(frame["group"]) == [1, 2]
    for row in frame.itertuples():
        assert row.ci_low <= row.depth_score <= row.ci_high
    assert frame["depth_score"].iloc[0] < 1.5 < 2.5 < frame["depth_score"].iloc[1]


def test_the_engine_refuses_a_layer_beyond_the_model():
    model = build("depthlab_pre_ln")
    with pytest.raises(ValueError, match="layers: layer index 3 is out of range"):
        skip_effects(
            adapt(model),
            [random_batch([5])],
            SkipSettings(variants=("layer_all",), layers=(3,), **SETTINGS),
        )


def test_script_writes_effects_accuracy_and_depth_scores(tmp_path):
    """skip_interventions.py end to end on a saved random model with the problems tokenizer."""
    import json

    import pandas as pd
    from depthlab.data.problem_sets import write_problem_set
    from depthlab.models.decoders import build_model, make_config, save_checkpoint

    problems = tmp_path / "problems"
    meta = write_problem_set(
        {
            "families": {
                "hops": {"levels": [1, 2], "relations": 2},
                # natural text outside the synthetic vocabulary: its own count per level, and
                # the job below scores only hops (spec problem_families)
                "addition": {"levels": [1], "terms": 2, "shots": 1, "eval_per_level": 2},
            },
            "train_problems": 20,
            "val_problems": 12,
            "eval_per_level": 6,
        },
        problems,
        seed=0,
    )
    written = [json.loads(line) for line in (problems / "problems.jsonl").open()]
    assert [p["family"] for p in written] == ["hops"] * 12 + ["addition"] * 2
    config = make_config(
        {"hidden_size": 16, "num_layers": 3, "num_heads": 2, "intermediate_size": 32},
        "pre_ln",
        vocab_size=meta["vocab_size"],
        max_positions=16,
        bos_token_id=meta["bos_id"],
        eos_token_id=meta["eos_id"],
        pad_token_id=meta["pad_id"],
    )
    from transformers import AutoTokenizer

    save_checkpoint(
        build_model(config, 0),
        AutoTokenizer.from_pretrained(problems / "tokenizer"),
        tmp_path / "model",
    )
    spec = {
        "model_name": "tiny",
        "model_path": str(tmp_path / "model"),
        "revision": None,
        "out": str(tmp_path / "skip"),
        "texts": {"source": "jsonl", "path": str(problems / "val.jsonl")},
        "text_field": "text",
        "text_set": "val",
        "add_special_tokens": False,
        "max_samples": 8,
        "max_length": 16,
        "batch_size": 4,
        "variants": ["layer_all", "mlp_future"],
        "layers": None,
        "no_skip_front": 1,
        "future_positions": 2,
        "future_min_position": 2,
        "max_rows": 16,
        "seed": 0,
        "problems": str(problems / "problems.jsonl"),
        "problem_families": ["hops"],
        "depth_score_variant": "layer_all",
        "prepend_bos": True,
        "bootstrap": {"resamples": 50, "confidence": 0.9},
        "dtype": "float32",
        "device": "cpu",
    }
    run = run_stage_script("skip_interventions.py", spec)
    assert run.returncode == 0, run.stderr
    effects = pd.read_csv(tmp_path / "skip" / "effects.csv")
    assert set(effects["variant"]) == {"layer_all", "mlp_future"}
    assert len(effects) == 2 * 3 * (3 + 1)  # variants x skipped x (L + output)
    accuracy = pd.read_csv(tmp_path / "skip" / "accuracy.csv")
    assert list(accuracy["level"]) == [1, 2] and set(accuracy["family"]) == {"hops"}
    scores = pd.read_csv(tmp_path / "skip" / "depth_score.csv")
    assert scores["depth_score"].between(0, 2).all()
    assert (scores["ci_low"] <= scores["depth_score"]).all()
    assert len(pd.read_csv(tmp_path / "skip" / "problem_effects.csv")) == 12 * 3
    # a layer index out of range is refused naming the key, nothing written
    bad = {**spec, "out": str(tmp_path / "bad"), "layers": [3], "problems": None}
    run = run_stage_script("skip_interventions.py", bad)
    assert run.returncode == 2 and "layers: layer index 3 is out of range" in run.stderr
    assert not (tmp_path / "bad").exists()
