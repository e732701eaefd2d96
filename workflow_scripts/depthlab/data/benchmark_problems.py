"""Problem families read from public datasets: MATH levels 1-5 and MQuAKE 2/3/4-hop questions, the
sets Csordás et al. (2025, "Do Language Models Use Their Depth Efficiently?") score hub models'
depth on. Each converts dataset records into problems.jsonl records ({family, level, prompt,
answer, ...}) that depthlab.stages.depth_use.problem_scoring evaluates like the synthetic families.

The protocol follows the paper's released code (analysis/lib/datasets/{math,mquake}.py and
analysis/skip_max_depth.py of github.com/robertcsordas/llm_effective_depth):

  math    EleutherAI/hendrycks_math, one subject config (theirs: intermediate_algebra), the test
          split; level k from the record's "Level k" field. Zero-shot, no chat template:
          prompt "Problem: {problem}\\nAnswer:", answer " {solution}" -- the reference solution,
          teacher forced, is what the output effect is measured on.
  mquake  MQuAKE-CF-3k (their copy: henryzhongsc/MQuAKE-Remastered, split CF3k); level = the
          number of hops (the record's original triples); prompt "Question: {questions[0]}\\n
          Answer:", answer " {answer}" (the unedited answer: no knowledge edit is applied).

They take 20 problems per level (shuffled with a fixed seed); here `eval_per_level` problems per
level are drawn without replacement with the problem set's seed (all of a level when it has
fewer). Where the paper's measurement differs from the teacher-forced `problem_batches` design,
this module follows the design: the paper skips a layer on the positions before t and takes the
largest output change over later positions (MATH: 4 random t inside the solution; MQuAKE: t =
the first answer token), then the depth score of the effect's maximum over problems; here the
`depth_score.variant` (layer_all) skips the layer everywhere and the output effect is averaged
over every answer position (each solution token for MATH, each answer token for MQuAKE), and
over problems, with a bootstrap interval -- the same score, measured on all answer tokens.

Accuracy. MQuAKE: greedy decoding of the answer's tokens, exact match (as the synthetic
families). MATH: the reference answer is a whole solution, so an exact greedy match of it would
be ~0 for any model and say nothing; a MATH problem is graded instead on the model's own greedy
solution (at most `max_new_tokens` tokens, cut where the model starts a new "Problem:"): its
last \\boxed{...} must equal the reference solution's last \\boxed{...} after a light string
normalisation (`normalise_answer`: spacing, \\left/\\right, \\dfrac, a trailing period, \\text{}
wrappers, ...; no symbolic equivalence, so equal values written differently count as wrong:
accuracy is a lower bound). Chance is taken as 0 for both (open-ended answers).

Dataset sources: {source: hf_dataset, name, config_name, split, revision} (read with `datasets`;
network unless cached) or {source: jsonl, path} (a local JSON-lines file of records in the
dataset's own layout; a .json file holding a list, like princeton-nlp's MQuAKE-CF-3k.json, is
read too).
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from depthlab.core.errors import DataError, DatasetProblemError

DATASET_FAMILIES = {"math": (1, 5), "mquake": (2, 4)}  # family: (lowest, highest) level
FAMILY_KEYS = {"math": ("dataset", "levels", "max_new_tokens"), "mquake": ("dataset", "levels")}
DATASET_KEYS = {
    "hf_dataset": ("source", "name", "config_name", "split", "revision"),
    "jsonl": ("source", "path"),
}
MATH_STOP = "\nProblem:"  # a base model that has answered goes on with a new problem
DEFAULT_MAX_NEW_TOKENS = 512


# ---------------------------------------------------------------------------------------------
# Settings


def check_family_fields(family, known, key: str, error: type[Exception]) -> None:
    """A problem family's settings are a mapping of `known` fields only; else `error` naming
    the key."""
    if not isinstance(family, dict):
        raise error(f"{key}: a mapping with {', '.join(known)}")
    for field in family:
        if field not in known:
            raise error(f"{key}.{field}: unknown field (known: {', '.join(known)})")


def validate_dataset_family(name: str, family, key: str) -> None:
    """Config-time check of one dataset family's settings (no dataset is read)."""
    low, high = DATASET_FAMILIES[name]
    check_family_fields(family, FAMILY_KEYS[name], key, DatasetProblemError)
    levels = family.get("levels")
    what = "hop counts" if name == "mquake" else "MATH levels"
    if (
        not isinstance(levels, list)
        or not levels
        or any(
            isinstance(k, bool) or not isinstance(k, int) or not low <= k <= high for k in levels
        )
        or len(set(levels)) != len(levels)
    ):
        raise DatasetProblemError(
            f"{key}.levels: a non-empty list of distinct {what} in {low}..{high} (got {levels!r})"
        )
    if "dataset" not in family:
        raise DatasetProblemError(
            f"{key}.dataset: required ({{source: hf_dataset, name, "
            f"config_name, split, revision}} or {{source: jsonl, path}})"
        )
    validate_dataset_spec(family["dataset"], f"{key}.dataset")
    tokens = family.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise DatasetProblemError(f"{key}.max_new_tokens: an integer >= 1 (got {tokens!r})")


