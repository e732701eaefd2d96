"""Closed-form cross-model linear maps: recover a planted affine relation, match
numpy.linalg.lstsq, choose alpha by a closed-form validation error that equals the directly
computed one, give the same matrix whatever the memory blocks, and refuse bad settings."""

import numpy as np
import pytest
import torch
from depthlab.architectures import adapt
from depthlab.linear_maps import (
    AffineRidgeMaps,
    check_same_tokenizer,
    fit_linear_maps,
    plan_target_blocks,
    split_of,
    validate_linear_map_settings,
)
from depthlab.models import build_model, make_config
from tiny_models import VOCAB, random_batch

torch.set_num_threads(1)


def planted(n, d_a=6, d_b=5, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d_a)) * rng.uniform(0.5, 3, size=d_a) + rng.normal(size=d_a) * 4
    weight = rng.normal(size=(d_a, d_b))
    bias = rng.normal(size=d_b) * 3
    y = x @ weight + bias + noise * rng.normal(size=(n, d_b))
    return torch.tensor(x), torch.tensor(y), weight, bias


def feed(fitter, split, x, y, chunks=3):
    for xc, yc in zip(torch.tensor_split(x, chunks), torch.tensor_split(y, chunks)):
        fitter.add(split, {0: xc}, {0: yc})


def test_recovers_a_planted_affine_relation():
    x, y, weight, bias = planted(900)
    fitter = AffineRidgeMaps([0], [0], alphas=[0.0, 1e-3, 1e-1])
    feed(fitter, "fit", x[:500], y[:500])
    feed(fitter, "val", x[500:700], y[500:700])
    fitter.solve()
    assert fitter.chosen[(0, 0)] == 0.0  # exact relation: no shrinkage wins
    feed(fitter, "test", x[700:], y[700:])
    assert fitter.errors()[(0, 0)] < 1e-6
    # the map in original coordinates
    w, b = fitter.maps[(0, 0)]
    recovered_bias = (b + fitter.shift_y[0] - fitter.shift_x[0] @ w).numpy()
    np.testing.assert_allclose(w.numpy(), weight, atol=1e-8)
    np.testing.assert_allclose(recovered_bias, bias, atol=1e-7)


def test_matches_lstsq_and_closed_form_validation_error():
    x, y, _, _ = planted(60, d_a=8, d_b=4, noise=0.5, seed=1)
    alphas = [0.0, 0.01, 0.3]
    fitter = AffineRidgeMaps([0], [0], alphas=alphas)
    feed(fitter, "fit", x[:30], y[:30], chunks=4)
    feed(fitter, "val", x[30:45], y[30:45], chunks=2)
    fitter.solve()
    # alpha = 0: ordinary least squares with an intercept
    design = np.hstack([x[:30].numpy(), np.ones((30, 1))])
    solution = np.linalg.lstsq(design, y[:30].numpy(), rcond=None)[0]
    expected = design @ solution
    for xs in (x[:30], x[45:]):  # the fit rows and held-out rows
        check = AffineRidgeMaps([0], [0], alphas=[0.0])
        feed(check, "fit", x[:30], y[:30], chunks=4)
        check.solve()
        got = check.predict(0, 0, xs).numpy()
        want = np.hstack([xs.numpy(), np.ones((len(xs), 1))]) @ solution
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(check.predict(0, 0, x[:30]).numpy(), expected, atol=1e-9)
    # every alpha's closed-form validation SSE equals the SSE of its fitted map on val tokens
    for index, alpha in enumerate(alphas):
        single = AffineRidgeMaps([0], [0], alphas=[alpha])
        feed(single, "fit", x[:30], y[:30], chunks=4)
        single.solve()
        direct = float(((single.predict(0, 0, x[30:45]) - y[30:45]) ** 2).sum())
        assert fitter.val_sse[(0, 0)][index] == pytest.approx(direct, rel=1e-9)
        # and the ridge solution is the penalised normal equations' one (bias unpenalised)
        xc = x[:30].numpy() - x[:30].numpy().mean(0)
        yc = y[:30].numpy() - y[:30].numpy().mean(0)
        lam = alpha * np.trace(xc.T @ xc) / 8
        ridge = np.linalg.solve(xc.T @ xc + lam * np.eye(8), xc.T @ yc)
        np.testing.assert_allclose(single.maps[(0, 0)][0].numpy(), ridge, rtol=1e-8, atol=1e-10)
    assert fitter.chosen[(0, 0)] == alphas[int(np.argmin(fitter.val_sse[(0, 0)]))]


