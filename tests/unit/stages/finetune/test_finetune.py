"""Supervised fine-tuning: the task loss falls, resume after SIGKILL ends bit-identical, the
fine-tuned folder loads like its parent (plain Llama; DepthlabForCausalLM through its auto_map
with trust_remote_code; LoRA merged), the evaluation scores the fine-tuned weights on disk (a
planted difference), config errors name the key, and the claims row decides over seeds."""

import copy
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from depthlab.config import ConfigError, resolve
from depthlab.models.decoders import build_model, make_config, save_checkpoint
from depthlab.stages.finetune.data import (
    FinetuneError,
    read_pairs,
    task_pairs,
    train_documents,
    write_pairs,
)
from depthlab.stages.finetune.finetuning import FinetuneSettings, encode_pairs, finetune, task_loss
from safetensors.torch import load_file
from script_runs import assert_same_training, run_command
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parents[4]
SCRIPTS = ROOT / "workflow_scripts"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SCRIPTS)}
TASKS = {
    "kinds": ["word_order", "continuation"],
    "words": {"word_order": 4, "continuation": 1},
    "context_tokens": 12,
    "max_per_document": 4,
}


def settings(**changes) -> dict:
    values = {
        "method": "full",
        "steps": 30,
        "batch_size": 8,
        "seq_len": 32,
        "lr": 1e-2,
        "min_lr_ratio": 0.1,
        "warmup_steps": 2,
        "weight_decay": 0.0,
        "beta1": 0.9,
        "beta2": 0.95,
        "grad_clip": 1.0,
        "eval_every": 10,
        "log_every": 1,
        "checkpoint_every": 5,
        "precision": "fp32",
        "train_on_prompt": False,
        "lora": None,
    }
    values.update(changes)
    return values


def tiny_parent(folder: Path, data_dir: Path, scheme: str = "pre_ln", seed: int = 0) -> Path:
    """A freshly initialised 2-layer model of `scheme` saved as pretraining saves it."""
    meta = json.loads((data_dir / "meta.json").read_text())
    config = make_config(
        {"hidden_size": 16, "num_layers": 2, "num_heads": 2, "intermediate_size": 32},
        scheme,
        vocab_size=meta["vocab_size"],
        max_positions=32,
        init_std=0.02,
        bos_token_id=meta.get("bos_id"),
        eos_token_id=meta.get("eos_id"),
        pad_token_id=meta.get("pad_id"),
    )
    save_checkpoint(
        build_model(config, seed), AutoTokenizer.from_pretrained(data_dir / "tokenizer"), folder
    )
    return folder


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory, data_dir):
    """Fine-tuning pairs from the test corpus's train documents, as build_finetune_data writes
    them (train.jsonl, val.jsonl: the pairs of held-out documents)."""
    tokenizer = AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    documents = train_documents(data_dir, tokenizer, 400, seed=0)
    train, val = task_pairs(
        documents, tokenizer, TASKS, {"word_order": 128, "continuation": 256}, seed=0
    )
    assert len(train) > 100 and len(val) > 5
    folder = tmp_path_factory.mktemp("finetune") / "data"
    folder.mkdir()
    write_pairs(folder / "train.jsonl", train)
    write_pairs(folder / "val.jsonl", val)
    return folder


def test_pairs_hold_out_documents_and_mask_the_prompt(data_dir, pairs_dir):
    tokenizer = AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    train, val = read_pairs(pairs_dir / "train.jsonl"), read_pairs(pairs_dir / "val.jsonl")
    assert not {(p["prompt"], p["answer"]) for p in val} & {
        (p["prompt"], p["answer"]) for p in train
    }
    inputs, labels = encode_pairs(train[:20], tokenizer, 32, train_on_prompt=False)
    for pair, ids, label in zip(train[:20], inputs, labels):
        whole = tokenizer(pair["prompt"] + " " + pair["answer"], add_special_tokens=False)
        whole = whole["input_ids"][-32:]
        real = label != -100
        # the labelled ids are the answer's: the tail of prompt + " " + answer
        assert ids[: len(whole)].tolist() == whole
        answer = tokenizer.decode(ids[real].tolist())
        assert answer.strip() == pair["answer"]
        assert real.sum() < len(whole)  # the prompt is not labelled


