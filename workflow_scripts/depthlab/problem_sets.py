"""Problems of graded difficulty for the depth score: synthetic families generated offline (the
laptop stand-in) and the datasets Csordás et al. 2025 measure it on, MATH levels 1-5 and MQuAKE
2/3/4-hop questions (families math and mquake: depthlab.benchmark_problems, read from the hub or a
local file; evaluation problems only, for hub models).

Families (every token is one whitespace-separated word of a fixed vocabulary):

  arithmetic  level k = k chained operations mod 10, evaluated left to right:
              "7 + 5 - 3 =" -> "9" (level 2). Chance: 1/10.
  hops        level k = k hops through fixed random permutations learned in the weights (the
              MQuAKE k-hop questions in miniature): relations A, B, C, ... are random maps of
              the entities (letters) drawn once from the set's seed; "c A B =" -> B(A(c)).
              Chance: 1 / len(LETTERS).
  lookup      level k = k hops through an in-context table of letter -> letter pairs:
              "a > c , c > f , b > e , ... ; a ^ 2 =" -> "f". The chain a -> c -> f has k + 1
              distinct letters; the other pairs are distractors; pair order is shuffled.
              Chance: 1 / len(LETTERS).

With at least one synthetic family, `write_problem_set` writes a folder in exactly the data
stage's format (depthlab.data: tokenizer/,
train.bin, val.bin, val.jsonl, meta.json, provenance.json) so `depthlab.training.pretrain` trains
on it unchanged: the documents are whole problems with their answer ("7 + 5 - 3 = 9"), each
followed by eos, levels mixed. It adds problems.jsonl, the evaluation problems (family, level,
prompt, answer; drawn independently of the training problems with their own seed; a level whose
problem space is small, like arithmetic level 1, necessarily overlaps the training set; dataset
families add their problems to problems.jsonl and nothing to the training data). A set of dataset
families only trains nothing: the folder holds problems.jsonl, meta.json and provenance.json.
`read_problems` reads problems.jsonl back; scoring a model on them is depthlab.problem_scoring.

Torch-free (numpy; the tokenizer from `tokenizers` / `transformers`): the make_problems job
imports no model code.
"""

from __future__ import annotations

import hashlib
import json
import os
import string

import numpy as np

from .atomic_files import atomic_path
from .benchmark_problems import DATASET_FAMILIES, dataset_problems, validate_dataset_family
from .data import EOS_TOKEN, PAD_TOKEN, token_dtype
from .errors import DatasetProblemError, ProblemError
from .provenance import Provenance

FAMILIES = ("arithmetic", "hops", "lookup")  # synthetic, generated here
ALL_FAMILIES = FAMILIES + tuple(DATASET_FAMILIES)
DIGITS = tuple(string.digits)
LETTERS = tuple(string.ascii_lowercase[:16])
RELATIONS = tuple(string.ascii_uppercase[:8])
OPERATORS = ("+", "-")
SYMBOLS = ("=", ">", ",", ";", "^")
VOCABULARY = (EOS_TOKEN, PAD_TOKEN) + DIGITS + LETTERS + RELATIONS + OPERATORS + SYMBOLS
PROBLEMS_FILE = "problems.jsonl"


# ---------------------------------------------------------------------------------------------
# Settings


