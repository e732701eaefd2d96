"""Offline lm-eval tasks: well-formed examples; the real harness scores a model trained on the
corpus above chance and the same model randomly initialised at chance; an exported pruned
Llama folder loads in a subprocess that never imports depthlab, with no missing or unexpected
weight, and scores exactly what the in-memory pruned view scores; a missing task file is named.

`make_run` builds a complete tiny run (corpus, tokenizer, data folder, trained model, analysis
distance matrix, task folder) in seconds; test_pruning.py and test_healing.py use it too."""

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from depthlab.data.prepare import hf_tokenizer, train_bpe
from depthlab.models.architectures import adapt
from depthlab.models.decoders import build_model, make_config, save_checkpoint
from depthlab.stages.analysis.measures import analyse
from depthlab.stages.lm_tasks import (
    CHOICES,
    TaskFileError,
    build_examples,
    check_task_folder,
    write_task_folder,
)
from depthlab.stages.pruning.layer_removal import export_pruned, prune_copy
from depthlab.stages.pruning.pruned_tasks import TaskEvaluator
from depthlab.stages.residual_stream import iter_token_batches
from depthlab.stages.train_loop import language_model_loss, train_batch

torch.set_num_threads(1)
WORDS = {"word_order": 5, "continuation": 1}
CONTEXT_TOKENS = 16
NOUNS = [
    "array",
    "matrix",
    "axis",
    "value",
    "index",
    "frame",
    "graph",
    "node",
    "edge",
    "figure",
    "label",
    "sample",
    "weight",
    "vector",
    "column",
    "series",
]
ADJECTIVES = [
    "input",
    "output",
    "sorted",
    "sparse",
    "given",
    "default",
    "first",
    "last",
    "mean",
    "total",
]
VERBS = ["Compute", "Return", "Build", "Sort", "Draw", "Convert", "Check", "Count"]
TYPES = ["int", "float", "str", "bool", "ndarray", "list"]


def synthetic_docstring(rng: np.random.Generator) -> str:
    """A numpydoc-like docstring from a small grammar: fixed word order, random slots."""
    pick = lambda words: words[rng.integers(len(words))]  # noqa: E731
    noun, other = pick(NOUNS), pick(NOUNS)
    lines = [
        f"{pick(VERBS)} the {pick(ADJECTIVES)} {noun} of the {other} along the "
        f"{pick(ADJECTIVES)} axis.",
        "",
        f"The {noun} is read from the {pick(ADJECTIVES)} {other} and then written to the "
        f"{pick(ADJECTIVES)} {pick(NOUNS)} in place.",
        "",
        "Parameters",
        "----------",
    ]
    for _ in range(rng.integers(1, 3)):
        lines += [
            f"{pick(NOUNS)} : {pick(TYPES)}",
            f"    The {pick(ADJECTIVES)} {pick(NOUNS)} of the {pick(NOUNS)} to use.",
        ]
    lines += ["", "Returns", "-------", f"{noun} : {pick(TYPES)}"]
    return "\n".join(lines)


def train_tiny(model, tokens, steps: int, seq_len: int, seed: int = 0):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for step in range(steps):
        loss = language_model_loss(model, train_batch(tokens, step, seed, 16, seq_len), None)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return model.eval()