def test_rank_deficient_sources_match_lstsq_minimum_norm():
    x, y, _, _ = planted(40, d_a=3, d_b=2, noise=0.1, seed=2)
    x = torch.cat([x, x[:, :1] * 2.0], dim=1)  # a duplicated direction
    fitter = AffineRidgeMaps([0], [0], alphas=[0.0])
    feed(fitter, "fit", x, y)
    fitter.solve()
    design = np.hstack([x.numpy(), np.ones((40, 1))])
    want = design @ np.linalg.lstsq(design, y.numpy(), rcond=None)[0]
    np.testing.assert_allclose(fitter.predict(0, 0, x).numpy(), want, atol=1e-8)


def tiny_pair():
    arch = dict(hidden_size=16, num_heads=2, intermediate_size=32)
    models = []
    for layers, seed in ((2, 0), (4, 1)):
        config = make_config(
            {**arch, "num_layers": layers}, "pre_ln", vocab_size=VOCAB, max_positions=64
        )
        models.append(build_model(config, seed).double().eval())
    return models


def reference_errors(source, target, batches, split_names, skip_first):
    """Per pair: numpy lstsq on all fit tokens (stored), mean relative error on test tokens."""
    from depthlab.linear_maps import stream_states

    store = {"fit": ([], []), "test": ([], [])}
    for batch, split in zip(batches, split_names):
        if split not in store:
            continue
        xs = next(stream_states(adapt(source), [batch], skip_first))
        ys = next(stream_states(adapt(target), [batch], skip_first))
        store[split][0].append(torch.stack(xs).numpy())
        store[split][1].append(torch.stack(ys).numpy())
    fx, fy = (np.concatenate(a, axis=1) for a in store["fit"])
    tx, ty = (np.concatenate(a, axis=1) for a in store["test"])
    errors = np.zeros((fx.shape[0], fy.shape[0]))
    for i in range(fx.shape[0]):
        design = np.hstack([fx[i], np.ones((fx.shape[1], 1))])
        test_design = np.hstack([tx[i], np.ones((tx.shape[1], 1))])
        for j in range(fy.shape[0]):
            solution = np.linalg.lstsq(design, fy[j], rcond=None)[0]
            error = np.linalg.norm(test_design @ solution - ty[j], axis=1)
            errors[i, j] = np.mean(error / np.linalg.norm(ty[j], axis=1))
    return errors


def test_two_models_streamed_in_blocks_equal_a_stored_reference():
    source, target = tiny_pair()
    batches = [random_batch([30, 25, 28], seed=s) for s in range(6)]
    names = ["fit", "fit", "fit", "val", "test", "test"]

    def by_split(split):
        return [b for b, n in zip(batches, names) if n == split]

    one = fit_linear_maps(
        adapt(source), adapt(target), by_split, alphas=[0.0], max_memory_mb=64, skip_first=1
    )
    # a memory cap that holds one target layer at a time: 5 blocks, same numbers
    cap = (3 * (4 * 16 * 16 * 8) + 3 * 2 * 16 * 16 * 8) / 2**20 + 1e-4
    blocked = fit_linear_maps(
        adapt(source), adapt(target), by_split, alphas=[0.0], max_memory_mb=cap, skip_first=1
    )
    assert one.blocks == 1 and blocked.blocks == 5
    np.testing.assert_allclose(blocked.relative_error, one.relative_error, rtol=1e-10)
    expected = reference_errors(source, target, batches, names, skip_first=1)
    np.testing.assert_allclose(one.relative_error, expected, rtol=1e-7, atol=1e-9)
    assert one.relative_error.shape == (3, 5)
    assert one.tokens["fit"] == 3 * (29 + 24 + 27)
    assert np.all(np.isfinite(one.relative_error)) and np.all(one.relative_error > 0)