def validate_problem_settings(spec: dict, where: str = "depth_use.problems") -> None:
    """Config-time check of the problem-set settings (see make_problems.py for the keys; no
    dataset is read)."""
    families = spec.get("families")
    if not isinstance(families, dict) or not families:
        raise ProblemError(
            f"{where}.families: a mapping of family -> settings "
            f"(families: {', '.join(ALL_FAMILIES)})"
        )
    for name, family in families.items():
        key = f"{where}.families.{name}"
        if name not in ALL_FAMILIES:
            raise ProblemError(f"{key}: unknown problem family (known: {', '.join(ALL_FAMILIES)})")
        if name in DATASET_FAMILIES:
            try:
                validate_dataset_family(name, family, key)
            except DatasetProblemError as error:
                raise ProblemError(str(error)) from None
            continue
        levels = family.get("levels") if isinstance(family, dict) else None
        if (
            not isinstance(levels, list)
            or not levels
            or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in levels)
        ):
            raise ProblemError(f"{key}.levels: a non-empty list of integers >= 1")
        if name == "hops":
            relations = family.get("relations")
            if (
                isinstance(relations, bool)
                or not isinstance(relations, int)
                or not 1 <= relations <= len(RELATIONS)
            ):
                raise ProblemError(f"{key}.relations: an integer in 1..{len(RELATIONS)}")
        if name == "lookup":
            pairs = family.get("table_pairs")
            top = max(levels)
            if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < top:
                raise ProblemError(
                    f"{key}.table_pairs: an integer >= the highest level "
                    f"({top}): a k-hop chain needs k pairs"
                )
            if pairs + 1 > len(LETTERS):
                raise ProblemError(
                    f"{key}.table_pairs: at most {len(LETTERS) - 1} (the table "
                    f"uses distinct letters of {len(LETTERS)})"
                )
    # training data exists only for synthetic families: without one the counts are optional
    trains = has_synthetic_family(spec)
    for key in ("train_problems", "val_problems", "eval_per_level"):
        value = spec.get(key)
        if value is None and key != "eval_per_level" and not trains:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(f"{where}.{key}: an integer >= 1 (got {value!r})")
    weights = spec.get("level_weights", "uniform")
    if weights not in ("uniform", "level"):
        raise ProblemError(f"{where}.level_weights: 'uniform' or 'level' (got {weights!r})")


def has_synthetic_family(spec: dict) -> bool:
    """Whether a problem set has training data (a synthetic family), so a model can train on it."""
    return any(name in FAMILIES for name in (spec.get("families") or {}))


def _synthetic_only(spec: dict) -> dict:
    return {
        **spec,
        "families": {name: cfg for name, cfg in spec["families"].items() if name in FAMILIES},
    }


# ---------------------------------------------------------------------------------------------
# Generators: (prompt words, answer words)