def make_run(
    root: Path,
    train_steps: int = 120,
    layers: int = 4,
    norm_scheme: str = "pre_ln",
    documents: int = 400,
):
    """A tiny complete run under root: data/, model/, analysis/, tasks/."""
    rng = np.random.default_rng(0)
    texts = [synthetic_docstring(rng) for _ in range(documents)]
    train_texts, val_texts = texts[:-60], texts[-60:]
    tokenizer = hf_tokenizer(train_bpe(train_texts, 400))
    data = root / "data"
    data.mkdir(parents=True)
    tokenizer.save_pretrained(data / "tokenizer")
    eos = tokenizer.eos_token_id
    for split, split_texts in (("train", train_texts), ("val", val_texts)):
        ids = [i for t in split_texts for i in tokenizer(t)["input_ids"] + [eos]]
        np.asarray(ids, dtype=np.uint16).tofile(data / f"{split}.bin")
    with open(data / "val.jsonl", "w") as handle:
        handle.writelines(json.dumps({"text": t}) + "\n" for t in val_texts)
    (data / "meta.json").write_text(
        json.dumps(
            {
                "dtype": "uint16",
                "vocab_size": len(tokenizer),
                "eos_id": eos,
                "bos_id": eos,
                "pad_id": tokenizer.pad_token_id,
            }
        )
    )
    config = make_config(
        {"hidden_size": 32, "num_layers": layers, "num_heads": 2, "intermediate_size": 64},
        norm_scheme,
        vocab_size=len(tokenizer),
        max_positions=64,
        eos_token_id=eos,
        bos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = build_model(config, seed=0)
    train_tokens = np.fromfile(data / "train.bin", dtype=np.uint16)
    if train_steps:
        train_tiny(model, train_tokens, train_steps, 32)
    save_checkpoint(model, tokenizer, root / "model")
    batches = iter_token_batches(val_texts, tokenizer, max_length=32, batch_size=8)
    result = analyse(adapt(model.eval()), batches, logit_lens=False)
    analysis = root / "analysis"
    analysis.mkdir()
    columns = [str(i) for i in range(layers + 1)]
    pd.DataFrame(result.angular_distance_last, columns=columns).rename_axis(
        "layer"
    ).reset_index().to_csv(analysis / "angular_distance_last.csv", index=False)
    tasks = build_examples(
        val_texts, tokenizer, ["word_order", "continuation"], 48, WORDS, CONTEXT_TOKENS, 8, seed=0
    )
    (root / "tasks").mkdir()
    write_task_folder(tasks, root / "tasks", root / "tasks", {"words": WORDS})
    return {
        "data": data,
        "model": root / "model",
        "analysis": analysis,
        "tasks": root / "tasks",
        "tokenizer": tokenizer,
        "trained": model,
        "config": config,
        "num_layers": layers,
        "val_texts": val_texts,
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run"))


def run_prune_spec(base: dict, run: dict, tmp_path: Path, **settings) -> dict:
    """A prune_model spec (the resolved `base`) for make_run's tiny run: its model, analysis,
    data and tasks, seed 0, the cache and `out` under tmp_path, then `settings`."""
    return {
        **base,
        "model_name": "m",
        "model": str(run["model"]),
        "analysis": str(run["analysis"]),
        "data": str(run["data"]),
        "tasks": str(run["tasks"]),
        "datasets_cache": str(tmp_path / "cache"),
        "out": str(tmp_path / "pruning_jobs" / "m" / "measured"),
        "seed": 0,
        **settings,
    }


def test_examples_are_well_formed(run):
    tokenizer = run["tokenizer"]
    tasks, again = (
        build_examples(
            run["val_texts"],
            tokenizer,
            ["word_order", "continuation"],
            40,
            WORDS,
            CONTEXT_TOKENS,
            8,
            seed=3,
        )  # fmt: skip
        for _ in range(2)
    )
    assert tasks == again  # a pure function of the corpus and the seed
    for kind, rows in tasks.items():
        assert len(rows) == 40
        labels = Counter(r["label"] for r in rows)
        assert set(labels) <= set(range(CHOICES)) and len(labels) >= 3
        for row in rows:
            choices, true = row["choices"], row["choices"][row["label"]]
            assert len(choices) == CHOICES == len(set(choices))
            document = run["val_texts"][row["doc"]]
            assert f"{row['context']} {true}" in document  # context + true choice is verbatim
            assert len(tokenizer(row["context"])["input_ids"]) <= CONTEXT_TOKENS
            if kind == "word_order":
                assert all(sorted(c.split(" ")) == sorted(true.split(" ")) for c in choices)
                assert len(true.split(" ")) == WORDS["word_order"]
            else:
                assert all(len(c.split(" ")) == WORDS["continuation"] for c in choices)


def test_trained_model_above_chance_random_init_at_chance(run, capfd):
    trained = TaskEvaluator(
        run["trained"],
        run["tokenizer"],
        run["tasks"],
        batch_size=32,
        datasets_cache=run["tasks"].parent / "cache",
        bootstrap_iters=100,
    )
    capfd.readouterr()
    scores = {r["task"]: r for r in trained.evaluate()}
    # stderr is no terminal here, as in a job log: the model's progress bars, which lm-eval
    # forces on, stay out (the job sets TQDM_DISABLE for the unforced ones before importing)
    err = capfd.readouterr().err
    assert "Tokenizing inputs" not in err and "loglikelihood requests" not in err, err[-500:]
    random_model = build_model(run["config"], seed=1).eval()
    untrained = TaskEvaluator(
        random_model,
        run["tokenizer"],
        run["tasks"],
        batch_size=32,
        datasets_cache=run["tasks"].parent / "cache",
        bootstrap_iters=100,
    )
    chance_scores = {r["task"]: r for r in untrained.evaluate()}
    for task in ("depthlab_word_order", "depthlab_continuation"):
        high, low = scores[task], chance_scores[task]
        assert high["samples"] == low["samples"] == 48
        for row in (high, low):  # lm-eval's standard error of a mean of 0/1 scores
            p, n = row["acc"], row["samples"]
            assert row["acc_stderr"] == pytest.approx(np.sqrt(p * (1 - p) / (n - 1)))
        assert high["acc"] > 1 / CHOICES + 0.25, (task, high)
        assert low["acc"] < 1 / CHOICES + 3 * low["acc_stderr"], (task, low)
    # one base model serves every variant: the view scores what a pruned copy scores, and
    # leaves the base model untouched
    removed = (0, 1, 2)
    viewed = trained.evaluate(removed=removed)
    copied = trained.evaluate(model=prune_copy(run["trained"], removed))
    assert viewed == copied
    assert trained.evaluate() == list(scores.values())
    assert viewed != list(scores.values())


SUBPROCESS = textwrap.dedent("""
    import json, sys
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM
    folder, tasks, out = sys.argv[1:4]
    model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    lm = HFLM(pretrained=folder, tokenizer=folder, batch_size=32, device="cpu")
    manager = TaskManager(include_path=tasks, include_defaults=False)
    results = lm_eval.simple_evaluate(model=lm, tasks=["depthlab_word_order",
                                      "depthlab_continuation"], task_manager=manager,
                                      bootstrap_iters=100, log_samples=False)
    json.dump({"info": {k: list(v) for k, v in info.items()}, "class": type(model).__name__,
               "acc": {t: results["results"][t]["acc,none"] for t in results["results"]},
               "imported_depthlab": any(m.split(".")[0] == "depthlab" for m in sys.modules)},
              open(out, "w"))
""")


def test_exported_folder_loads_and_scores_like_the_view_without_depthlab(run, tmp_path):
    folder = tmp_path / "pruned"
    export_pruned(run["trained"], (1,), folder, run["tokenizer"])
    script = tmp_path / "score.py"
    script.write_text(SUBPROCESS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_DATASETS_CACHE=str(tmp_path / "cache"),
        OMP_NUM_THREADS="1",
    )
    result = subprocess.run(
        [sys.executable, str(script), str(folder), str(run["tasks"]), str(tmp_path / "out.json")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outside = json.loads((tmp_path / "out.json").read_text())
    assert not outside["imported_depthlab"]
    assert outside["class"] == "LlamaForCausalLM"
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert outside["info"].get(key, []) == [], key
    evaluator = TaskEvaluator(
        run["trained"],
        run["tokenizer"],
        run["tasks"],
        batch_size=32,
        datasets_cache=tmp_path / "cache",
        bootstrap_iters=100,
    )
    inside = {r["task"]: r["acc"] for r in evaluator.evaluate(removed=(1,))}
    assert inside == outside["acc"]


def test_missing_task_file_and_bad_settings_are_named(run, tmp_path):
    assert check_task_folder(run["tasks"]) == ["depthlab_word_order", "depthlab_continuation"]
    with pytest.raises(TaskFileError, match="tasks.json does not exist"):
        check_task_folder(tmp_path)
    copy = tmp_path / "tasks"
    copy.mkdir()
    for file in run["tasks"].iterdir():
        if file.name != "depthlab_word_order.yaml":
            (copy / file.name).write_bytes(file.read_bytes())
    with pytest.raises(TaskFileError, match=r"depthlab_word_order\.yaml does not exist"):
        check_task_folder(copy)
    with pytest.raises(TaskFileError, match="'depthlab_nope' is not in"):
        check_task_folder(run["tasks"], ["depthlab_nope"])


def test_results_rows_read_lm_eval_metrics():
    from depthlab.stages.lm_tasks import results_rows

    results = {
        "results": {
            "mc": {
                "acc,none": 0.5,
                "acc_stderr,none": 0.05,
                "acc_norm,none": 0.25,
                "acc_norm_stderr,none": 0.04,
                "alias": "mc",
            },
            "gsm8k": {
                "exact_match,strict-match": 0.1,
                "exact_match_stderr,strict-match": 0.01,
                "exact_match,flexible-extract": 0.2,
                "exact_match_stderr,flexible-extract": "N/A",
                "alias": "gsm8k",
            },
        },
        "n-samples": {"mc": {"effective": 40}, "gsm8k": {"effective": 30}},
    }
    mc, gsm8k = results_rows(results, ["mc", "gsm8k"])
    assert (mc["acc"], mc["acc_stderr"], mc["acc_norm"], mc["samples"]) == (0.5, 0.05, 0.25, 40)
    assert (mc["score"], mc["score_metric"]) == (0.5, "acc,none")
    assert np.isnan(gsm8k["acc"]) and gsm8k["samples"] == 30
    assert (gsm8k["score"], gsm8k["score_stderr"]) == (0.1, 0.01)
    assert gsm8k["score_metric"] == "exact_match,strict-match"
