"""Synthetic graded-difficulty problems: answers agree with an independent solver, the folder is
in the data stage's format and the existing pretraining code trains on it, the greedy evaluation
scores an oracle and a constant guesser correctly (multi-token answers included), the answer
positions are the ones that predict answer tokens, and bad settings name their key. The
natural-text addition family: seed-determined, answers re-derived from the prompt text, levels
differ in digits, chance equal to an enumeration of every operand tuple, graded exactly with a
byte-level BPE tokenizer, and a config with it resolves and make_problems writes it."""

import itertools
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tiny_models
import torch
from depthlab.data import prepare as data_lib
from depthlab.data.problem_sets import (
    LETTERS,
    RELATIONS,
    addition_chance,
    build_tokenizer,
    evaluation_problems,
    read_problems,
    relation_tables,
    sample_problems,
    validate_problem_settings,
    write_problem_set,
)
from depthlab.stages.depth_use.problem_scoring import (
    accuracy_table,
    evaluate_problems,
    problem_batches,
)
from tiny_models import Oracle

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[3]
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


def test_folder_is_in_the_data_stage_format_and_pretrain_runs(tmp_path, test_config):
    from depthlab.stages.pretrain.training import pretrain
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
    decl = tiny_models.tiny_pretrain_model(
        test_config, "pre_ln", 2, steps=3, lr=1e-3, warmup_steps=1, eval_every=3,
        log_spaced_evals=0, eval_batches=1, checkpoint_every=100, precision="fp32",
    )  # fmt: skip
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


# ---------------------------------------------------------------------------------- addition

ADDITION = {"levels": [1, 2, 3, 4], "terms": 2, "shots": 3}


def parse_addition(prompt: str) -> tuple[list[tuple[list[str], str]], list[str]]:
    """(solved examples as (operand strings, written sum), question operand strings), read from
    the prompt text alone."""
    lines = prompt.split("\n")
    examples = []
    for line in lines[:-1]:
        match = re.fullmatch(r"(\d+(?: \+ \d+)+) = (\d+)", line)
        assert match, line
        examples.append((match.group(1).split(" + "), match.group(2)))
    match = re.fullmatch(r"(\d+(?: \+ \d+)+) =", lines[-1])
    assert match, lines[-1]
    return examples, match.group(1).split(" + ")


def test_addition_problems_are_seeded_right_and_graded_by_digits(tmp_path):
    spec = {"families": {"addition": ADDITION}, "eval_per_level": 40}
    meta = write_problem_set(spec, tmp_path / "a", seed=5)
    # evaluation only: no tokenizer or training data (natural text, for pretrained LMs)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "meta.json",
        "problems.jsonl",
        "provenance.json",
    ]
    problems = read_problems(tmp_path / "a" / "problems.jsonl")
    assert [p["level"] for p in problems] == [k for k in ADDITION["levels"] for _ in range(40)]
    for problem in problems:
        examples, question = parse_addition(problem["prompt"])
        level = problem["level"]
        assert len(examples) == ADDITION["shots"]
        for operands, written in examples + [(question, problem["answer"])]:
            assert len(operands) == ADDITION["terms"]
            # the level is the digit count of every number added; no leading zero
            assert all(len(x) == level and x[0] != "0" for x in operands), problem
            assert written == str(sum(int(x) for x in operands))
        # no example repeats the question or another example: none gives the answer away
        tuples = [tuple(ops) for ops, _ in examples] + [tuple(question)]
        assert len(set(tuples)) == len(tuples)
        assert problem["chance"] == addition_chance(level, ADDITION["terms"])
    # answers are spread over the level's range (not a few memorisable values)
    for level in (2, 3, 4):
        answers = [int(p["answer"]) for p in problems if p["level"] == level]
        assert len(set(answers)) >= 30  # of 40: repeats only by chance
        assert min(answers) >= 2 * 10 ** (level - 1) and max(answers) <= 2 * (10**level - 1)
    table = accuracy_table(problems, np.zeros(len(problems), bool))
    two_terms = [1 / (9 * 10 ** (k - 1)) for k in ADDITION["levels"]]  # 1 / operand count
    assert table["chance"].tolist() == pytest.approx(two_terms, rel=1e-12)
    chance = meta["problems"]["chance"]["addition"]
    assert list(chance) == ADDITION["levels"]
    assert list(chance.values()) == pytest.approx(two_terms, rel=1e-12)
    # the same seed writes the same bytes; another seed other problems
    write_problem_set(spec, tmp_path / "b", seed=5)
    write_problem_set(spec, tmp_path / "c", seed=6)
    first = (tmp_path / "a" / "problems.jsonl").read_bytes()
    assert first == (tmp_path / "b" / "problems.jsonl").read_bytes()
    assert first != (tmp_path / "c" / "problems.jsonl").read_bytes()
    # beside a synthetic family, that family's problems and training data are unchanged
    hops = {"hops": SPEC["families"]["hops"]}
    base = {**SPEC, "families": hops}
    write_problem_set(base, tmp_path / "s", seed=5)
    write_problem_set({**base, "families": {**hops, "addition": ADDITION}}, tmp_path / "m", seed=5)
    for name in ("train.bin", "val.bin", "val.jsonl"):
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "m" / name).read_bytes()
    mixed = read_problems(tmp_path / "m" / "problems.jsonl")
    assert [p for p in mixed if p["family"] == "hops"] == read_problems(
        tmp_path / "s" / "problems.jsonl"
    )
    assert sum(p["family"] == "addition" for p in mixed) == 4 * SPEC["eval_per_level"]


