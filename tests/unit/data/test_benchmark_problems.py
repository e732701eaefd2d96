"""Dataset problem families (MATH levels, MQuAKE hop counts): local fixtures in the real datasets'
record layouts convert into problems with the paper's prompt format, the right levels, per-level
caps and seed-determined draws; a dataset-only set writes no training data and a model cannot
train on it; MATH answers are graded on the final \\boxed{}; the depth score runs on a tiny random
Llama with a real (offline) tokenizer and measures exactly the answer tokens; bad settings name
their key; the paper config pins its datasets."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiny_models
import torch
from depthlab.config import ConfigError, load_config, resolve
from depthlab.data.benchmark_problems import boxed_answer, math_level, normalise_answer
from depthlab.data.problem_sets import read_problems, validate_problem_settings, write_problem_set
from depthlab.stages.depth_use.problem_scoring import (
    accuracy_table,
    depth_score_tables,
    evaluate_problems,
    problem_batches,
)
from requirements_helpers import minilm_folder
from tiny_models import Oracle

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------------------ fixtures


def math_records() -> list[dict]:
    """MATH test records in EleutherAI/hendrycks_math's layout: 4 per level 1..5 (level 5: 2),
    one "Level ?" and one solution without a boxed answer."""
    records = []
    for level in range(1, 6):
        for i in range(4 if level < 5 else 2):
            value = 10 * level + i
            records.append(
                {
                    "problem": f"Compute ${level} \\cdot 10 + {i}$.",
                    "level": f"Level {level}",
                    "type": "Intermediate Algebra",
                    "solution": f"We have ${level} \\cdot 10 + {i} = \\boxed{{{value}}}$.",
                }
            )
    records.append(
        {
            "problem": "Unknown level.",
            "level": "Level ?",
            "type": "Geometry",
            "solution": "It is $\\boxed{1}$.",
        }
    )
    records.append(
        {
            "problem": "No box.",
            "level": "Level 2",
            "type": "Algebra",
            "solution": "The answer is 3.",
        }
    )
    return records


def mquake_records(layout: str = "remastered") -> list[dict]:
    """MQuAKE-CF-3k records with 2, 3 and 4 hops (3 of each): the Remastered copy's flat
    orig_triples, or princeton-nlp's orig.triples."""
    records = []
    for hops in (2, 3, 4):
        for i in range(3):
            triples = [[f"Q{i}{h}", f"P{h}", f"Q{i}{h + 1}"] for h in range(hops)]
            record = {
                "case_id": len(records),
                "questions": [
                    f"What is the {'-'.join(['relation'] * hops)} of entity {i}?",
                    "variant 2?",
                    "variant 3?",
                ],
                "answer": f"Answer {hops} {i}",
                "answer_alias": [],
                "new_answer": "Edited",
                "single_hops": [{"question": f"hop {h}?", "answer": f"a{h}"} for h in range(hops)],
            }
            if layout == "remastered":
                record["orig_triples"] = triples
            else:
                record["orig"] = {"triples": triples, "triples_labeled": triples}
            records.append(record)
    return records