def test_finetuning_lowers_the_held_out_task_loss(tmp_path, data_dir, pairs_dir):
    parent = tiny_parent(tmp_path / "parent", data_dir)
    summary = finetune(
        "tiny_ft",
        str(parent),
        None,
        pairs_dir,
        tmp_path / "out",
        tmp_path / "state",
        FinetuneSettings.from_dict(settings()),
        seed=0,
        progress=False,
    )
    assert summary["final_task_loss"] < summary["initial_task_loss"] - 0.5, summary
    # the logged loss is the loss of the saved weights on the held-out pairs
    from transformers import AutoModelForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    inputs, labels = encode_pairs(read_pairs(pairs_dir / "val.jsonl"), tokenizer, 32, False)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    loss = task_loss(reloaded, inputs, labels, torch.device("cpu"), None, 64)
    assert loss == pytest.approx(summary["final_task_loss"], abs=1e-4)
    assert not (tmp_path / "state").exists()
    provenance = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert provenance["stage"] == "finetune" and provenance["parent"]["path"] == str(parent)


def run_script(spec: dict, wait=True):
    command = [sys.executable, str(SCRIPTS / "finetune_model.py"), "--spec", json.dumps(spec)]
    return run_command(command, ENV, wait)


def job_spec(tmp_path, parent, pairs_dir, name, **train) -> dict:
    return {
        "model_name": name,
        "parent_name": "tiny",
        "parent": str(parent),
        "revision": None,
        "data": str(pairs_dir),
        "train": settings(**train),
        "seed": 3,
        "device": "cpu",
        "progress_every": None,
        "out": str(tmp_path / name),
        "state_dir": str(tmp_path / f"state_{name}"),
    }


def test_resume_after_sigkill_ends_bit_identical(tmp_path, data_dir, pairs_dir):
    parent = tiny_parent(tmp_path / "parent", data_dir, "lns")
    train = {"steps": 400, "checkpoint_every": 5, "eval_every": 100}
    run_script(job_spec(tmp_path, parent, pairs_dir, "reference", **train))
    spec = job_spec(tmp_path, parent, pairs_dir, "resumed", **train)
    state = Path(spec["state_dir"]) / "state.pt"
    process = run_script(spec, wait=False)
    deadline = time.time() + 120
    while not state.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not Path(spec["out"]).exists(), "the kill came too late to test resumption"
    killed_at = torch.load(state, weights_only=True)["step"]
    assert 0 < killed_at < 400

    result = run_script(spec)
    assert f"resumed from step {killed_at}" in result.stderr
    assert_same_training(tmp_path / "reference", tmp_path / "resumed")
    provenance = json.loads((tmp_path / "resumed" / "provenance.json").read_text())
    assert provenance["resumed_from_step"] == killed_at and provenance["processes"] == 2


