"""Problems of graded difficulty for the depth score: synthetic families generated offline (the
laptop stand-in), natural-text families generated offline for pretrained LMs, and the datasets
Csordás et al. 2025 measure it on, MATH levels 1-5 and MQuAKE 2/3/4-hop questions (families math
and mquake: depthlab.data.benchmark_problems, read from the hub or a local file; evaluation problems
only, for hub models).

Synthetic families (every token is one whitespace-separated word of a fixed vocabulary; a model
trained here learns them from the set's training data):

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

Natural-text families (evaluation problems only, no training data: plain text that a pretrained
LM reads with its own tokenizer, generated from the set's seed):

  addition    level k = integer addition of `terms` k-digit numbers (no modulus, no leading
              zero), `shots` solved examples of the same level first, one per line:
              "47 + 38 = 85\n12 + 90 = 102\n56 + 71 =" -> "127" (level 2, terms 2, shots 2).
              The examples are distinct from each other and from the question. The answer is
              graded exactly (every digit). Chance, per level: the accuracy of always giving the
              most likely sum, max_s P(sum = s) for uniform operands (1 / (9 * 10^(k-1)) for
              two terms); each problem carries it as `chance`.

With at least one synthetic family, `write_problem_set` writes a folder in exactly the data
stage's format (depthlab.data.prepare: tokenizer/,
train.bin, val.bin, val.jsonl, meta.json, provenance.json) so `depthlab.stages.pretrain.training.pretrain` trains
on it unchanged: the documents are whole problems with their answer ("7 + 5 - 3 = 9"), each
followed by eos, levels mixed. It adds problems.jsonl, the evaluation problems (family, level,
prompt, answer; drawn independently of the training problems with their own seed; a level whose
problem space is small, like arithmetic level 1, necessarily overlaps the training set; dataset
and natural-text families add their problems to problems.jsonl and nothing to the training data).
A set without a synthetic family trains nothing: the folder holds problems.jsonl, meta.json and
provenance.json.
`read_problems` reads problems.jsonl back; scoring a model on them is depthlab.stages.depth_use.problem_scoring.

Torch-free (numpy; the tokenizer from `tokenizers` / `transformers`): the make_problems job
imports no model code.
"""

from __future__ import annotations

import hashlib
import json
import os
import string

import numpy as np

from depthlab.core.atomic_files import atomic_path
from depthlab.core.errors import DatasetProblemError, ProblemError
from depthlab.core.provenance import Provenance
from depthlab.data.benchmark_problems import (
    DATASET_FAMILIES,
    check_family_fields,
    dataset_problems,
    validate_dataset_family,
)
from depthlab.data.prepare import EOS_TOKEN, PAD_TOKEN, token_dtype

FAMILIES = ("arithmetic", "hops", "lookup")  # synthetic, generated here, with training data
TEXT_FAMILIES = ("addition",)  # natural text, generated here, evaluation only
ALL_FAMILIES = FAMILIES + TEXT_FAMILIES + tuple(DATASET_FAMILIES)
TEXT_KEYS = {"addition": ("levels", "terms", "shots", "eval_per_level")}
MAX_ADDITION_DIGITS = 9  # far past what ~100M-parameter LMs add; operands stay in int64
MAX_ADDITION_TERMS = 10
MAX_SHOTS = 32  # < 9 ** 2, the fewest distinct questions of a level: examples can be distinct
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
        if name in TEXT_FAMILIES:
            validate_text_family(name, family, key)
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