def validate_dataset_spec(spec, key: str) -> None:
    source = spec.get("source") if isinstance(spec, dict) else None
    if source not in DATASET_KEYS:
        raise DatasetProblemError(f"{key}.source: hf_dataset or jsonl (got {source!r})")
    for field in spec:
        if field not in DATASET_KEYS[source]:
            raise DatasetProblemError(
                f"{key}.{field}: unknown field for source {source} "
                f"(known: {', '.join(DATASET_KEYS[source])})"
            )
    required = ("name", "split") if source == "hf_dataset" else ("path",)
    for field in required:
        if not isinstance(spec.get(field), str) or not spec[field]:
            raise DatasetProblemError(f"{key}.{field}: a non-empty string (source {source})")
    for field in ("config_name", "revision"):
        if source == "hf_dataset" and not isinstance(spec.get(field), (str, type(None))):
            raise DatasetProblemError(f"{key}.{field}: a string or null")


# ---------------------------------------------------------------------------------------------
# Records


def iter_records(spec: dict, where: str):
    """(index, record) of a dataset source, in the dataset's order."""
    from depthlab.data.prepare import _root_cause

    if spec["source"] == "jsonl":
        yield from enumerate(_local_records(spec["path"], f"{where}.path"))
        return
    import datasets

    pinned = {"revision": spec["revision"]} if spec.get("revision") else {}
    try:
        dataset = datasets.load_dataset(
            spec["name"], spec.get("config_name"), split=spec["split"], **pinned
        )
    except (OSError, ValueError, datasets.exceptions.DatasetsError) as error:
        cause = (
            f"{error}"
            if not isinstance(error, datasets.exceptions.DatasetsError)
            else _root_cause(error)
        )
        raise DataError(
            f"{where}.name: cannot load dataset '{spec['name']}' "
            f"({spec.get('config_name')}) split '{spec['split']}': {cause}"
        ) from None
    yield from enumerate(dataset)


def _local_records(path: str, where: str):
    from depthlab.data.prepare import iter_jsonl_records

    if not os.path.isfile(path):
        raise DataError(f"{where}: '{path}' is not a file")
    if str(path).endswith(".json"):
        try:
            with open(path, encoding="utf-8") as handle:
                records = json.load(handle)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise DataError(f"{where}: {path}: not a JSON list of records ({error})") from None
        if not isinstance(records, list):
            raise DataError(f"{where}: {path}: not a JSON list of records")
        yield from records
        return
    for _, record in iter_jsonl_records(path, where):
        yield record


def math_level(record: dict) -> int | None:
    """The level of a MATH record: "Level 3" -> 3 (an int is taken as is); None for the few
    records whose level is unknown ("Level ?")."""
    level = record.get("level")
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    match = re.fullmatch(r"\s*Level\s+(\d+)\s*", level) if isinstance(level, str) else None
    return int(match.group(1)) if match else None


def boxed_answer(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) of a solution, braces balanced;
    None when there is none (or it is not closed)."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    start, depth = starts[-1], 1
    for position in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[start:position]
    return None