def logits_of(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("scheme,method", [("lns", "lora"), ("post_ln", "full")])
def test_finetuned_checkpoint_loads_like_its_parent(tmp_path, data_dir, pairs_dir, scheme, method):
    parent = tiny_parent(tmp_path / "parent", data_dir, scheme)
    lora = {
        "rank": 4,
        "alpha": 8,
        "dropout": 0.0,
        "target_modules": ["q_proj", "v_proj", "down_proj"],
    }
    run_script(
        job_spec(tmp_path, parent, pairs_dir, "ft", steps=6, method=method, lora=lora, lr=5e-2)
    )
    out = tmp_path / "ft"
    config = json.loads((out / "config.json").read_text())
    parent_config = json.loads((parent / "config.json").read_text())
    assert config["architectures"] == parent_config["architectures"]
    assert ("auto_map" in config) == ("auto_map" in parent_config)
    weights = load_file(out / "model.safetensors")
    assert not [k for k in weights if "lora" in k]  # adapters merged
    parent_weights = load_file(parent / "model.safetensors")
    changed = [k for k in weights if not torch.equal(weights[k], parent_weights[k])]
    assert changed  # the fine-tuning moved the weights it trains
    if method == "lora":  # only the adapted projections move
        assert all(k.rsplit(".", 2)[-2] in lora["target_modules"] for k in changed), changed
    # vanilla transformers in a fresh process, without depthlab on the path (trust_remote_code
    # where the parent needs it); same logits as depthlab's own load of the folder
    ids = [[5, 9, 14, 3, 7, 11]]
    code = (
        "import json, sys, torch\n"
        "from transformers import AutoModelForCausalLM\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(out)!r}, "
        f"trust_remote_code={'auto_map' in config})\n"
        f"print(type(m).__name__); print(json.dumps(m(input_ids=torch.tensor({ids})).logits"
        ".flatten()[:50].tolist()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    name, values = result.stdout.strip().splitlines()[-2:]
    assert name == ("LlamaForCausalLM" if scheme == "lns" else "DepthlabForCausalLM")
    from depthlab.models.architectures import load_model

    ours = logits_of(load_model(str(out)), torch.tensor(ids)).flatten()[:50]
    assert np.allclose(json.loads(values), ours.numpy(), atol=1e-5)


def test_evaluation_scores_the_finetuned_weights(tmp_path, data_dir):
    """A planted difference: the "fine-tuned" folder holds the parent's weights all zeroed, so
    every choice's log-likelihood is -(its token count) * ln V and lm-eval's pick is the choice
    with the fewest tokens (the first of ties); the parent's own scores differ."""
    from depthlab.data.prepare import iter_jsonl_texts
    from depthlab.stages.finetune.scores import FINETUNED, PRETRAINED, gain_table
    from depthlab.stages.finetune.stage import evaluate_before_after
    from depthlab.stages.lm_tasks import build_examples, write_task_folder

    tokenizer = AutoTokenizer.from_pretrained(data_dir / "tokenizer")
    tasks = build_examples(
        iter_jsonl_texts(data_dir / "val.jsonl", "text", "data"),
        tokenizer,
        ["continuation"],
        {"continuation": 48},
        {"continuation": 1},
        12,
        4,
        seed=0,
    )
    task_dir = tmp_path / "tasks"
    task_dir.mkdir()
    write_task_folder(tasks, task_dir, task_dir, {})
    parent = tiny_parent(tmp_path / "parent", data_dir, "pre_ln", seed=1)
    zeroed = tiny_parent(tmp_path / "zeroed", data_dir, "pre_ln", seed=1)
    weights = {k: torch.zeros_like(v) for k, v in load_file(zeroed / "model.safetensors").items()}
    from safetensors.torch import save_file

    save_file(weights, zeroed / "model.safetensors", metadata={"format": "pt"})
    spec = {
        "parent_name": "tiny",
        "parent": str(parent),
        "revision": None,
        "finetuned": {"tiny_ft_s0": {"path": str(zeroed), "seed": 0}},
        "tasks": str(task_dir),
        "lm_eval": {"tasks": None, "harness_tasks": [], "batch_size": 16, "bootstrap_iters": 0},
        "datasets_cache": str(tmp_path / "cache"),
        "dtype": "float32",
        "seed": 0,
    }
    scores = evaluate_before_after(spec, "cpu", log=lambda *_: None)
    rows = tasks["continuation"]

    def token_count(context, choice):
        whole = tokenizer(context + " " + choice, add_special_tokens=False)["input_ids"]
        return len(whole) - len(tokenizer(context, add_special_tokens=False)["input_ids"])

    expected = np.mean(
        [
            int(np.argmax([-token_count(r["context"], c) for c in r["choices"]])) == r["label"]
            for r in rows
        ]
    )
    after = scores[scores["stage"] == FINETUNED]
    before = scores[scores["stage"] == PRETRAINED]
    assert after["acc"].iloc[0] == pytest.approx(expected)
    assert before["acc"].iloc[0] != pytest.approx(expected)
    table = gain_table(scores)
    assert table["gain"].iloc[0] == pytest.approx(expected - before["acc"].iloc[0])


def test_config_errors_name_the_key(test_config):
    config = copy.deepcopy(test_config)
    config["resources"]["finetune"] = dict(config["resources"]["pretrain"])
    config["finetune"] = copy.deepcopy(DEFAULT_FINETUNE)
    config["finetune"]["train"]["seq_len"] = 4096
    with pytest.raises(ConfigError, match=r"finetune\.train\.seq_len"):
        resolve(config)
    config["finetune"] = copy.deepcopy(DEFAULT_FINETUNE)
    config["finetune"]["models"] = ["nonexistent"]
    with pytest.raises(ConfigError, match=r"finetune\.models\[0\]"):
        resolve(config)
    config["finetune"] = copy.deepcopy(DEFAULT_FINETUNE)
    config["finetune"]["train"]["method"] = "lora"
    del config["finetune"]["lora"]
    with pytest.raises(ConfigError, match=r"finetune\.lora"):
        resolve(config)
    config["finetune"] = copy.deepcopy(DEFAULT_FINETUNE)
    del config["resources"]["finetune"]
    with pytest.raises(ConfigError, match=r"resources\.finetune"):
        resolve(config)


def test_bad_pairs_file_names_file_and_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": "a", "answer": "b"}\n{"prompt": "a"}\n')
    with pytest.raises(FinetuneError, match=r"train\.jsonl:2"):
        read_pairs(path)
    with pytest.raises(FinetuneError, match="does not exist"):
        read_pairs(tmp_path / "missing.jsonl")


def score_rows(parent: str, before: float, after: list) -> list[dict]:
    """evaluate_finetuned's rows of one parent: its score, then each fine-tuned seed's."""
    rows = [
        {
            "model": parent,
            "parent": parent,
            "seed": np.nan,
            "stage": "pretrained",
            "task": "t",
            "score": before,
        }
    ]
    rows += [
        {
            "model": f"{parent}_ft_s{s}",
            "parent": parent,
            "seed": s,
            "stage": "finetuned",
            "task": "t",
            "score": value,
            "score_stderr": 0.002,
        }
        for s, value in enumerate(after)
    ]
    return rows


def test_claims_row_decides_the_lns_gain_over_pretraining_seeds():
    from depthlab.claims import RunData, build_claims

    # one parent per scheme, fine-tuned with three seeds: the runs share one pretraining seed,
    # so they carry no pretraining variance and the row is indicative (was "reproduced")
    data = RunData(
        finetune_pairs=[("pre_ln", ["pre_ln"], "lns", ["lns"])],
        finetune_scores={
            "pre_ln": pd.DataFrame(score_rows("pre_ln", 0.30, [0.40, 0.42, 0.41])),
            "lns": pd.DataFrame(score_rows("lns", 0.31, [0.45, 0.46, 0.47])),
        },
        trained={"pre_ln", "lns"},
    )
    row = build_claims(data).set_index("claim_id").loc["cod_sft_gain"]
    gains = [0.05, 0.04, 0.06]
    assert row["measured"] == pytest.approx(np.mean(gains))
    half = 4.302652729911275 * np.std(gains, ddof=1) / math.sqrt(3)  # t(0.975, 2 df)
    assert row["low"] == pytest.approx(np.mean(gains) - half)  # shown: over fine-tuning runs
    assert row["seeds"] == 1 and row["verdict"] == "one seed: indicative"
    assert "reproduced" in row["reason"]
    # three pretraining seeds per scheme, each fine-tuned once (seed s0's pair twice: its two
    # runs are averaged into one gain): decided over the three parent pairs
    pre, lns = [f"pre_ln_s{i}" for i in range(3)], [f"lns_s{i}" for i in range(3)]
    after = {"pre_ln_s0": [0.40, 0.42], "pre_ln_s1": [0.41], "pre_ln_s2": [0.39]}
    after |= {"lns_s0": [0.45, 0.45], "lns_s1": [0.47], "lns_s2": [0.43]}
    data = RunData(
        finetune_pairs=[("pre_ln", pre, "lns", lns)],
        finetune_scores={m: pd.DataFrame(score_rows(m, 0.3, after[m])) for m in pre + lns},
        trained=set(pre + lns),
    )
    row = build_claims(data).set_index("claim_id").loc["cod_sft_gain"]
    gains = [np.mean([0.05, 0.03]), 0.06, 0.04]
    # the seeds' spread plus the error of the items every pair was scored on (se 0.002 per
    # fine-tuned model's score: hypot(0.002, 0.002) per gain)
    se = math.sqrt(np.var(gains, ddof=1) / 3 + 2 * 0.002**2)
    half = 4.302652729911275 * se
    assert row["measured"] == pytest.approx(np.mean(gains))
    assert row["high"] == pytest.approx(np.mean(gains) + half)
    assert row["seeds"] == 3 and row["verdict"] == "reproduced"
    assert "pretraining seeds" in row["interval"] and "same items" in row["interval"]
    # two pretraining seeds: indicative, never decided
    data.finetune_pairs = [("pre_ln", pre[:2], "lns", lns[:2])]
    row = build_claims(data).set_index("claim_id").loc["cod_sft_gain"]
    assert row["seeds"] == 2 and row["verdict"] == "one seed: indicative"


DEFAULT_FINETUNE = {
    "models": ["pre_ln", "lns"],
    "seeds": [0],
    "data": {
        "source": "tasks",
        "tasks": {
            **TASKS,
            "train_documents": 50,
            "train_examples": {"word_order": 16, "continuation": 16},
            "eval_examples": {"word_order": 16, "continuation": 16},
        },
    },
    "train": {k: v for k, v in settings().items() if k != "lora"},
    "lora": {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj"]},
    "lm_eval": {"tasks": None, "harness_tasks": [], "batch_size": 8, "bootstrap_iters": 0},
    "dtype": "float32",
    "device": "cpu",
}


def test_figure_states_each_schemes_before_after_and_gain():
    from depthlab.stages.finetune.plots import plot_finetuning

    rows = [
        row
        for parent, before, after in (("pre_ln", 0.30, [0.40, 0.42]), ("lns", 0.35, [0.50, 0.52]))
        for row in score_rows(parent, before, after)
    ]
    figure = plot_finetuning(pd.DataFrame(rows), {"pre_ln": "pre_ln", "lns": "lns"}, "test")
    title = figure.axes[0].get_title()
    assert "pre_ln 0.300 -> 0.410 (+0.110)" in title and "lns 0.350 -> 0.510 (+0.160)" in title
    # the scheme's line joins before and the seed mean; the error bar spans the seeds' range
    lines = [(line.get_xdata(), line.get_ydata()) for line in figure.axes[0].lines]
    assert any(np.allclose(y, [0.30, 0.41]) for _, y in lines if len(y) == 2)
    bars = [np.nanmin(y) for _, y in lines if len(y) > 2 and np.isfinite(y).any()]
    spans = [(np.nanmin(y), np.nanmax(y)) for _, y in lines if len(y) > 2 and np.isfinite(y).any()]
    assert len(bars) == 2 and (0.40, 0.42) in [(round(a, 2), round(b, 2)) for a, b in spans]


def test_preflight_needs_the_paper_finetuning_dataset_and_harness_tasks():
    """The workflow passes specs as compact JSON (spec_json): the planned fine-tuning jobs of
    config/paper.yaml need Commonsense170K at its revision and the eight tasks' datasets."""
    from depthlab.config import load_config, spec_json
    from depthlab.plan.preflight import hub_items, needed_items

    paper = resolve(load_config(ROOT / "config" / "paper.yaml"))
    items = hub_items(paper.config)
    data_spec = spec_json(paper.jobs("build_finetune_data")["data"])
    needed = needed_items(items, [data_spec])
    assert [(i.repo_id, i.revision, i.key) for i in needed] == [
        ("zwhe99/commonsense_170k", "main", "finetune.data")
    ]
    eval_spec = spec_json(paper.jobs("evaluate_finetuned")["llama130m_lns"])
    needed = {i.repo_id for i in needed_items(items, [eval_spec])}
    assert {"baber/piqa", "allenai/winogrande", "allenai/openbookqa", "allenai/ai2_arc"} <= needed


def test_seeded_parents_pair_seed_by_seed_in_the_claims():
    """config/cpu_study.yaml fine-tunes three pretraining seeds per scheme once each: the claims
    pair pre_ln_s<i> with lns_s<i> (the row is decided over pretraining seeds)."""
    from depthlab.config import load_config

    study = resolve(load_config(ROOT / "config" / "cpu_study.yaml"))
    assert sorted(study.jobs("finetune_model")) == sorted(
        f"{scheme}_s{seed}_ft_s0" for scheme in ("pre_ln", "lns") for seed in range(3)
    )
    finetune = study.jobs("make_claims")["claims"]["finetune"]
    assert finetune["pairs"] == [
        ["pre_ln", ["pre_ln_s0", "pre_ln_s1", "pre_ln_s2"], "lns", ["lns_s0", "lns_s1", "lns_s2"]]
    ]
    assert finetune["scores"]["lns_s1"] == "results/cpu_study/finetune/eval/lns_s1"
