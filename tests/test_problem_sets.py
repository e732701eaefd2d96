"""Synthetic graded-difficulty problems: answers agree with an independent solver, the folder is
in the data stage's format and the existing pretraining code trains on it, the greedy evaluation
scores an oracle and a constant guesser correctly (multi-token answers included), the answer
positions are the ones that predict answer tokens, and bad settings name their key."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from depthlab import data as data_lib
from depthlab.problem_scoring import accuracy_table, evaluate_problems, problem_batches
from depthlab.problem_sets import (
    LETTERS,
    RELATIONS,
    build_tokenizer,
    evaluation_problems,
    read_problems,
    relation_tables,
    sample_problems,
    validate_problem_settings,
    write_problem_set,
)
from tiny_models import Oracle

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
SPEC = {
    "families": {
        "arithmetic": {"levels": [1, 2, 3, 4]},
        "hops": {"levels": [1, 2, 3], "relations": 3},
        "lookup": {"levels": [1, 2, 3], "table_pairs": 5},
    },
    "train_problems": 400,
    "val_problems": 50,
    "eval_per_level": 20,
    "level_weights": "uniform",
}


def solve(problem, seed):
    """An independent solver working on the prompt's words."""
    words = problem["prompt"].split()
    assert words[-1] == "="
    if problem["family"] == "arithmetic":
        value = int(words[0])
        for operator, operand in zip(words[1:-1:2], words[2:-1:2]):
            value = eval(f"{value} {operator} {operand}") % 10
        return str(value), (len(words) - 2) // 2
    if problem["family"] == "hops":
        tables = relation_tables(SPEC["families"]["hops"]["relations"], seed)
        entity = LETTERS.index(words[0])
        for relation in words[1:-1]:
            entity = tables[RELATIONS.index(relation), entity]
        return LETTERS[entity], len(words) - 2
    table_words, query = " ".join(words).split(" ; ")
    pairs = [p.split(" > ") for p in table_words.split(" , ")]
    table = dict(pairs)
    assert len(table) == len(pairs)  # every key once: one answer
    start, _, hops, _ = query.split()
    entity = start
    for _ in range(int(hops)):
        entity = table[entity]
    return entity, int(hops)


def test_answers_match_an_independent_solver():
    problems = sample_problems(SPEC, 600, seed=3) + evaluation_problems(SPEC, seed=3)
    for problem in problems:
        answer, level = solve(problem, seed=3)
        assert problem["answer"] == answer, problem
        assert problem["level"] == level
    # every (family, level) appears, each evaluation level with eval_per_level problems
    table = accuracy_table(problems[600:], np.ones(len(problems) - 600, bool))
    assert len(table) == 4 + 3 + 3 and set(table["problems"]) == {20}
    # answers are spread (a model cannot guess them from frequencies)
    for family in ("arithmetic", "hops"):
        answers = [p["answer"] for p in problems if p["family"] == family and p["level"] == 3]
        assert len(set(answers)) >= 8