def normalise_answer(text: str) -> str:
    """A MATH final answer in a canonical string form for exact comparison."""
    text = text.strip()
    text = re.sub(r"\\text\{\s*([^{}]*?)\s*\}", r"\1", text)
    text = re.sub(r"\\(?:mbox|mathrm|textbf)\{\s*([^{}]*?)\s*\}", r"\1", text)
    for old, new in (
        ("\\left", ""),
        ("\\right", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\ ", ""),
        ("dfrac", "frac"),
        ("tfrac", "frac"),
        ("^\\circ", ""),
        ("^{\\circ}", ""),
        ("\\$", ""),
        ("$", ""),
        ("\\%", ""),
        ("%", ""),
    ):
        text = text.replace(old, new)
    text = re.sub(r"\s+", "", text)
    text = text.rstrip(".")
    if re.fullmatch(r"-?\d+\.0+", text):
        text = text.split(".")[0]
    return text


def math_problem(record: dict, level: int, max_new_tokens: int) -> dict | None:
    problem, solution = record.get("problem"), record.get("solution")
    if not isinstance(problem, str) or not isinstance(solution, str):
        return None
    final = boxed_answer(solution)
    if final is None:
        return None
    return _qa_problem("math", level, "Problem", problem, solution, grade="boxed",
                       final_answer=final, max_new_tokens=max_new_tokens)  # fmt: skip


def _qa_problem(family: str, level: int, label: str, question: str, answer: str, **extra):
    """A problem record: `<label>: <question>\nAnswer:` as the prompt, the stripped answer."""
    prompt = f"{label}: {question.strip()}\nAnswer:"
    return {"family": family, "level": level, "prompt": prompt, "answer": answer.strip(), **extra}


def mquake_hops(record: dict) -> int | None:
    """A MQuAKE record's hop count: its original triples (the Remastered copy's flattened
    orig_triples or the princeton-nlp layout's orig.triples), else its single-hop questions."""
    orig = record.get("orig")
    for triples in (
        record.get("orig_triples"),
        orig.get("triples") if isinstance(orig, dict) else None,
        record.get("single_hops"),
    ):
        if isinstance(triples, list) and triples:
            return len(triples)
    return None


def mquake_problem(record: dict, level: int) -> dict | None:
    questions, answer = record.get("questions"), record.get("answer")
    if (
        not isinstance(questions, list)
        or not questions
        or not isinstance(questions[0], str)
        or not isinstance(answer, str)
        or not answer.strip()
    ):
        return None
    return _qa_problem("mquake", level, "Question", questions[0], answer)


def convert_record(family: str, record, settings: dict) -> tuple[int | None, dict | None]:
    """(level, problem) of one record; problem None for a record that cannot be used."""
    if not isinstance(record, dict):
        return None, None
    if family == "math":
        level = math_level(record)
        return level, (
            math_problem(record, level, settings.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
            if level is not None
            else None
        )
    level = mquake_hops(record)
    return level, (mquake_problem(record, level) if level is not None else None)


def dataset_problems(
    family: str, settings: dict, per_level: int, seed: int, first_index: int, where: str
) -> tuple[list[dict], dict]:
    """The problems of one dataset family: per level, `per_level` usable records drawn without
    replacement (generator [seed, 7919, index], index = the (family, level) position among the
    set's levels, from `first_index`), in dataset order. Returns (problems, summary)."""
    levels = [int(k) for k in settings["levels"]]
    usable = {level: [] for level in levels}
    unusable, records = 0, 0
    for index, record in iter_records(settings["dataset"], f"{where}.dataset"):
        records += 1
        level, problem = convert_record(family, record, settings)
        if level not in usable:
            continue
        if problem is None:
            unusable += 1
            continue
        usable[level].append({**problem, "source_index": index})
    problems, available = [], {}
    for offset, level in enumerate(levels):
        pool = usable[level]
        available[level] = len(pool)
        if not pool:
            raise DatasetProblemError(
                f"{where}.levels: level {level} has no usable record in "
                f"the dataset ({records} records read)"
            )
        rng = np.random.default_rng([seed, 7919, first_index + offset])
        chosen = np.sort(rng.choice(len(pool), size=min(per_level, len(pool)), replace=False))
        problems += [pool[i] for i in chosen]
    summary = {
        "dataset": settings["dataset"],
        "records": records,
        "unusable_records": unusable,
        "available": available,
        "drawn": {level: min(per_level, available[level]) for level in levels},
    }
    return problems, summary
