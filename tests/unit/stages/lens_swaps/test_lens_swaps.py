"""The tuned lens and the layer swaps against independent computations: a translator trained on
planted linear states recovers the planted map; every swap / deletion replay equals a model
rebuilt with its layers reordered / removed; KL, cross-entropy, top-1 agreement and the swap
scores equal direct formulas."""

import copy
import inspect
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from depthlab.models.architectures import adapt
from depthlab.stages.lens_swaps.layer_swaps import (
    replay,
    scored_positions,
    scored_tokens,
    swap_effects,
    variant_order,
    variants,
)
from depthlab.stages.lens_swaps.tuned_lens import (
    LensSettings,
    LensStatistics,
    Translators,
    lens_measures,
    readout,
    train_translators,
)
from depthlab.stages.pruning.layer_removal import (
    _layer_container,
    _set_config,
    config_updates,
    prune_copy,
)
from depthlab.stages.residual_stream import clean_pass
from scipy.special import log_softmax
from script_runs import run_stage_script
from test_pruning import make
from tiny_models import FAMILIES, build, random_batch

torch.set_num_threads(1)
CAUSAL = [f for f in FAMILIES if f != "bert"]


# -- the tuned lens ----------------------------------------------------------------------------


class LinearHead(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        with torch.no_grad():
            self.head.weight.copy_(weight)
        self.config = SimpleNamespace()


def planted(hidden=6, vocab=24, tokens=512, layers=2, data_seed=0):
    """A frozen linear head and states whose final state is A* h + b* of each layer's state
    (the head and maps fixed; the states drawn from `data_seed`)."""
    g = torch.Generator().manual_seed(0)
    head = LinearHead(torch.randn(vocab, hidden, generator=g))
    adapter = SimpleNamespace(model=head, logits=head.head)
    A = torch.eye(hidden) + 0.5 * torch.randn(hidden, hidden, generator=g) / hidden**0.5
    b = 0.5 * torch.randn(hidden, generator=g)
    h = torch.randn(layers, tokens, hidden, generator=torch.Generator().manual_seed(data_seed))
    final = h[0] @ A.T + b
    # layer 1 holds a second planted map: final = A1 h1 + b1 with h1 = A1^-1 (final - b1)
    A1 = torch.eye(hidden) * 1.5
    b1 = -0.3 * torch.ones(hidden)
    h[1] = (final - b1) @ torch.linalg.inv(A1).T
    pool = torch.cat([h, final.unsqueeze(0)])
    return adapter, pool, [(A, b), (A1, b1)]


def test_translator_recovers_planted_map():
    adapter, pool, maps = planted()
    settings = LensSettings(train_tokens=512, steps=400, batch_tokens=256, lr=0.05, seed=0)
    translators, log = train_translators(adapter, pool, settings)
    A, b = translators.matrices()
    for l, (A_true, b_true) in enumerate(maps):
        assert torch.allclose(A[l], A_true, atol=2e-2), (l, (A[l] - A_true).abs().max())
        assert torch.allclose(b[l], b_true, atol=2e-2), (l, (b[l] - b_true).abs().max())
    assert log.loss[0] > 0.05 and log.loss[-1] < 1e-3
    assert len(log.loss) == settings.steps and log.optimizer == "adam"
    # linear decay to 0 (the paper's schedule): step k runs at lr (1 - k / steps)
    assert log.lr_per_step == pytest.approx([0.05 * (1 - k / 400) for k in range(400)])
    # the identity (the logit lens) is far from it; the trained lens' KL on held-out states ~0
    _, held_pool, _ = planted(tokens=128, data_seed=1)
    stats = LensStatistics(2, translators)
    targets = torch.zeros(128, dtype=torch.long)
    stats.add(readout(adapter), held_pool, targets)
    frame = stats.frame().set_index(["lens", "measure", "layer"])["value"]
    for l in range(2):
        assert frame[("tuned", "kl", l)] < 1e-3
        assert frame[("logit", "kl", l)] > 0.05
    assert frame[("tuned", "kl", 2)] == frame[("logit", "kl", 2)] == 0.0


def test_identity_init_is_the_logit_lens():
    translators = Translators(3, 5)
    h = torch.randn(7, 5)
    for l in range(3):
        assert torch.equal(translators(l, h), h)
    A, b = translators.matrices()
    assert torch.equal(A[1], torch.eye(5)) and torch.equal(b, torch.zeros(3, 5))
    again = Translators.from_matrices(A * 2, b + 1)
    assert torch.allclose(again(0, h), h @ (2 * torch.eye(5)).T + 1)


def test_lens_measures_equal_direct_formulas():
    rng = np.random.default_rng(0)
    lens = log_softmax(rng.normal(size=(3, 10, 7)), axis=-1)
    final = log_softmax(rng.normal(size=(10, 7)), axis=-1)
    targets = rng.integers(0, 7, size=10)
    kl, ce, agree = lens_measures(torch.tensor(lens), torch.tensor(final), torch.tensor(targets))
    p = np.exp(final)
    for l in range(3):
        q = np.exp(lens[l])
        np.testing.assert_allclose(kl[l].numpy(), (p * np.log(p / q)).sum(-1), rtol=1e-10)
        np.testing.assert_allclose(ce[l].numpy(), -np.log(q[np.arange(10), targets]), rtol=1e-10)
        np.testing.assert_array_equal(agree[l].numpy(), q.argmax(-1) == p.argmax(-1))


def test_readout_applies_the_softcap():
    model = build("llama")
    adapter = adapt(model)
    h = torch.randn(4, 32)
    plain = readout(adapter)(h)
    model.config.final_logit_softcapping = 0.5
    capped = readout(adapter)(h)
    torch.testing.assert_close(capped, 0.5 * torch.tanh(plain / 0.5))
    assert capped.abs().max() <= 0.5


@pytest.mark.parametrize("family", [*CAUSAL, "gemma3_softcap"])
def test_tuned_lens_beats_logit_lens_on_a_real_model(family):
    """On a tiny model's own states (its final state as the target), training lowers the
    held-out KL of the tuned lens below the logit lens' at every layer but the last."""
    model = make(family)
    adapter = adapt(model)
    L = adapter.num_layers

    def states(seed):
        batch = random_batch([16] * 16, seed=seed)
        with torch.no_grad():
            s, _ = clean_pass(adapter, batch["input_ids"], batch["attention_mask"])
        return torch.stack([x.reshape(-1, x.shape[-1]) for x in s]).clone()

    train, held = states(0), states(1)
    settings = LensSettings(train_tokens=256, steps=60, batch_tokens=128, lr=1e-2)
    translators, log = train_translators(adapter, train, settings)
    assert log.loss[-1] < log.loss[0]
    stats = LensStatistics(L, translators)
    stats.add(readout(adapter), held, torch.zeros(held.shape[1], dtype=torch.long))
    frame = stats.frame().set_index(["lens", "measure", "layer"])["value"]
    for l in range(L):
        tuned, logit = frame[("tuned", "kl", l)], frame[("logit", "kl", l)]
        # where the logit lens is already at the output (KL ~1e-7), within float noise of it
        assert tuned < logit if logit > 1e-4 else tuned < logit + 1e-6, (l, tuned, logit)


def test_a_bfloat16_model_trains_and_reads_its_lens():
    """The pool is float32; a bf16 model's head reads it in bf16 (no dtype error), and the swaps
    run in bf16 too."""
    model = build("llama", dtype=torch.bfloat16)
    adapter = adapt(model)
    batch = random_batch([12] * 8)
    with torch.no_grad():
        states, _ = clean_pass(adapter, batch["input_ids"], batch["attention_mask"])
    pool = torch.stack([s.reshape(-1, s.shape[-1]) for s in states]).float()
    translators, log = train_translators(adapter, pool, LensSettings(96, 3, 32, 1e-3))
    assert all(np.isfinite(log.loss)) and translators.weight.dtype == torch.float32
    stats = LensStatistics(adapter.num_layers, translators)
    with torch.no_grad():
        stats.add(readout(adapter), torch.stack([s.reshape(-1, s.shape[-1]) for s in states]),
                  batch["input_ids"].reshape(-1))  # fmt: skip
    assert np.isfinite(stats.frame()["value"]).all()
    result = swap_effects(adapter, [batch])
    assert np.isfinite(result.frame()["loss"]).all()


# -- swaps and deletions -----------------------------------------------------------------------


def reordered_copy(model, order):
    """An independent model whose decoder list holds the layers in `order` (copies)."""
    copied = copy.deepcopy(model)
    adapter = adapt(copied)
    parent, name = _layer_container(adapter)
    layers = getattr(parent, name)
    setattr(parent, name, torch.nn.ModuleList([layers[i] for i in order]))
    _set_config(copied.config, config_updates(copied.config, order, adapter.num_layers))
    return copied


def model_logits(model, batch):
    position_ids = (batch["attention_mask"].cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        kwargs = dict(batch)
        if "position_ids" in inspect.signature(model.forward).parameters:
            kwargs["position_ids"] = position_ids
        return model(**kwargs, use_cache=False).logits


def test_variant_orders():
    assert variant_order("swap", 1, 4) == [0, 2, 1, 3]
    assert variant_order("delete", 3, 4) == [0, 1, 2]
    assert len(variants(5)) == 4 + 5
    with pytest.raises(ValueError, match="swap"):
        variant_order("swap", 3, 4)


@pytest.mark.parametrize("family", [*CAUSAL, "qwen2_sliding", "gemma3_softcap"])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_replay_equals_rebuilt_model(family, padding_side):
    """Every family, plus alternating sliding / full attention layers (a moved layer keeps its
    kind, as the rebuilt model's permuted layer_types say) and Gemma 3's final-logit softcap (the
    readout applies it as the model's forward does)."""
    model = make(family)
    adapter = adapt(model)
    L = adapter.num_layers
    batch = random_batch([9, 6, 4], padding_side=padding_side)
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        states, calls = clean_pass(adapter, batch["input_ids"], batch["attention_mask"])
        for kind, l in variants(L):
            order = variant_order(kind, l, L)
            rebuilt = prune_copy(model, [l]) if kind == "delete" else reordered_copy(model, order)
            expected = model_logits(rebuilt, batch)[mask]
            got = readout(adapter)(replay(adapter, states, calls, kind, l))[mask]
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
            if kind == "swap":  # the swap changes the output far more than the replay errs
                change = (got - model_logits(model, batch)[mask]).abs().max()
                assert change > 10 * (got - expected).abs().max() and change > 1e-6


def test_swap_effects_equal_direct_scores():
    model = build("llama")
    adapter = adapt(model)
    L = adapter.num_layers
    batches = [random_batch([9, 6, 4], seed=0), random_batch([7, 7], seed=1, padding_side="left")]
    result = swap_effects(adapter, batches)
    frame = result.frame().set_index(["kind", "layer"])

    def scores(m, intact_top1=None):
        loss = correct = agree = tokens = 0
        tops = []
        for i, batch in enumerate(batches):
            logp = torch.log_softmax(model_logits(m, batch).double(), -1)
            here, nxt = scored_positions(batch["attention_mask"])
            rows = logp.reshape(-1, logp.shape[-1])[here]
            targets = batch["input_ids"].reshape(-1)[nxt]
            loss -= rows[torch.arange(len(here)), targets].sum().item()
            top = rows.argmax(-1)
            correct += (top == targets).sum().item()
            if intact_top1 is not None:
                agree += (top == intact_top1[i]).sum().item()
            tokens += len(here)
            tops.append(top)
        return loss / tokens, correct / tokens, agree / tokens, tops, tokens

    loss, acc, _, tops, tokens = scores(model)
    assert result.tokens == tokens == 8 + 5 + 3 + 6 + 6
    assert frame.loc[("intact", -1), "loss"] == pytest.approx(loss, rel=1e-5)
    assert frame.loc[("intact", -1), "accuracy"] == pytest.approx(acc)
    for kind, l in variants(L):
        rebuilt = (
            prune_copy(model, [l])
            if kind == "delete"
            else reordered_copy(model, variant_order(kind, l, L))
        )
        v_loss, v_acc, v_agree, _, _ = scores(rebuilt, tops)
        row = frame.loc[(kind, l)]
        assert row["loss"] == pytest.approx(v_loss, rel=1e-5)
        assert row["accuracy"] == pytest.approx(v_acc)
        assert row["agreement"] == pytest.approx(v_agree)
        assert row["kept_accuracy"] == pytest.approx(v_acc / acc if acc else np.nan, nan_ok=True)


def test_training_minimises_kl_from_the_final_distribution():
    """The logged loss of the first step (identity translators, every pool token) is the mean
    over layers of KL(p_L || q_l) computed directly; not the reverse KL."""
    adapter, pool, _ = planted(tokens=64)
    settings = LensSettings(train_tokens=64, steps=1, batch_tokens=64, lr=1e-3)
    _, log = train_translators(adapter, pool, settings)
    weight = adapter.model.head.weight.detach().double().numpy()
    states = pool.double().numpy()
    final = log_softmax(states[-1] @ weight.T, axis=-1)
    direct = [
        (np.exp(final) * (final - log_softmax(states[l] @ weight.T, axis=-1))).sum(-1).mean()
        for l in range(2)
    ]
    assert log.loss[0] == pytest.approx(np.mean(direct), rel=1e-5)
    assert log.final_layer_loss == pytest.approx(direct, rel=1e-5)


# -- the job ---------------------------------------------------------------------------------------


def test_job_end_to_end_trains_on_train_documents_only(tmp_path, data_dir, monkeypatch):
    """The lens_swaps job on a tiny saved model and the test config's data: its outputs, the
    translators read back from safetensors, training documents from train.bin only (none of the
    evaluation documents), and the claims table reading the folder."""
    import json

    import depthlab.data.model_tokens as model_tokens
    import pandas as pd
    from depthlab.claims import build_claims
    from depthlab.claims.run_data import read_run_data
    from depthlab.data.model_tokens import run_tokenizer, val_documents
    from depthlab.models.decoders import build_model, make_config
    from depthlab.stages.lens_swaps.stage import run
    from safetensors.torch import load_file

    tokenizer = run_tokenizer(data_dir)
    architecture = dict(hidden_size=32, num_layers=4, num_heads=2, intermediate_size=64)
    model = build_model(make_config(architecture, "lns", len(tokenizer), 64), 0)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    trained_on = []
    original = model_tokens.train_documents

    def recording(data, **kwargs):
        for text in original(data, **kwargs):
            trained_on.append(text)
            yield text

    monkeypatch.setattr(model_tokens, "train_documents", recording)
    val = {"source": "jsonl", "path": str(data_dir / "val.jsonl"), "input": str(data_dir)}
    spec = {
        "model_name": "tiny", "model_path": str(folder), "dtype": "float32", "revision": None,
        "train_data": str(data_dir), "text_sets": {"val": val, "val_1": {**val, "shard": [1, 2]}},
        "text_field": "text", "max_samples": 4, "max_length": 16, "batch_size": 2, "stride": 1,
        "add_special_tokens": False, "seed": 0, "device": "cpu",
        "tuned_lens": {"train_tokens": 96, "steps": 5, "batch_tokens": 32, "lr": 1e-3},
        "out": str(tmp_path / "out"),
    }  # fmt: skip
    summary = run(spec, log=lambda message: None)
    out = tmp_path / "out"
    assert trained_on and not set(trained_on) & set(val_documents(data_dir))
    assert summary["train_tokens"] == 96
    tensors = load_file(str(out / "translators.safetensors"))
    assert tensors["A"].shape == (4, 32, 32) and tensors["b"].shape == (4, 32)
    training = json.loads((out / "lens_training.json").read_text())
    assert len(training["loss"]) == 5 and training["steps"] == 5 and training["lr"] == 1e-3
    for text_set in ("val", "val_1"):
        lens = pd.read_csv(out / text_set / "lens.csv")
        swaps = pd.read_csv(out / text_set / "swaps.csv")
        assert set(lens["lens"]) == {"logit", "tuned"} and lens["layer"].max() == 4
        assert (
            len(swaps) == 1 + 3 + 4 and (swaps["tokens"] == summary["eval_tokens"][text_set]).all()
        )
    assert json.loads((out / "provenance.json").read_text())["stage"] == "lens_swaps"
    assert not list(tmp_path.rglob("*.png"))  # the figure is the plot job's, not the lens job's

    # the figure's own job reads the tables back and trains nothing
    tables = {p: p.read_bytes() for p in out.rglob("*.csv")}
    figure = tmp_path / "figures" / "tiny.png"
    plot_spec = {"model_name": "tiny", "lens_swaps": str(out), "text_sets": ["val", "val_1"],
                 "figure": str(figure)}  # fmt: skip
    result = run_stage_script("plot_lens_swaps.py", plot_spec, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert figure.stat().st_size > 10_000
    record = json.loads((tmp_path / "figures" / "tiny.provenance.json").read_text())
    assert record["stage"] == "figures.lens_swaps"
    assert sorted(record["inputs"]) == sorted(str(p) for p in tables)
    assert {p: p.read_bytes() for p in out.rglob("*.csv")} == tables

    empty = {k: {} for k in ("models", "analysis", "pruning", "depth_score", "linear_maps", "fits")}
    data = read_run_data(
        {**empty, "data": [], "cod_pairs": [], "pruning_groups": {}, "depth_groups": {},
         "map_groups": {}, "bootstrap": {"resamples": 10, "seed": 0},
         "lens_swaps": {"folders": {"tiny": [str(out / "val"), str(out / "val_1")]},
                        "groups": {"tiny": ["tiny"]}}}
    )  # fmt: skip
    table = build_claims(data)
    assert set(table["claim_id"]) == {"belrose_tuned_lens:tiny", "lad_layer_swaps:tiny"}
    rows = table.set_index("claim_id")
    assert "2 document shards" in rows.loc["belrose_tuned_lens:tiny", "interval"]
    # an untrained model's intact top-1 accuracy may be 0: no kept share, so not testable
    lad = rows.loc["lad_layer_swaps:tiny"]
    assert "2 document shards" in lad["interval"] or lad["verdict"] == "not testable at this scale"


def test_stride_does_not_depend_on_batching():
    batch = random_batch([9, 6, 4])
    here, nxt = scored_positions(batch["attention_mask"])
    every, every_next, seen = scored_tokens(batch["attention_mask"], stride=3)
    assert seen == here.numel() == 8 + 5 + 3
    assert torch.equal(every, here[::3]) and torch.equal(every_next, nxt[::3])
    # split into two batches: the second continues the count of the first
    first = {k: v[:1] for k, v in batch.items()}
    rest = {k: v[1:] for k, v in batch.items()}
    a, _, seen = scored_tokens(first["attention_mask"], 3, 0)
    b, _, _ = scored_tokens(rest["attention_mask"], 3, seen)
    assert len(a) + len(b) == len(every)