def write_jsonl(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def dataset_spec(
    tmp_path: Path, per_level: int = 3, math_levels=(1, 2, 5), mquake_levels=(2, 3, 4)
) -> dict:
    return {
        "families": {
            "math": {
                "levels": list(math_levels),
                "max_new_tokens": 6,
                "dataset": {
                    "source": "jsonl",
                    "path": write_jsonl(tmp_path / "math.jsonl", math_records()),
                },
            },
            "mquake": {
                "levels": list(mquake_levels),
                "dataset": {
                    "source": "jsonl",
                    "path": write_jsonl(tmp_path / "mquake.jsonl", mquake_records()),
                },
            },
        },
        "eval_per_level": per_level,
    }


# ------------------------------------------------------------------------------ conversion


def test_converter_levels_caps_prompts_and_seed(tmp_path):
    spec = dataset_spec(tmp_path)
    meta = write_problem_set(spec, tmp_path / "a", seed=0)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "meta.json",
        "problems.jsonl",
        "provenance.json",
    ]  # no training data
    problems = read_problems(tmp_path / "a" / "problems.jsonl")
    counts = accuracy_table(problems, np.zeros(len(problems), bool))
    assert {(r.family, r.level): r.problems for r in counts.itertuples()} == {
        ("math", 1): 3,
        ("math", 2): 3,
        ("math", 5): 2,  # level 5 has 2: all of them
        ("mquake", 2): 3,
        ("mquake", 3): 3,
        ("mquake", 4): 3,
    }
    assert set(counts["chance"]) == {0.0}
    assert meta["problems"]["datasets"]["math"]["available"] == {1: 4, 2: 4, 5: 2}
    assert meta["problems"]["datasets"]["math"]["unusable_records"] == 1  # no boxed answer
    records = {"math": math_records(), "mquake": mquake_records()}
    for problem in problems:
        record = records[problem["family"]][problem["source_index"]]
        if problem["family"] == "math":
            assert math_level(record) == problem["level"]
            assert problem["prompt"] == f"Problem: {record['problem']}\nAnswer:"
            assert problem["answer"] == record["solution"]  # teacher forced
            assert problem["grade"] == "boxed" and problem["max_new_tokens"] == 6
            assert problem["final_answer"] == str(
                problem["level"] * 10 + int(record["problem"].split("+ ")[1][0])
            )
        else:
            assert len(record["orig_triples"]) == problem["level"]
            assert problem["prompt"] == f"Question: {record['questions'][0]}\nAnswer:"
            assert problem["answer"] == record["answer"] and "grade" not in problem
    # the same seed draws the same problems; another seed other ones (math level 1: 3 of 4)
    write_problem_set(spec, tmp_path / "b", seed=0)
    assert (tmp_path / "a" / "problems.jsonl").read_bytes() == (
        tmp_path / "b" / "problems.jsonl"
    ).read_bytes()
    draws = set()
    for seed in range(1, 8):
        write_problem_set(spec, tmp_path / f"s{seed}", seed=seed)
        level1 = [
            p["source_index"]
            for p in read_problems(tmp_path / f"s{seed}" / "problems.jsonl")
            if p["family"] == "math" and p["level"] == 1
        ]
        assert len(level1) == 3 == len(set(level1))
        draws.add(tuple(level1))
    assert len(draws) > 1


def test_princeton_json_layout_and_mixed_sets(tmp_path):
    """princeton-nlp's MQuAKE-CF-3k.json (a JSON list, orig.triples) reads like the Remastered
    jsonl; a synthetic family beside a dataset family keeps its training data and problems
    bit-identical to the synthetic-only set."""
    path = tmp_path / "MQuAKE-CF-3k.json"
    path.write_text(json.dumps(mquake_records("princeton")))
    spec = {
        "families": {"mquake": {"levels": [4], "dataset": {"source": "jsonl", "path": str(path)}}},
        "eval_per_level": 2,
    }
    write_problem_set(spec, tmp_path / "p", seed=0)
    problems = read_problems(tmp_path / "p" / "problems.jsonl")
    assert [p["level"] for p in problems] == [4, 4]
    assert all(p["answer"].startswith("Answer 4") for p in problems)
    synthetic = {
        "families": {"hops": {"levels": [1, 2], "relations": 2}},
        "train_problems": 50,
        "val_problems": 10,
        "eval_per_level": 4,
    }
    mixed = {**synthetic, "families": {**spec["families"], **synthetic["families"]}}
    write_problem_set(synthetic, tmp_path / "s", seed=3)
    write_problem_set(mixed, tmp_path / "m", seed=3)
    for name in ("train.bin", "val.bin", "val.jsonl"):
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "m" / name).read_bytes()
    both = read_problems(tmp_path / "m" / "problems.jsonl")
    assert [p for p in both if p["family"] == "hops"] == read_problems(
        tmp_path / "s" / "problems.jsonl"
    )
    assert sum(p["family"] == "mquake" for p in both) == 3  # all 3 four-hop records