def test_plan_and_validation_reject_bad_settings():
    assert plan_target_blocks(3, 5, 16, 16, 64) == [[0, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="max_memory_mb"):
        plan_target_blocks(30, 50, 1536, 5120, 100)
    good = dict(
        alphas=[0.0, 1e-3],
        val_fraction=0.1,
        test_fraction=0.2,
        max_memory_mb=256,
        max_length=64,
        batch_size=16,
        skip_first=1,
        max_documents=None,
    )
    validate_linear_map_settings(good)
    with pytest.raises(ValueError, match=r"depth_use\.linear_maps\.alphas"):
        validate_linear_map_settings({**good, "alphas": [0.0, float("inf")]})
    with pytest.raises(ValueError, match=r"depth_use\.linear_maps\.test_fraction"):
        validate_linear_map_settings({**good, "val_fraction": 0.5, "test_fraction": 0.5})
    assert {split_of(f"doc {i}", 0.2, 0.3) for i in range(200)} == {"fit", "val", "test"}
    assert split_of("same text", 0.2, 0.3) == split_of("same text", 0.2, 0.3)


def test_different_tokenizers_are_rejected(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    for name, words in (("a", ["x", "y", "z"]), ("b", ["x", "y", "w"]), ("c", ["x", "y", "z"])):
        tokenizer = Tokenizer(
            models.WordLevel({w: i for i, w in enumerate(["<eos>", *words])}, unk_token="<eos>")
        )
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer, eos_token="<eos>", pad_token="<eos>"
        ).save_pretrained(tmp_path / name)
    check_same_tokenizer(str(tmp_path / "a"), str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"depth_use\.linear_maps: .* different tokenizers"):
        check_same_tokenizer(str(tmp_path / "a"), str(tmp_path / "b"))


def test_script_fits_two_saved_models_and_rejects_foreign_tokenizers(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd
    from depthlab.models import save_checkpoint
    from depthlab.problem_sets import build_tokenizer
    from transformers import AutoTokenizer

    repo = Path(__file__).resolve().parents[1]
    tokenizer = build_tokenizer()
    texts = tmp_path / "texts.jsonl"
    rng = np.random.default_rng(0)
    words = [w for w in tokenizer.get_vocab() if not w.startswith("<")]
    texts.write_text(
        "".join(json.dumps({"text": " ".join(rng.choice(words, 20))}) + "\n" for _ in range(60))
    )
    for (layers, seed), name in zip(((2, 0), (3, 1)), ("a", "b")):
        config = make_config(
            {"hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "num_layers": layers},
            "pre_ln",
            vocab_size=len(tokenizer),
            max_positions=32,
        )
        save_checkpoint(build_model(config, seed), tokenizer, tmp_path / name)
    spec = {
        "pair": "a_to_b",
        "source_name": "a",
        "source_path": str(tmp_path / "a"),
        "target_name": "b",
        "target_path": str(tmp_path / "b"),
        "source_revision": None,
        "target_revision": None,
        "out": str(tmp_path / "maps"),
        "texts": {"source": "jsonl", "path": str(texts)},
        "text_field": "text",
        "add_special_tokens": False,
        "max_documents": None,
        "max_length": 32,
        "batch_size": 8,
        "skip_first": 1,
        "val_fraction": 0.2,
        "test_fraction": 0.3,
        "alphas": [0.0, 0.01],
        "max_memory_mb": 16,
        "error": "relative",
        "dtype": "float32",
        "device": "cpu",
    }
    script = repo / "workflow_scripts" / "linear_maps.py"
    run = subprocess.run(
        [sys.executable, str(script), "--spec", json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert run.returncode == 0, run.stderr
    frame = pd.read_csv(tmp_path / "maps" / "relative_error.csv")
    assert len(frame) == 3 * 4 and frame["relative_error"].gt(0).all()
    best = pd.read_csv(tmp_path / "maps" / "best_target.csv")
    assert list(best["source_layer"]) == [0, 1, 2]
    # a target model with another tokenizer: the config resolver refuses such a pair of local
    # checkpoints before any job runs (its _check_same_tokens runs check_same_tokenizer); the job
    # itself compares the tokenizers only when a model is a hub id (known once downloaded)
    tokenizer_file = tmp_path / "b" / "tokenizer.json"
    content = json.loads(tokenizer_file.read_text())
    vocab = content["model"]["vocab"]  # same size, two words swapped
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]
    tokenizer_file.write_text(json.dumps(content))
    assert (
        AutoTokenizer.from_pretrained(tmp_path / "b").get_vocab()["a"] == tokenizer.get_vocab()["b"]
    )
    with pytest.raises(ValueError, match=r"^spec: models .* have different tokenizers"):
        check_same_tokenizer(spec["source_path"], spec["target_path"], where="spec")