def test_addition_chance_is_the_most_likely_sum():
    """Against an enumeration of every operand tuple: the share of the most frequent sum."""
    for level, terms in ((1, 2), (1, 3), (1, 4), (2, 2), (2, 3)):
        digits = range(10 ** (level - 1), 10**level)
        counts = Counter(sum(ops) for ops in itertools.product(digits, repeat=terms))
        expected = max(counts.values()) / len(digits) ** terms
        assert addition_chance(level, terms) == pytest.approx(expected, rel=1e-12), (level, terms)
    assert addition_chance(6, 2) == pytest.approx(1 / 900_000, rel=1e-12)
    assert addition_chance(1, 3) < addition_chance(1, 2)  # more terms spread the sum


def byte_level_tokenizer(texts: list[str]):
    """A byte-level BPE tokenizer with digits split one by one, as SmolLM2's and Gemma 3's
    (" 127" -> " ", "1", "2", "7"), trained on `texts`."""
    return tiny_models.byte_level_tokenizer(texts, vocab_size=600, split_digits=True)


def test_addition_is_graded_on_every_answer_token(tmp_path):
    write_problem_set(
        {"families": {"addition": {**ADDITION, "shots": 2}}, "eval_per_level": 6},
        tmp_path / "p",
        seed=0,
    )
    problems = read_problems(tmp_path / "p" / "problems.jsonl")
    tokenizer = byte_level_tokenizer([f"{p['prompt']} {p['answer']}" for p in problems])
    bos = tokenizer.bos_token_id

    def writer(answers):
        """An oracle that continues each prompt with the given answer."""
        return Oracle(
            [
                [bos] + tokenizer(f"{p['prompt']} {a}", add_special_tokens=False)["input_ids"]
                for p, a in zip(problems, answers)
            ],
            len(tokenizer),
        )

    right = evaluate_problems(writer([p["answer"] for p in problems]), tokenizer, problems, 4)
    assert right.all()
    # the last digit one less (mod 10), the other tokens right: every problem wrong
    wrong = [p["answer"][:-1] + str((int(p["answer"][-1]) + 9) % 10) for p in problems]
    assert not evaluate_problems(writer(wrong), tokenizer, problems, 4).any()
    for batch in problem_batches(tokenizer, problems, batch_size=5):
        for row, index in enumerate(batch["prompt_ids"]):
            problem = problems[index]
            prompt = tokenizer(problem["prompt"], add_special_tokens=False)["input_ids"]
            full = tokenizer(f"{problem['prompt']} {problem['answer']}", add_special_tokens=False)
            answer = full["input_ids"][len(prompt) :]
            # the answer's tokens (space included) in context, after bos and the whole prompt
            assert tokenizer.decode(answer) == f" {problem['answer']}"
            positions = batch["measure_mask"][row].nonzero().squeeze(1)
            assert positions.tolist() == list(range(len(prompt), len(prompt) + len(answer)))
            assert batch["input_ids"][row, positions + 1].tolist() == answer
            assert len(answer) == 1 + len(problem["answer"])  # the space, then each digit


def test_addition_in_a_config_resolves_and_make_problems_writes_it(tmp_path):
    from depthlab.config import ConfigError, load_config, resolve

    config = load_config(REPO / "config" / "test.yaml")
    config["depth_use"]["problems"] = {"families": {"addition": ADDITION}, "eval_per_level": 3}
    config["models"]["depth_problems"]["data"] = "corpus"  # nothing to train on
    spec = resolve(config).jobs("make_problems")["problems"]
    assert spec["families"] == {"addition": ADDITION}
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "workflow_scripts" / "make_problems.py"),
            "--spec",
            json.dumps({**spec, "out": str(tmp_path / "p")}),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1])["problems"] == 12
    problems = read_problems(tmp_path / "p" / "problems.jsonl")
    assert [(p["family"], p["level"]) for p in problems[::3]] == [
        ("addition", k) for k in ADDITION["levels"]
    ]
    # a model cannot train on a set without a synthetic family
    config["models"]["depth_problems"]["data"] = "problems"
    with pytest.raises(ConfigError, match=r"models\.depth_problems\.data"):
        resolve(config)
    config["models"]["depth_problems"]["data"] = "corpus"
    for key, value in (("terms", 1), ("shots", -1), ("levels", [0]), ("digits", 3)):
        bad = {**ADDITION, key: value}
        config["depth_use"]["problems"]["families"]["addition"] = bad
        with pytest.raises(ConfigError, match=r"depth_use\.problems\.families\.addition"):
            resolve(config)


def test_bad_addition_settings_name_their_key():
    base = {"families": {"addition": ADDITION}, "eval_per_level": 2}
    validate_problem_settings(base)  # no train_problems / val_problems: nothing to train
    cases = [
        ({"levels": [1, 1]}, r"families\.addition\.levels"),
        ({"levels": [10]}, r"families\.addition\.levels: .*1\.\.9"),
        ({"levels": [True]}, r"families\.addition\.levels"),
        ({"terms": 1}, r"families\.addition\.terms: .*2\.\.10"),
        ({"shots": 33}, r"families\.addition\.shots: .*0\.\.32"),
        ({"relations": 2}, r"families\.addition\.relations: unknown field"),
    ]
    for change, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            validate_problem_settings({**base, "families": {"addition": {**ADDITION, **change}}})
    with pytest.raises(ValueError, match=r"families\.addition\.shots"):
        validate_problem_settings(
            {**base, "families": {"addition": {k: ADDITION[k] for k in ("levels", "terms")}}}
        )