def test_boxed_answers_and_normalisation():
    assert (
        boxed_answer("so $x = \\boxed{\\frac{1}{2}}$ and \\boxed{\\{1, 2\\}} end") == "\\{1, 2\\}"
    )
    assert boxed_answer("\\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert boxed_answer("\\fbox{7}.") == "7"
    assert boxed_answer("no answer") is None and boxed_answer("\\boxed{open") is None
    same = [
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("5.", "5"),
        ("10\\%", "10"),
        ("\\text{ (A) }", "(A)"),
        ("3.00", "3"),
        ("90^\\circ", "90"),
    ]
    for a, b in same:
        assert normalise_answer(a) == normalise_answer(b), (a, b)
    assert normalise_answer("\\frac{1}{2}") != normalise_answer("0.5")  # no symbolic match
    assert math_level({"level": "Level 4"}) == 4 and math_level({"level": "Level ?"}) is None


# ------------------------------------------------------------------------------ settings


def test_bad_settings_name_their_key(tmp_path):
    spec = dataset_spec(tmp_path)
    validate_problem_settings(spec)  # no train_problems / val_problems: none needed
    math, mquake = spec["families"]["math"], spec["families"]["mquake"]
    cases = [
        ({"math": {**math, "levels": [0, 6]}}, r"families\.math\.levels: .*1\.\.5"),
        ({"mquake": {**mquake, "levels": [1, 2]}}, r"families\.mquake\.levels: .*2\.\.4"),
        ({"mquake": {**mquake, "levels": [2, 2]}}, r"families\.mquake\.levels"),
        ({"math": {**math, "subjects": ["algebra"]}}, r"families\.math\.subjects: unknown"),
        (
            {"mquake": {**mquake, "max_new_tokens": 4}},
            r"families\.mquake\.max_new_tokens: "
            r"unknown",
        ),
        ({"math": {**math, "max_new_tokens": 0}}, r"families\.math\.max_new_tokens"),
        ({"math": {"levels": [1]}}, r"families\.math\.dataset: required"),
        (
            {"math": {**math, "dataset": {"source": "csv", "path": "x"}}},
            r"families\.math\.dataset\.source",
        ),
        (
            {"math": {**math, "dataset": {"source": "hf_dataset", "split": "test"}}},
            r"families\.math\.dataset\.name",
        ),
        (
            {"math": {**math, "dataset": {**math["dataset"], "split": "test"}}},
            r"families\.math\.dataset\.split: unknown field for source jsonl",
        ),
        (
            {
                "mquake": {
                    **mquake,
                    "dataset": {
                        "source": "hf_dataset",
                        "name": "m",
                        "split": "s",
                        "revison": "abc",
                    },
                }
            },
            r"families\.mquake\.dataset\.revison: unknown",
        ),
    ]
    for change, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            validate_problem_settings({**spec, "families": {**spec["families"], **change}})
    # with a synthetic family the training counts are required again
    with pytest.raises(ValueError, match=r"depth_use\.problems\.train_problems"):
        validate_problem_settings(
            {**spec, "families": {**spec["families"], "hops": {"levels": [1], "relations": 2}}}
        )
    # a requested level the dataset has no record of names the levels key
    with pytest.raises(ValueError, match=r"families\.math\.levels: level 3 has no usable"):
        write_problem_set(
            {
                **spec,
                "families": {
                    "math": {
                        **math,
                        "dataset": {
                            "source": "jsonl",
                            "path": write_jsonl(tmp_path / "m1.jsonl", math_records()[:4]),
                        },
                        "levels": [1, 3],
                    }
                },
            },
            tmp_path / "none",
            seed=0,
        )
    assert not (tmp_path / "none").exists()
    # the script: exit 2 naming the key, nothing written; a missing file names the path key
    script = REPO / "workflow_scripts" / "make_problems.py"
    for bad, key in (
        ({**math, "levels": [7]}, "families.math.levels"),
        (
            {**math, "dataset": {"source": "jsonl", "path": str(tmp_path / "no.jsonl")}},
            "families.math.dataset.path",
        ),
    ):
        run = subprocess.run(
            [
                sys.executable,
                str(script),
                "--spec",
                json.dumps(
                    {**spec, "families": {"math": bad}, "out": str(tmp_path / "p"), "seed": 0}
                ),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert run.returncode == 2 and key in run.stderr, run.stderr
        assert not (tmp_path / "p").exists()
    run = subprocess.run(
        [
            sys.executable,
            str(script),
            "--spec",
            json.dumps({**spec, "out": str(tmp_path / "p"), "seed": 0}),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1])["problems"] == 17


def test_config_rejects_training_on_a_dataset_only_set(tmp_path):
    config = load_config(REPO / "config" / "test.yaml")
    config["depth_use"]["problems"] = dataset_spec(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"^models\.depth_problems\.data: 'problems' needs a "
        r"synthetic family",
    ):
        resolve(config)
    config["models"]["depth_problems"]["data"] = "corpus"
    # a local dataset file is an input of make_problems: editing it rebuilds the problem set
    inputs = resolve(config).inputs_for("make_problems", {})["datasets"]
    assert sorted(inputs) == sorted(
        str(f["dataset"]["path"]) for f in config["depth_use"]["problems"]["families"].values()
    )
    config["depth_use"]["problems"]["families"]["mquake"]["dataset"]["path"] = "nowhere.jsonl"
    with pytest.raises(ConfigError, match=r"families\.mquake\.dataset\.path: 'nowhere"):
        resolve(config)
    config["depth_use"]["problems"]["families"]["math"]["levels"] = [6]
    with pytest.raises(ConfigError, match=r"depth_use\.problems\.families\.math\.levels"):
        resolve(config)


def test_paper_config_scores_hub_models_on_pinned_math_and_mquake():
    config = load_config(REPO / "config" / "paper.yaml")
    families = config["depth_use"]["problems"]["families"]
    assert families["math"]["levels"] == [1, 2, 3, 4, 5]
    assert families["mquake"]["levels"] == [2, 3, 4]
    for family in ("math", "mquake"):
        dataset = families[family]["dataset"]
        assert dataset["source"] == "hf_dataset"
        assert re.fullmatch(r"[0-9a-f]{40}", dataset["revision"]), family
    resolved = resolve(config)
    problems = resolved.jobs("make_problems")["problems"]
    assert problems["families"]["math"]["dataset"]["name"] == "EleutherAI/hendrycks_math"
    scored = {
        name: spec for name, spec in resolved.jobs("skip_interventions").items() if spec["problems"]
    }
    assert {"llama31_8b", "llama31_70b"} <= set(scored)
    assert all(
        spec["problems"].endswith("depth_use/problems/problems.jsonl") for spec in scored.values()
    )


# ------------------------------------------------------------------------------ evaluation


@pytest.fixture(scope="module")
def hub_tokenizer():
    """A real hub tokenizer available offline (MiniLM's BERT WordPiece), with [CLS] as bos."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    tokenizer.bos_token = tokenizer.cls_token
    return tokenizer


def tiny_llama(vocab: int, layers: int = 3):
    from tiny_models import llama

    return llama(layers, vocab_size=vocab, max_position_embeddings=256)


def test_answer_positions_and_depth_score_with_a_hub_tokenizer(tmp_path, hub_tokenizer):
    from depthlab.models.architectures import adapt
    from depthlab.stages.depth_use.interventions import SkipSettings

    tokenizer = hub_tokenizer
    write_problem_set(
        dataset_spec(tmp_path, per_level=2, math_levels=(1, 2), mquake_levels=(2, 4)),
        tmp_path / "p",
        seed=0,
    )
    problems = read_problems(tmp_path / "p" / "problems.jsonl")
    bos = tokenizer.bos_token_id
    multi_token = 0
    for batch in problem_batches(tokenizer, problems, batch_size=3):
        for row, index in enumerate(batch["prompt_ids"]):
            problem = problems[index]
            positions = batch["measure_mask"][row].nonzero().squeeze(1)
            prompt = tokenizer(problem["prompt"], add_special_tokens=False)["input_ids"]
            answer = tokenizer(problem["answer"], add_special_tokens=False)["input_ids"]
            # the marked positions predict exactly the answer's tokens, from the last prompt one
            assert batch["input_ids"][row, positions + 1].tolist() == answer
            assert positions.tolist() == list(range(len(prompt), len(prompt) + len(answer)))
            assert batch["input_ids"][row, 0] == bos
            assert batch["attention_mask"][row].sum() == 1 + len(prompt) + len(answer)
            multi_token += len(answer) > 1
    assert multi_token == len(problems)
    model = tiny_llama(len(tokenizer))
    settings = SkipSettings(
        variants=("layer_all",),
        no_skip_front=1,
        future_positions=1,
        future_min_position=1,
        max_rows=64,
    )
    tables = depth_score_tables(
        adapt(model),
        tokenizer,
        problems,
        settings,
        "layer_all",
        batch_size=3,
        max_length=256,
        prepend_bos=True,
        bootstrap={"resamples": 20, "confidence": 0.9},
        seed=0,
    )
    score = tables["depth_score"]
    assert {(r.family, r.level) for r in score.itertuples()} == {
        ("math", 1),
        ("math", 2),
        ("mquake", 2),
        ("mquake", 4),
    }
    assert np.isfinite(score["depth_score"]).all()
    assert ((score["depth_score"] >= 0) & (score["depth_score"] <= 2)).all()
    effects = tables["problem_effects"]
    assert len(effects) == 3 * len(problems) and (effects["output_effect"] > 0).all()
    accuracy = tables["accuracy"]
    assert set(accuracy["problems"]) == {2} and set(accuracy["chance"]) == {0.0}
    # a random model solves nothing; MATH's generated solutions are kept
    assert not accuracy["accuracy"].any()
    completions = tables["completions"]
    assert sorted(completions["problem"]) == [
        i for i, p in enumerate(problems) if p["family"] == "math"
    ]
    assert all(isinstance(text, str) for text in completions["completion"])


def byte_level_tokenizer(texts: list[str]):
    """A lossless byte-level BPE tokenizer (as Llama 3 / Qwen / GPT-2 use), trained on `texts`."""
    return tiny_models.byte_level_tokenizer(texts, vocab_size=400)


def solution_writer(tokenizer, prompts, continuations) -> Oracle:
    """Continues each prompt with its continuation's tokens, then eos."""
    return Oracle(
        [
            p + tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] * 40
            for p, c in zip(prompts, continuations)
        ],
        len(tokenizer),
    )


def test_math_accuracy_grades_the_final_boxed_answer():
    problems = [
        {
            "family": "math",
            "level": 1,
            "prompt": f"Problem: {k} + 1?\nAnswer:",
            "answer": "We get $\\boxed{2}$.",
            "grade": "boxed",
            "final_answer": "2",
            "max_new_tokens": 30,
        }
        for k in range(3)
    ]
    problems.append(
        {"family": "mquake", "level": 2, "prompt": "Question: who?\nAnswer:", "answer": "Paris"}
    )
    continuations = [
        " 1 plus 1 is $\\dfrac{4}{2} = \\boxed{2}$.\nProblem: next \\boxed{3}",
        " so \\boxed{3}",
        " a long way to go, and no answer yet",
        " Paris",
    ]
    tokenizer = byte_level_tokenizer([p["prompt"] for p in problems] + continuations)
    prompts = [
        [tokenizer.bos_token_id] + tokenizer(p["prompt"], add_special_tokens=False)["input_ids"]
        for p in problems
    ]
    completions = []
    correct = evaluate_problems(
        solution_writer(tokenizer, prompts, continuations),
        tokenizer,
        problems,
        batch_size=2,
        completions=completions,
    )
    # other tokens than the reference solution, the same boxed answer: right; the text from a
    # new "Problem:" on is cut, so its \boxed{3} does not count
    assert correct.tolist() == [True, False, False, True]
    assert completions[0] == " 1 plus 1 is $\\dfrac{4}{2} = \\boxed{2}$."
    assert completions[3] is None
    with pytest.raises(ValueError, match="unknown grade sympy"):
        evaluate_problems(
            solution_writer(tokenizer, prompts, continuations),
            tokenizer,
            [{**problems[0], "grade": "sympy"}],
        )
    # a transformers model decodes with its cache (left padding): the same greedy text as the
    # cache-free right-padded loop; a random model gets nothing right
    from depthlab.stages.depth_use.problem_scoring import _generate_texts, _greedy_tokens

    model = tiny_llama(len(tokenizer), layers=2)
    with torch.no_grad():
        cached = _generate_texts(
            model, tokenizer, prompts, 12, "\nProblem:", tokenizer.pad_token_id, "cpu"
        )
        plain = _greedy_tokens(model, prompts, 12, tokenizer.pad_token_id, "cpu")
    eos = tokenizer.eos_token_id
    assert cached == [
        tokenizer.decode(row[: row.index(eos)] if eos in row else row).split("\nProblem:")[0]
        for row in plain
    ]
    assert len({len(p) for p in prompts}) > 1 and any(cached)
    completions = []
    correct = evaluate_problems(
        model, tokenizer, problems[:2], batch_size=2, completions=completions
    )
    assert not correct.any() and all(isinstance(text, str) for text in completions)
