"""Closed-form cross-model linear maps: recover a planted affine relation, match
numpy.linalg.lstsq, choose alpha by a closed-form validation error that equals the directly
computed one, give the same matrix whatever the memory blocks, and refuse bad settings. Models
with different tokenizers: the word-end alignment on hand-made tokenizations, on two real
tokenizers (against their decoded prefixes), the paired states against the models' own hidden
states, and the stage end to end against a stored least-squares reference."""

import copy
import json
import re

import numpy as np
import pytest
import torch
from depthlab.models.architectures import adapt
from depthlab.models.decoders import build_model, make_config
from depthlab.settings.depth_use import check_same_tokenizer
from depthlab.stages.depth_use.linear_maps import (
    AffineRidgeMaps,
    aligned_states,
    encode_with_offsets,
    fit_linear_maps,
    paired_batches,
    plan_target_blocks,
    split_of,
    word_end_pairs,
    word_ends,
)
from script_runs import run_stage_script
from tiny_models import VOCAB, random_batch

torch.set_num_threads(1)


def pair_paths(tmp_path) -> dict:
    """The spec keys of a pair a_to_b of two checkpoints saved at tmp_path/a and tmp_path/b, the
    maps written to tmp_path/maps."""
    return {
        "pair": "a_to_b",
        "source_name": "a",
        "source_path": str(tmp_path / "a"),
        "target_name": "b",
        "target_path": str(tmp_path / "b"),
        "source_revision": None,
        "target_revision": None,
        "out": str(tmp_path / "maps"),
    }


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
    from depthlab.stages.depth_use.linear_maps import stream_states

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