def _int_in(value, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def validate_text_family(name: str, family, key: str) -> None:
    """Config-time check of one natural-text family's settings."""
    check_family_fields(family, TEXT_KEYS[name], key, ProblemError)
    levels = family.get("levels")
    if (
        not isinstance(levels, list)
        or not levels
        or not all(_int_in(k, 1, MAX_ADDITION_DIGITS) for k in levels)
        or len(set(levels)) != len(levels)
    ):
        raise ProblemError(
            f"{key}.levels: a non-empty list of distinct digit counts in "
            f"1..{MAX_ADDITION_DIGITS} (got {levels!r})"
        )
    checks = (
        ("terms", 2, MAX_ADDITION_TERMS, f"an integer in 2..{MAX_ADDITION_TERMS}, the numbers added"),
        ("eval_per_level", 1, 10**6, "a positive integer, the problems per level"),
        ("shots", 0, MAX_SHOTS, f"an integer in 0..{MAX_SHOTS}, the solved examples before the question"),
    )  # fmt: skip
    for field, low, high, what in checks:
        optional = field == "eval_per_level"
        if not (optional and field not in family) and not _int_in(family.get(field), low, high):
            raise ProblemError(f"{key}.{field}: {what} (got {family.get(field)!r})")


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
    """Accuracy of guessing; 0 for the dataset families (open-ended answers). A natural-text
    family's chance depends on the level: each of its problems carries it (`chance`)."""
    if family in TEXT_FAMILIES:
        raise ProblemError(f"families.{family}: chance is per level (the problems' 'chance')")
    if family in DATASET_FAMILIES:
        return 0.0
    return 1.0 / (len(DIGITS) if family == "arithmetic" else len(LETTERS))


# ---------------------------------------------------------------------------------------------
# Natural-text families: prompt and answer strings


def addition_chance(level: int, terms: int) -> float:
    """max_s P(sum = s) for `terms` independent uniform `level`-digit operands: the accuracy of
    always answering the most likely sum. The sum of uniforms is symmetric and unimodal, so its
    middle value is a mode; its count of operand tuples is the coefficient of x^m in
    ((1 - x^n) / (1 - x))^terms (inclusion-exclusion), exact in Python integers for any n."""
    from math import comb

    n = 9 * 10 ** (level - 1)  # operands 10^(k-1) .. 10^k - 1, shifted to 0 .. n - 1
    middle = terms * (n - 1) // 2
    count = sum(
        (-1) ** j * comb(terms, j) * comb(middle - j * n + terms - 1, terms - 1)
        for j in range(terms + 1)
        if middle - j * n >= 0
    )
    return count / n**terms


def addition_problem(level: int, rng: np.random.Generator, terms: int, shots: int) -> tuple:
    """(prompt, answer): `shots` solved sums of `terms` level-digit numbers, one per line, then
    the question "a + b =" whose answer is the sum. Examples and question are distinct draws,
    so no example gives the answer away."""
    low, high = 10 ** (level - 1), 10**level
    draws, seen = [], set()
    while len(draws) < shots + 1:  # MAX_SHOTS < the fewest distinct questions: terminates
        operands = tuple(int(x) for x in rng.integers(low, high, size=terms))
        if operands not in seen:
            seen.add(operands)
            draws.append(operands)
    lines = [f"{' + '.join(map(str, ops))} = {sum(ops)}" for ops in draws[:-1]]
    question = draws[-1]
    lines.append(f"{' + '.join(map(str, question))} =")
    return "\n".join(lines), str(sum(question))


def text_problems(name: str, settings: dict, per_level: int, seed: int, first_index: int):
    """`per_level` problems per level of one natural-text family, level by level (generator
    [seed, 7919, index], index = the (family, level) position among the set's levels, from
    `first_index`, as the other families)."""
    problems = []
    for offset, level in enumerate(int(k) for k in settings["levels"]):
        rng = np.random.default_rng([seed, 7919, first_index + offset])
        chance = addition_chance(level, settings["terms"])
        for _ in range(per_level):
            prompt, answer = addition_problem(level, rng, settings["terms"], settings["shots"])
            problems.append(
                {
                    "family": name,
                    "level": level,
                    "prompt": prompt,
                    "answer": answer,
                    "chance": chance,
                }
            )
    return problems


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
        problems.append(_problem(family, level, rng, families[family]))
    return problems


def evaluation_problems(spec: dict, seed: int) -> list[dict]:
    """eval_per_level problems for every (family, level), in that order."""
    families = _with_tables(spec, seed)
    problems = []
    for index, (family, level) in enumerate(_levels(spec)):
        rng = np.random.default_rng([seed, 7919, index])
        for _ in range(spec["eval_per_level"]):
            problems.append(_problem(family, level, rng, families[family]))
    return problems


def _problem(family: str, level: int, rng, table) -> dict:
    """One generated problem as a record: family, level, prompt and answer as text."""
    prompt, answer = generate_problem(family, level, rng, table)
    return {
        "family": family,
        "level": level,
        "prompt": " ".join(prompt),
        "answer": " ".join(answer),
    }


# ---------------------------------------------------------------------------------------------
# Tokenizer and the data folder


def build_tokenizer():
    """Word-level tokenizer over VOCABULARY (whitespace split), eos = bos, pad as in data.py."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from depthlab.data.tokens import hf_tokenizer

    vocab = {word: index for index, word in enumerate(VOCABULARY)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words by spaces
    return hf_tokenizer(tokenizer)


def _encode(tokenizer, text: str) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if tokenizer.pad_token_id in ids:  # the unk token: a word outside VOCABULARY
        raise ProblemError(f"problem text {text!r} has a word outside the vocabulary")
    return ids


def _evaluation_set(spec: dict, synthetic: dict, seed: int) -> tuple[list[dict], dict]:
    """(evaluation problems, {dataset family: its dataset record}): the synthetic families'
    first, then each natural-text and dataset family in the spec's order, each continuing the
    (family, level) generator index where the previous one stopped."""
    evaluation, datasets = [], {}
    if synthetic["families"]:
        evaluation = evaluation_problems(synthetic, seed)
    offset = len(_levels(synthetic))
    for name, cfg in spec["families"].items():
        if name in TEXT_FAMILIES:
            per_level = cfg.get("eval_per_level", spec["eval_per_level"])
            evaluation += text_problems(name, cfg, per_level, seed, offset)
            offset += len(cfg["levels"])
            continue
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
    return evaluation, datasets


def _problems_meta(spec: dict, evaluation: list[dict], datasets: dict) -> dict:
    """meta.json's `problems` entry: the file, its counts and each family's chance accuracy
    (per level for a natural-text family)."""
    chance = {
        f: (
            {int(k): addition_chance(int(k), cfg["terms"]) for k in cfg["levels"]}
            if f in TEXT_FAMILIES
            else chance_accuracy(f)
        )
        for f, cfg in spec["families"].items()
    }
    return {
        "file": PROBLEMS_FILE,
        "count": len(evaluation),
        "per_level": spec["eval_per_level"],
        "chance": chance,
        **({"datasets": datasets} if datasets else {}),
    }


def _write_problems(folder, evaluation: list[dict]) -> None:
    with open(folder / PROBLEMS_FILE, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(p) + "\n" for p in evaluation)


def _write_evaluation_only(
    out_dir, spec: dict, seed: int, evaluation: list[dict], problems_meta: dict, provenance
) -> dict:
    """A set without a synthetic family: problems.jsonl, meta.json, provenance.json."""
    with atomic_path(out_dir, is_dir=True) as tmp:
        _write_problems(tmp, evaluation)
        meta = {
            "format": "evaluation problems only (problems.jsonl): dataset and "
            "natural-text families have no training data",
            "source": {
                "kind": "evaluation_problems",
                "families": spec["families"],
                "seed": seed,
            },
            "problems": problems_meta,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        provenance.extra["meta"] = {"problems": problems_meta}
        provenance.write(tmp / "provenance.json")
    return meta


def _write_split(folder, split: str, problems: list[dict], tokenizer, dtype) -> dict:
    """`<split>.bin` of whole problems ("prompt answer"), each followed by eos (val also
    val.jsonl), as the data stage writes it; returns the split's meta.json entry."""
    eos = tokenizer.eos_token_id
    texts = [f"{p['prompt']} {p['answer']}" for p in problems]
    flat = []
    for text in texts:
        flat += _encode(tokenizer, text) + [eos]
    array = np.asarray(flat, dtype=dtype)
    array.tofile(folder / f"{split}.bin")
    if split == "val":
        with open(folder / "val.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    return {
        "documents": len(texts),
        "tokens": len(flat),
        "bytes": sum(len(t.encode()) for t in texts),
        "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
    }


def _write_training_set(
    out_dir,
    spec: dict,
    synthetic: dict,
    seed: int,
    evaluation: list[dict],
    problems_meta: dict,
    provenance,
) -> dict:
    """A set with synthetic families: the data stage's folder (tokenizer, train/val token
    files, val.jsonl, meta.json) plus problems.jsonl."""
    tokenizer = build_tokenizer()
    weights = spec.get("level_weights", "uniform")
    splits = {
        "train": sample_problems(synthetic, spec["train_problems"], seed, weights),
        "val": sample_problems(
            synthetic, spec["val_problems"], seed + 1_000_003, weights, table_seed=seed
        ),
    }
    dtype = token_dtype(len(tokenizer))
    with atomic_path(out_dir, is_dir=True) as tmp:
        tokenizer.save_pretrained(tmp / "tokenizer")
        counts = {
            split: _write_split(tmp, split, problems, tokenizer, dtype)
            for split, problems in splits.items()
        }
        _write_problems(tmp, evaluation)
        meta = {
            "format": "flat token ids per split, each document followed by eos_id",
            "dtype": dtype.name,
            "vocab_size": len(tokenizer),
            "eos_id": tokenizer.eos_token_id,
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
    evaluation, datasets = _evaluation_set(spec, synthetic, seed)
    problems_meta = _problems_meta(spec, evaluation, datasets)
    if not synthetic["families"]:
        return _write_evaluation_only(out_dir, spec, seed, evaluation, problems_meta, provenance)
    return _write_training_set(
        out_dir, spec, synthetic, seed, evaluation, problems_meta, provenance
    )


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