def arithmetic_problem(level: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    value = int(rng.integers(10))
    words = [str(value)]
    for _ in range(level):
        operator = OPERATORS[int(rng.integers(len(OPERATORS)))]
        operand = int(rng.integers(10))
        value = (value + operand) % 10 if operator == "+" else (value - operand) % 10
        words += [operator, str(operand)]
    return words + ["="], [str(value)]


def lookup_problem(
    level: int, rng: np.random.Generator, table_pairs: int
) -> tuple[list[str], list[str]]:
    letters = [LETTERS[i] for i in rng.permutation(len(LETTERS))[: table_pairs + 1]]
    chain = letters[: level + 1]  # start -> ... -> answer, distinct letters
    pairs = list(zip(chain[:-1], chain[1:]))
    keys = set(chain[:-1])
    # distractor pairs: other keys (never on the chain's path), values anywhere
    others = [x for x in letters if x not in keys and x != chain[-1]]
    for key in others[: table_pairs - level]:
        pairs.append((key, LETTERS[int(rng.integers(len(LETTERS)))]))
    order = rng.permutation(len(pairs))
    words = []
    for index, position in enumerate(order):
        a, b = pairs[position]
        words += [a, ">", b] + ([","] if index < len(order) - 1 else [])
    return words + [";", chain[0], "^", str(level), "="], [chain[-1]]


def relation_tables(count: int, seed: int) -> np.ndarray:
    """(count, len(LETTERS)) random permutations of the entities, fixed by the problem set's
    seed (permutations: iterating random maps would collapse onto a few entities, making deep
    answers guessable from frequencies)."""
    rng = np.random.default_rng([seed, 104729])
    return np.stack([rng.permutation(len(LETTERS)) for _ in range(count)])


def hops_problem(
    level: int, rng: np.random.Generator, tables: np.ndarray
) -> tuple[list[str], list[str]]:
    entity = int(rng.integers(len(LETTERS)))
    words = [LETTERS[entity]]
    for _ in range(level):
        relation = int(rng.integers(len(tables)))
        entity = int(tables[relation, entity])
        words.append(RELATIONS[relation])
    return words + ["="], [LETTERS[entity]]


def generate_problem(family: str, level: int, rng: np.random.Generator, settings: dict):
    if family == "arithmetic":
        return arithmetic_problem(level, rng)
    if family == "hops":
        return hops_problem(level, rng, settings["_tables"])
    if family == "lookup":
        return lookup_problem(level, rng, settings["table_pairs"])
    raise ProblemError(f"families.{family}: unknown problem family")


def chance_accuracy(family: str) -> float:
    """Accuracy of guessing; 0 for the dataset families (open-ended answers)."""
    if family in DATASET_FAMILIES:
        return 0.0
    return 1.0 / (len(DIGITS) if family == "arithmetic" else len(LETTERS))


def _with_tables(spec: dict, seed: int) -> dict:
    """The family settings, with the hops family's relation tables (from the set's seed)."""
    families = {name: dict(cfg) for name, cfg in spec["families"].items()}
    if "hops" in families:
        families["hops"]["_tables"] = relation_tables(families["hops"]["relations"], seed)
    return families


def _levels(spec: dict) -> list[tuple[str, int]]:
    return [
        (family, int(level)) for family, cfg in spec["families"].items() for level in cfg["levels"]
    ]


def sample_problems(
    spec: dict, count: int, seed: int, weights: str = "uniform", table_seed: int | None = None
) -> list[dict]:
    """`count` problems, (family, level) drawn with probability uniform or proportional to the
    level (harder levels more often: they need more examples). table_seed: the seed of the
    hops relations (the problem set's seed; default `seed`)."""
    families = _with_tables(spec, seed if table_seed is None else table_seed)
    rng = np.random.default_rng(seed)
    levels = _levels(spec)
    p = np.array([level if weights == "level" else 1.0 for _, level in levels], dtype=float)
    p /= p.sum()
    picks = rng.choice(len(levels), size=count, p=p)
    problems = []
    for pick in picks:
        family, level = levels[pick]
        prompt, answer = generate_problem(family, level, rng, families[family])
        problems.append(
            {
                "family": family,
                "level": level,
                "prompt": " ".join(prompt),
                "answer": " ".join(answer),
            }
        )
    return problems


def evaluation_problems(spec: dict, seed: int) -> list[dict]:
    """eval_per_level problems for every (family, level), in that order."""
    families = _with_tables(spec, seed)
    problems = []
    for index, (family, level) in enumerate(_levels(spec)):
        rng = np.random.default_rng([seed, 7919, index])
        for _ in range(spec["eval_per_level"]):
            prompt, answer = generate_problem(family, level, rng, families[family])
            problems.append(
                {
                    "family": family,
                    "level": level,
                    "prompt": " ".join(prompt),
                    "answer": " ".join(answer),
                }
            )
    return problems


# ---------------------------------------------------------------------------------------------
# Tokenizer and the data folder


def build_tokenizer():
    """Word-level tokenizer over VOCABULARY (whitespace split), eos = bos, pad as in data.py."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: index for index, word in enumerate(VOCABULARY)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words by spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        clean_up_tokenization_spaces=False,
    )


def _encode(tokenizer, text: str) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if tokenizer.pad_token_id in ids:  # the unk token: a word outside VOCABULARY
        raise ProblemError(f"problem text {text!r} has a word outside the vocabulary")
    return ids


def write_problem_set(spec: dict, out_dir: str | os.PathLike, seed: int) -> dict:
    """Write the problem folder atomically (see the module docstring); returns meta."""
    validate_problem_settings(spec, where="problems")
    local = [
        cfg["dataset"]["path"]
        for name, cfg in spec["families"].items()
        if name in DATASET_FAMILIES and cfg["dataset"]["source"] == "jsonl"
    ]
    provenance = Provenance("depth_use.problems", config=spec, inputs=local, seed=seed)
    synthetic = _synthetic_only(spec)
    evaluation, datasets = [], {}
    if synthetic["families"]:
        evaluation = evaluation_problems(synthetic, seed)
    offset = len(_levels(synthetic))
    for name, cfg in spec["families"].items():
        if name not in DATASET_FAMILIES:
            continue
        try:
            problems, datasets[name] = dataset_problems(
                name, cfg, spec["eval_per_level"], seed, offset, f"problems.families.{name}"
            )
        except DatasetProblemError as error:
            raise ProblemError(str(error)) from None
        evaluation += problems
        offset += len(cfg["levels"])
    chance = {f: chance_accuracy(f) for f in spec["families"]}
    problems_meta = {
        "file": PROBLEMS_FILE,
        "count": len(evaluation),
        "per_level": spec["eval_per_level"],
        "chance": chance,
        **({"datasets": datasets} if datasets else {}),
    }
    if not synthetic["families"]:
        with atomic_path(out_dir, is_dir=True) as tmp:
            with open(tmp / PROBLEMS_FILE, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(p) + "\n" for p in evaluation)
            meta = {
                "format": "evaluation problems only (problems.jsonl): dataset families "
                "have no training data",
                "source": {"kind": "dataset_problems", "families": spec["families"], "seed": seed},
                "problems": problems_meta,
            }
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            provenance.extra["meta"] = {"problems": problems_meta}
            provenance.write(tmp / "provenance.json")
        return meta
    tokenizer = build_tokenizer()
    weights = spec.get("level_weights", "uniform")
    splits = {
        "train": sample_problems(synthetic, spec["train_problems"], seed, weights),
        "val": sample_problems(
            synthetic, spec["val_problems"], seed + 1_000_003, weights, table_seed=seed
        ),
    }
    dtype = token_dtype(len(tokenizer))
    eos = tokenizer.eos_token_id
    counts = {}
    with atomic_path(out_dir, is_dir=True) as tmp:
        tokenizer.save_pretrained(tmp / "tokenizer")
        for split, problems in splits.items():
            texts = [f"{p['prompt']} {p['answer']}" for p in problems]
            flat = []
            for text in texts:
                flat += _encode(tokenizer, text) + [eos]
            array = np.asarray(flat, dtype=dtype)
            array.tofile(tmp / f"{split}.bin")
            counts[split] = {
                "documents": len(texts),
                "tokens": len(flat),
                "bytes": sum(len(t.encode()) for t in texts),
                "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
            }
            if split == "val":
                with open(tmp / "val.jsonl", "w", encoding="utf-8") as handle:
                    handle.writelines(json.dumps({"text": t}) + "\n" for t in texts)
        with open(tmp / PROBLEMS_FILE, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(p) + "\n" for p in evaluation)
        meta = {
            "format": "flat token ids per split, each document followed by eos_id",
            "dtype": dtype.name,
            "vocab_size": len(tokenizer),
            "eos_id": eos,
            "bos_id": tokenizer.bos_token_id,
            "pad_id": tokenizer.pad_token_id,
            "splits": counts,
            "split_rule": "independent samples (train seed, val seed + 1000003)",
            "source": {
                "kind": "synthetic_problems",
                "families": spec["families"],
                "level_weights": weights,
                "seed": seed,
            },
            "tokenizer": {"kind": "word_level", "vocabulary": list(VOCABULARY)},
            "dropped_documents": {},
            "problems": problems_meta,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        provenance.extra["meta"] = {k: meta[k] for k in ("splits", "problems")}
        provenance.write(tmp / "provenance.json")
    return meta


def run(spec: dict) -> dict:
    """The make_problems job: the problem set of `spec` (its settings plus `out` and `seed`)
    written to spec["out"]; returns its meta."""
    settings = {k: v for k, v in spec.items() if k not in ("out", "seed")}
    return write_problem_set(settings, spec["out"], seed=int(spec["seed"]))


def read_problems(path: str | os.PathLike, where: str = "problems") -> list[dict]:
    """Problems from a JSON-lines file: {prompt, answer, level[, family]} per line (the paper
    config's MATH / MQuAKE problems use the same format)."""
    problems = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            for key in ("prompt", "answer", "level"):
                if key not in record:
                    raise ProblemError(f"{where}: {path}:{number}: no '{key}' field")
            record.setdefault("family", "problems")
            problems.append(record)
    if not problems:
        raise ProblemError(f"{where}: {path} holds no problem")
    return problems