def test_folder_is_in_the_data_stage_format_and_pretrain_runs(tmp_path):
    from depthlab.training import pretrain
    from transformers import AutoTokenizer

    spec = {**SPEC, "families": {"hops": SPEC["families"]["hops"]}}
    out = tmp_path / "problems"
    meta = write_problem_set(spec, out, seed=1)
    assert meta == data_lib.read_meta(out)
    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    assert meta["vocab_size"] == len(tokenizer) and meta["eos_id"] == tokenizer.eos_token_id
    for split in ("train", "val"):
        tokens = np.asarray(data_lib.load_tokens(out, split))
        assert len(tokens) == meta["splits"][split]["tokens"]
        assert (tokens == meta["eos_id"]).sum() == meta["splits"][split]["documents"]
    texts = [json.loads(line)["text"] for line in (out / "val.jsonl").read_text().splitlines()]
    ids = []
    for text in texts:
        ids += tokenizer(text, add_special_tokens=False)["input_ids"] + [meta["eos_id"]]
    assert ids == np.asarray(data_lib.load_tokens(out, "val")).tolist()
    assert len(read_problems(out / "problems.jsonl")) == 3 * 20
    decl = {
        "kind": "pretrain",
        "norm_scheme": "pre_ln",
        "architecture": {
            "hidden_size": 16,
            "num_layers": 2,
            "num_heads": 2,
            "intermediate_size": 32,
        },
        "train": dict(
            seq_len=16,
            batch_size=4,
            steps=3,
            lr=1e-3,
            min_lr_ratio=0.1,
            warmup_steps=1,
            weight_decay=0.0,
            beta1=0.9,
            beta2=0.95,
            grad_clip=1.0,
            eval_every=3,
            log_spaced_evals=0,
            eval_batches=1,
            log_every=1,
            checkpoint_every=100,
            precision="fp32",
            init_std=0.02,
            micro_batch_size=None,
        ),
    }
    summary = pretrain(
        "p", decl, out, tmp_path / "model", tmp_path / "state", seed=0, threads=1, progress=False
    )
    assert np.isfinite(summary["final_val_loss"])
    assert (tmp_path / "model" / "tokenizer.json").is_file()


def test_greedy_evaluation_and_answer_positions():
    tokenizer = build_tokenizer()
    problems = evaluation_problems({**SPEC, "eval_per_level": 3}, seed=0)
    problems.append({"family": "arithmetic", "level": 9, "prompt": "1 + 2 =", "answer": "3 7"})
    bos = tokenizer.bos_token_id
    sequences = [
        [bos] + tokenizer(f"{p['prompt']} {p['answer']}", add_special_tokens=False)["input_ids"]
        for p in problems
    ]
    oracle = Oracle(sequences, len(tokenizer))
    assert evaluate_problems(oracle, tokenizer, problems, batch_size=4).all()
    seven = tokenizer.convert_tokens_to_ids("7")
    guess = evaluate_problems(
        Oracle(sequences, len(tokenizer), constant=seven), tokenizer, problems, batch_size=5
    )
    expected = np.array([p["answer"] == "7" for p in problems])
    assert (guess == expected).all() and not guess[-1]  # "3 7" needs two right tokens
    for batch in problem_batches(tokenizer, problems, batch_size=4):
        for row, index in enumerate(batch["prompt_ids"]):
            positions = batch["measure_mask"][row].nonzero().squeeze(1)
            answer = tokenizer(problems[index]["answer"], add_special_tokens=False)["input_ids"]
            assert batch["input_ids"][row, positions + 1].tolist() == answer
            assert batch["input_ids"][row, 0] == bos
            assert batch["attention_mask"][row].sum() == len(sequences[index])


def test_bad_settings_name_their_key(tmp_path):
    validate_problem_settings(SPEC)
    cases = [
        ({"families": {"algebra": {"levels": [1]}}}, r"families\.algebra: unknown"),
        ({"families": {"hops": {"levels": [0], "relations": 2}}}, r"hops\.levels"),
        ({"families": {"hops": {"levels": [1], "relations": 9}}}, r"hops\.relations"),
        ({"families": {"lookup": {"levels": [1, 4], "table_pairs": 3}}}, r"lookup\.table_pairs"),
        ({"train_problems": 0}, r"depth_use\.problems\.train_problems"),
    ]
    for change, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            validate_problem_settings({**SPEC, **change})
    script = REPO / "workflow_scripts" / "make_problems.py"
    env_spec = {
        **SPEC,
        "out": str(tmp_path / "p"),
        "seed": 0,
        "families": {"algebra": {"levels": [1]}},
    }
    run = subprocess.run(
        [sys.executable, str(script), "--spec", json.dumps(env_spec)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert run.returncode == 2 and "families.algebra" in run.stderr
    assert not (tmp_path / "p").exists()
    good = {**SPEC, "out": str(tmp_path / "p"), "seed": 0, "train_problems": 50}
    run = subprocess.run(
        [sys.executable, str(script), "--spec", json.dumps(good)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    assert data_lib.read_meta(tmp_path / "p")["splits"]["train"]["documents"] == 50