def test_plan_rejects_bad_settings_and_splits_are_stable():
    assert plan_target_blocks(3, 5, 16, 16, 64) == [[0, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="max_memory_mb"):
        plan_target_blocks(30, 50, 1536, 5120, 100)
    assert {split_of(f"doc {i}", 0.2, 0.3) for i in range(200)} == {"fit", "val", "test"}
    assert split_of("same text", 0.2, 0.3) == split_of("same text", 0.2, 0.3)
    # the splits are part of every recorded result: pinned for 40 documents (a moved module once
    # changed the salt, and with it which documents fit and which are held out)
    recorded = "ffvvffvftfvfvtffftttfffftfftvvfffvvvvfvf"
    assert "".join(split_of(f"document {i}", 0.2, 0.2)[0] for i in range(40)) == recorded


def test_script_fits_two_saved_models_and_rejects_foreign_tokenizers(tmp_path):

    import pandas as pd
    from depthlab.data.problem_sets import build_tokenizer
    from depthlab.models.decoders import save_checkpoint
    from transformers import AutoTokenizer

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
        **pair_paths(tmp_path),
        "texts": {"source": "jsonl", "path": str(texts)},
        "text_field": "text",
        "add_special_tokens": False,
        "target_add_special_tokens": False,
        "alignment": "auto",  # one tokenizer: auto keeps the position-by-position pairing
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
    run = run_stage_script("linear_maps.py", spec)
    assert run.returncode == 0, run.stderr
    frame = pd.read_csv(tmp_path / "maps" / "relative_error.csv")
    assert len(frame) == 3 * 4 and frame["relative_error"].gt(0).all()
    best = pd.read_csv(tmp_path / "maps" / "best_target.csv")
    assert list(best["source_layer"]) == [0, 1, 2]
    summary = json.loads((tmp_path / "maps" / "summary.json").read_text())
    assert summary["alignment"] == "positions"
    for split in ("fit", "val", "test"):
        streams = summary["streams"][split]
        assert streams["pairs"] == summary["tokens"][split]
        # 20 one-token words per document, skip_first = 1
        assert streams["pairs"] == streams["documents"] * 19
        assert streams["source_tokens"] == streams["target_tokens"] == streams["documents"] * 20
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


# ---------------------------------------------------------------------------------------------
# Models with different tokenizers: pairs at shared word ends


def test_word_ends_are_the_ends_of_non_whitespace_runs():
    assert word_ends("Hello, world!  x\n") == {6, 13, 16}
    assert word_ends(" \n\t") == set()


def test_word_end_pairs_on_hand_made_tokenizations():
    # merges differ: un|believ|able|_results against unbeliev|able|_res|ults
    text = "unbelievable results"
    source = [(0, 2), (2, 8), (8, 12), (12, 20)]
    target = [(0, 8), (8, 12), (12, 16), (16, 20)]
    assert word_end_pairs(text, source, target) == [(2, 1), (3, 3)]
    # a length limit cuts one stream shorter: only pairs inside both cut streams
    assert word_end_pairs(text, source, target, source_length=3) == [(2, 1)]
    assert word_end_pairs(text, source, target, target_length=3) == [(2, 1)]
    assert word_end_pairs(text, source, target, target_length=1) == []

    # GPT-2-style offsets without the leading space against SentencePiece-style offsets with it;
    # a BOS and an EOS (no characters) in the target only; punctuation attached to words; the
    # target's "!_" swallows the following space, so "world!" ends no target token
    text = "Hello, world! Bye"
    source = [(0, 5), (5, 6), (7, 12), (12, 13), (14, 17)]  # Hello , world ! Bye
    target = [
        (0, 0),
        (0, 6),
        (6, 12),
        (12, 14),
        (14, 17),
        (0, 0),
    ]  # <bos> _Hello, _world !_ Bye </s>
    assert word_end_pairs(text, source, target) == [(1, 1), (4, 4)]
    assert word_end_pairs(text, source, target, skip_first=2) == [(4, 4)]

    # skip_first counts each stream's own positions: the BOS-less source's first token is its sink
    text = "Hi there"
    source = [(0, 2), (2, 8)]
    target = [(0, 0), (0, 2), (2, 8)]
    assert word_end_pairs(text, source, target) == [(0, 1), (1, 2)]
    assert word_end_pairs(text, source, target, skip_first=1) == [(1, 2)]

    # a two-byte character split over byte tokens (each with the character's offsets) pairs at
    # its last byte; a cut between the bytes leaves the word unpaired
    text = "café au"
    source = [(0, 3), (3, 4), (3, 4), (4, 7)]  # caf \xc3 \xa9 _au
    target = [(0, 4), (4, 7)]
    assert word_end_pairs(text, source, target) == [(2, 0), (3, 1)]
    assert word_end_pairs(text, source, target, source_length=2) == []
    assert word_end_pairs(text, source, target, source_length=3) == [(2, 0)]
    # a byte token that joins the character's second byte to the next word: "caf\xc3" ends at
    # 4 by its offsets but has not read the whole "é"
    assert word_end_pairs(text, [(0, 4), (3, 7)], target) == [(1, 1)]

    # whitespace runs and newlines: a space-only token, a token spanning two spaces
    text = "a  b\n"
    source = [(0, 1), (1, 2), (2, 4), (4, 5)]  # a _ _b \n
    target = [(0, 1), (1, 4), (4, 5)]  # a __b \n
    assert word_end_pairs(text, source, target) == [(0, 0), (2, 1)]
    # one tokenization against itself: every word-final token with itself
    assert word_end_pairs(text, source, source) == [(0, 0), (2, 2)]


CORPUS_WORDS = (
    "The unbelievable results of Dr. Smith's café, naïve tests: 42 apples! Unbelievable! "
    "Results were good, and the café was open. résumé für Straße über alles; un believ able"
).split()


def two_tokenizers():
    """Two real fast tokenizers trained on one small corpus: the run's byte-level BPE (GPT-2 /
    SmolLM2 style: leading space inside a token, multi-byte characters split over byte tokens,
    no special tokens added) and a SentencePiece-style BPE (a leading "_" for the space, a BOS
    template, Gemma style), with different vocabularies and merges."""
    from depthlab.data.prepare import hf_tokenizer, train_bpe
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = documents(60, seed=0)
    byte_level = hf_tokenizer(train_bpe(corpus, 600))
    sentencepiece = Tokenizer(models.BPE(unk_token="<unk>"))
    # split before each space, kept as a leading "_"; a newline does not split, so a merge may
    # run across a word's end into the next line
    sentencepiece.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    sentencepiece.decoder = decoders.Metaspace(prepend_scheme="first")
    sentencepiece.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"], show_progress=False
        ),
    )
    sentencepiece.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", sentencepiece.token_to_id("<bos>"))]
    )
    metaspace = PreTrainedTokenizerFast(
        tokenizer_object=sentencepiece,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    return byte_level, metaspace


def documents(count, seed):
    """Texts of corpus words with single and double spaces and newlines between them."""
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        words = rng.choice(CORPUS_WORDS, int(rng.integers(4, 14)))
        gaps = rng.choice([" ", " ", " ", "  ", "\n"], len(words) - 1)
        texts.append("".join(w + g for w, g in zip(words, gaps)) + words[-1])
    return texts


def decoded_word_ends(tokenizer, ids, text):
    """{word end e: position}: the last position whose decoded prefix is exactly text[:e] (an
    independent reading of 'the stream has read exactly text[:e]', from decoding, not offsets)."""
    ends = {m.end() for m in re.finditer(r"\S+", text)}
    found = {}
    for position in range(len(ids)):
        prefix = tokenizer.decode(
            ids[: position + 1], skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        if len(prefix) in ends and text[: len(prefix)] == prefix:
            found[len(prefix)] = position
    return found


def expected_pairs(text, source_tokenizer, target_tokenizer, max_length, skip_first):
    source_ids = source_tokenizer(text, add_special_tokens=False)["input_ids"]
    target_ids = target_tokenizer(text, add_special_tokens=True)["input_ids"]
    source = decoded_word_ends(source_tokenizer, source_ids, text)
    target = decoded_word_ends(target_tokenizer, target_ids, text)
    pairs = [
        (source[e], target[e])
        for e in sorted(source.keys() & target.keys())
        if skip_first <= min(source[e], target[e]) and max(source[e], target[e]) < max_length
    ]
    return pairs, source_ids[:max_length], target_ids[:max_length]


def test_word_end_pairs_of_two_real_tokenizers_equal_their_decoded_prefixes():
    from depthlab.stages.residual_stream import document_ids

    byte_level, metaspace = two_tokenizers()
    assert byte_level.get_vocab() != metaspace.get_vocab()
    total = unpaired = 0
    for text in documents(30, seed=1):
        source_ids, source_offsets = encode_with_offsets(byte_level, text, False)
        target_ids, target_offsets = encode_with_offsets(metaspace, text, True)
        # the ids the models read are those of the position-by-position path
        assert source_ids == document_ids(text, byte_level, 10**6, False)
        assert target_ids == document_ids(text, metaspace, 10**6, True)
        assert target_ids[0] == metaspace.bos_token_id and source_ids[0] != byte_level.bos_token_id
        for max_length, skip_first in ((10**6, 0), (9, 1)):
            want, _, _ = expected_pairs(text, byte_level, metaspace, max_length, skip_first)
            got = word_end_pairs(
                text, source_offsets, target_offsets, skip_first, max_length, max_length
            )
            assert got == want, text
        total += len(text.split())
        unpaired += len(text.split()) - len(word_end_pairs(text, source_offsets, target_offsets))
    # the tokenizers disagree on some word ends (a word the target merges with the next
    # space...), and most words pair
    assert 0 < unpaired < total / 2


def tiny_hf_lm(kind, vocab, hidden, layers, seed):
    import transformers as tf

    torch.manual_seed(seed)
    config_class, model_class = {
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
        "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
    }[kind]
    config = config_class(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    return model_class(config).eval()


def own_hidden_states(model, ids):
    """h_0..h_L of one unpadded document from the model's own output_hidden_states, the final
    norm taken out (HF applies it to the last hidden state; the stream is read before it)."""
    bare = copy.deepcopy(model)
    bare.model.norm = torch.nn.Identity()
    with torch.no_grad():
        out = bare(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return torch.stack(out.hidden_states)[:, 0]  # (L + 1, T, d)


def test_paired_states_are_the_models_hidden_states_at_shared_word_ends():
    byte_level, metaspace = two_tokenizers()
    metaspace.padding_side = "left"  # the two streams padded on opposite sides
    # float32: transformers' eager mask turns left-padded float64 rows into NaN
    source = tiny_hf_lm("llama", len(byte_level), 16, 2, seed=0)
    target = tiny_hf_lm("qwen2", len(metaspace), 24, 3, seed=1)
    texts = documents(7, seed=2)
    max_length, skip_first = 16, 1
    batches = list(
        paired_batches(
            texts,
            byte_level,
            metaspace,
            max_length,
            batch_size=3,
            add_special_tokens=(False, True),
            skip_first=skip_first,
        )
    )
    seen = []
    for batch in batches:
        xs, ys = aligned_states(adapt(source), adapt(target), batch)
        assert len(xs) == 3 and len(ys) == 4
        row = 0
        for pairs, document in zip(batch.pairs, batch.documents):
            want, source_ids, target_ids = expected_pairs(
                texts[document], byte_level, metaspace, max_length, skip_first
            )
            assert pairs == want
            i, j = (list(p) for p in zip(*want))
            x = own_hidden_states(source, source_ids)[:, i]
            y = own_hidden_states(target, target_ids)[:, j]
            n = len(want)
            torch.testing.assert_close(torch.stack(xs)[:, row : row + n], x, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(torch.stack(ys)[:, row : row + n], y, rtol=1e-5, atol=1e-5)
            row += n
            seen.append(document)
        assert row == xs[0].shape[0] == ys[0].shape[0]
    # every document with a pair is read once; padding happened in both streams
    assert sorted(seen) == [
        d
        for d, t in enumerate(texts)
        if expected_pairs(t, byte_level, metaspace, max_length, skip_first)[0]
    ]
    assert any(not b.source["attention_mask"].all() for b in batches)
    assert any(not b.target["attention_mask"].all() for b in batches)


def test_stage_fits_word_end_maps_between_two_tokenizers(tmp_path):
    import pandas as pd
    from depthlab.stages.depth_use.linear_map_stage import run

    byte_level, metaspace = two_tokenizers()
    models = {
        "a": (tiny_hf_lm("llama", len(byte_level), 8, 2, seed=3), byte_level),
        # llama: transformers loads a qwen2 folder's tokenizer as Qwen2Tokenizer, whose own
        # pre-tokenizer would replace the saved one
        "b": (tiny_hf_lm("llama", len(metaspace), 12, 3, seed=4), metaspace),
    }
    for name, (model, tokenizer) in models.items():
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    texts = documents(80, seed=5)
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    spec = {
        **pair_paths(tmp_path),
        "texts": {"source": "jsonl", "path": str(tmp_path / "texts.jsonl")},
        "text_field": "text",
        "add_special_tokens": False,
        "target_add_special_tokens": True,
        "alignment": "auto",  # different tokenizers: word ends
        "max_documents": None,
        "max_length": 16,
        "batch_size": 8,
        "skip_first": 1,
        "val_fraction": 0.2,
        "test_fraction": 0.3,
        "alphas": [0.0],
        "max_memory_mb": 16,
        "error": "relative",
        "dtype": "float32",
        "device": "cpu",
    }
    lines = []
    summary = run(spec, log=lines.append)
    assert summary["alignment"] == "word_ends"
    assert any(line.startswith("alignment word_ends: fit ") for line in lines)
    # independent reference: each document's own hidden states at its decoded word ends,
    # stored per split, least squares with an intercept, mean relative error on test
    store = {split: ([], [], 0, 0, 0) for split in ("fit", "val", "test")}
    for text in texts:
        pairs, source_ids, target_ids = expected_pairs(text, byte_level, metaspace, 16, 1)
        if not pairs:
            continue
        split = split_of(text, 0.2, 0.3)
        xs, ys, documents_, source_tokens, target_tokens = store[split]
        i, j = (list(p) for p in zip(*pairs))
        xs.append(own_hidden_states(models["a"][0], source_ids)[:, i].double().numpy())
        ys.append(own_hidden_states(models["b"][0], target_ids)[:, j].double().numpy())
        store[split] = (
            xs,
            ys,
            documents_ + 1,
            source_tokens + len(source_ids),
            target_tokens + len(target_ids),
        )
    for split, (xs, _, documents_, source_tokens, target_tokens) in store.items():
        pairs = sum(x.shape[1] for x in xs)
        assert summary["streams"][split] == {
            "documents": documents_,
            "source_tokens": source_tokens,
            "target_tokens": target_tokens,
            "pairs": pairs,
        }
        assert summary["tokens"][split] == pairs
    fx, fy = (np.concatenate(a, axis=1) for a in store["fit"][:2])
    tx, ty = (np.concatenate(a, axis=1) for a in store["test"][:2])
    assert fx.shape[1] > 3 * fx.shape[2]  # well-posed least squares
    frame = pd.read_csv(tmp_path / "maps" / "relative_error.csv")
    assert len(frame) == 3 * 4
    for row in frame.itertuples():
        design = np.hstack([fx[row.source_layer], np.ones((fx.shape[1], 1))])
        solution = np.linalg.lstsq(design, fy[row.target_layer], rcond=None)[0]
        test_design = np.hstack([tx[row.source_layer], np.ones((tx.shape[1], 1))])
        error = np.linalg.norm(test_design @ solution - ty[row.target_layer], axis=1)
        want = np.mean(error / np.linalg.norm(ty[row.target_layer], axis=1))
        assert row.relative_error == pytest.approx(want, rel=1e-4)
    provenance = json.loads((tmp_path / "maps" / "provenance.json").read_text())
    assert provenance["summary"]["alignment"] == "word_ends"


def test_positions_alignment_refuses_different_tokenizers_and_word_ends_resolve(tmp_path):
    from pathlib import Path

    from depthlab.config import ConfigError, load_config, resolve

    config = load_config(Path(__file__).resolve().parents[4] / "config" / "default.yaml")
    maps = config["depth_use"]["linear_maps"]
    maps["pairs"] = {"x": {"source": "depth_problems", "target": "lns"}}
    with pytest.raises(ConfigError, match=r"^depth_use\.linear_maps\.pairs\.x: .* different data"):
        resolve(config)
    maps["alignment"] = "positions"
    with pytest.raises(ConfigError, match=r"^depth_use\.linear_maps\.pairs\.x: .* different data"):
        resolve(config)
    maps["alignment"] = "word_ends"
    maps["max_length"] = 16  # depth_problems' training length
    specs = resolve(config).jobs("linear_maps")
    assert specs and all(name == "x" or name.startswith("x_s") for name in specs)
    spec = next(iter(specs.values()))
    assert (spec["alignment"], spec["add_special_tokens"], spec["target_add_special_tokens"]) == (
        "word_ends",
        False,
        False,
    )
    maps["alignment"] = "nearest"
    with pytest.raises(ConfigError, match=r"^depth_use\.linear_maps\.alignment: 'nearest' is not"):
        resolve(config)
