"""Offline multiple-choice tasks from the run's held-out corpus, scored by the real lm-eval harness.

Tasks (four choices, one correct; chance = 25%), built from `data/val.jsonl` (documents the
models never trained on) with the run's tokenizer so every prompt fits the model's context:

  word_order    the context is the text of a document up to a point inside a line; the choices
                are the next `words.word_order` words of that line in their true order and in
                three other orders. Every choice holds exactly the same words, so a model that
                only knows word frequencies scores chance: it tests local syntax.
  continuation  groups of four contexts from different documents whose next
                `words.continuation` words differ; one context of the group, drawn uniformly,
                is asked and the four next-word spans are the choices. Every member is equally
                likely to be asked, so a model that ignores the context (one preferring short
                or frequent words, a random one) is at chance in expectation: it tests the use
                of the context.

A task folder holds, per task, `<name>.jsonl` (context, choices, label) and `<name>.yaml`, an
lm-eval task config (`output_type: multiple_choice`, metrics acc and acc_norm, local `json`
dataset), plus `tasks.json` (names, sizes, settings). `TaskEvaluator` loads the tasks once with
`lm_eval.tasks.TaskManager(include_path=folder, include_defaults=False)`, wraps one model in
`lm_eval.models.huggingface.HFLM` and calls `lm_eval.simple_evaluate` for every model it is
given; the pruning stage's evaluator (depthlab.stages.pruning.pruned_tasks) scores pruned variants
as the same model object seen without some layers, so one loaded base model serves every variant.
Accuracy and its standard error are lm-eval's own (`acc,none` and `acc_stderr,none`).

Shared by the pruning stage (its task folder, its scores) and the fine-tuning stage (its training
and evaluation examples, its scores before and after), so neither imports the other.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from depthlab.core.errors import TaskFileError
from depthlab.plan.engine_budgets import TASK_CHOICES
from depthlab.settings.lm_tasks import (
    MAX_TOKENS_PER_WORD,
    TASK_KINDS,
    task_name,
    validate_task_settings,
)

CHOICES = TASK_CHOICES
METRICS = ("acc", "acc_norm")
_WORD = re.compile(r"\S+")


def check_task_folder(
    folder: str | Path, names: Sequence[str] | None = None, where: str = "pruning.tasks"
) -> list[str]:
    """The task names of a built folder; raises TaskFileError naming a missing file."""
    folder = Path(folder)
    index = folder / "tasks.json"
    if not index.is_file():
        raise TaskFileError(f"{where}: {index} does not exist (run build_lm_tasks first)")
    built = json.loads(index.read_text())["tasks"]
    names = list(names) if names else [t["name"] for t in built]
    known = {t["name"]: t for t in built}
    for name in names:
        if name not in known:
            raise TaskFileError(
                f"{where}: task '{name}' is not in {index} (built: {', '.join(known)})"
            )
        for suffix in (".yaml", ".jsonl"):
            path = folder / f"{name}{suffix}"
            if not path.is_file():
                raise TaskFileError(f"{where}: task file {path} does not exist")
    return names


# --------------------------------------------------------------------------- building


def _slots(text: str, words: int) -> list[tuple[int, int]]:
    """(start, end) character spans of `words` consecutive words inside one line, preceded by a
    single space in that line (so the choice follows the context after one space)."""
    spans = []
    offset = 0
    for line in text.split("\n"):
        matches = list(_WORD.finditer(line))
        for first in range(1, len(matches) - words + 1):
            chosen = matches[first : first + words]
            start, end = chosen[0].start() + offset, chosen[-1].end() + offset
            segment = text[start:end]
            if text[start - 1] != " " or segment != " ".join(m.group() for m in chosen):
                continue  # separated by more than single spaces
            spans.append((start, end))
        offset += len(line) + 1
    return spans


def _context(text: str, start: int, tokenizer, context_tokens: int) -> str | None:
    """The text before `start` (without the separating space), cut at a word boundary so that
    it holds at most context_tokens tokens."""
    prefix = text[: start - 1]
    encoded = tokenizer(prefix, add_special_tokens=False, return_offsets_mapping=True)
    offsets = encoded["offset_mapping"]
    if len(offsets) <= context_tokens:
        return prefix if prefix.strip() else None
    cut = offsets[len(offsets) - context_tokens][0]
    boundary = re.search(r"\s", prefix[cut:])
    if boundary is None:
        return None
    context = prefix[cut + boundary.start() :].lstrip()
    # standalone, the first word may split into more tokens than inside the text: drop words
    while (
        context and len(tokenizer(context, add_special_tokens=False)["input_ids"]) > context_tokens
    ):
        parts = context.split(None, 1)
        context = parts[1].lstrip() if len(parts) == 2 else ""
    return context if context.strip() else None


def _orders(words: list[str], rng: np.random.Generator, count: int) -> list[str] | None:
    """`count` distinct reorderings of the words, all different from the true order."""
    true = " ".join(words)
    seen, found = {true}, []
    for _ in range(200):
        candidate = " ".join(words[i] for i in rng.permutation(len(words)))
        if candidate not in seen:
            seen.add(candidate)
            found.append(candidate)
            if len(found) == count:
                return found
    return None


def _contexts(
    documents: list[str],
    tokenizer,
    words: int,
    context_tokens: int,
    max_per_document: int,
    rng: np.random.Generator,
) -> list[tuple]:
    """(document index, context, the true next `words` words) for up to max_per_document
    places per document, documents in a seeded order."""
    items = []
    for doc in rng.permutation(len(documents)):
        text = documents[doc]
        spans = _slots(text, words)
        if not spans:
            continue
        picks = rng.choice(len(spans), size=min(max_per_document, len(spans)), replace=False)
        for pick in sorted(picks):
            start, end = spans[pick]
            context = _context(text, start, tokenizer, context_tokens)
            target = text[start:end]
            # a "word" without spaces can be a long run of symbols: keep choices short enough
            # that context + choice fits the model's context (checked against seq_len at config)
            if (
                context is not None
                and len(tokenizer.encode(" " + target, add_special_tokens=False))
                <= MAX_TOKENS_PER_WORD * words
            ):
                items.append((int(doc), context, target.split(" ")))
    return items


def _continuation_rows(items: list[tuple], rng: np.random.Generator, examples: int) -> list[dict]:
    """Groups of CHOICES contexts from different documents with different next words; one
    member of each group, drawn uniformly, is the question and the group's words are the
    choices. Every member is equally likely to be asked, so a model that ignores the context
    (e.g. one preferring short or frequent words) is at chance exactly in expectation; picking
    distractors for a given true word would not be (they must differ from it, which biases
    them away from frequent words)."""
    rows, pool = [], list(rng.permutation(len(items)))
    while pool and len(rows) < examples:
        group, docs, words = [], set(), set()
        rest = []
        for index in pool:
            doc, _, true_words = items[index]
            text = " ".join(true_words)
            if len(group) < CHOICES and doc not in docs and text not in words:
                group.append(index)
                docs.add(doc)
                words.add(text)
            else:
                rest.append(index)
        if len(group) < CHOICES:
            break
        pool = rest
        asked = group[int(rng.integers(CHOICES))]
        order = [group[i] for i in rng.permutation(CHOICES)]
        doc, context, _ = items[asked]
        rows.append(
            {
                "context": context,
                "choices": [" ".join(items[i][2]) for i in order],
                "label": order.index(asked),
                "doc": doc,
            }
        )
    return rows


def build_examples(
    documents: Iterable[str],
    tokenizer,
    kinds: Sequence[str],
    examples: int | dict[str, int],
    words: dict[str, int],
    context_tokens: int,
    max_per_document: int,
    seed: int,
) -> dict[str, list[dict]]:
    """{task kind: [{"context", "choices", "label", "doc"}]}: `examples` (or examples[kind])
    per task (fewer when the corpus runs out), `words[kind]` words per choice, at most
    max_per_document contexts per document; everything drawn from a generator seeded by
    (seed, task)."""
    documents = list(documents)
    tasks = {}
    for kind in kinds:
        wanted = examples[kind] if isinstance(examples, dict) else examples
        rng = np.random.default_rng([seed, TASK_KINDS.index(kind)])
        items = _contexts(documents, tokenizer, words[kind], context_tokens, max_per_document, rng)
        if len(items) < CHOICES:
            raise TaskFileError(
                f"pruning.tasks: only {len(items)} usable contexts for "
                f"'{kind}' in the held-out corpus (need at least {CHOICES})"
            )
        rows = []
        if kind == "word_order":
            for index in rng.permutation(len(items)):
                doc, context, true_words = items[index]
                others = _orders(true_words, rng, CHOICES - 1)
                if others is None:
                    continue
                label = int(rng.integers(CHOICES))
                choices = others[:label] + [" ".join(true_words)] + others[label:]
                rows.append({"context": context, "choices": choices, "label": label, "doc": doc})
                if len(rows) == wanted:
                    break
        else:
            rows = _continuation_rows(items, rng, wanted)
        tasks[kind] = rows
    return tasks


def task_yaml(name: str, data_file: Path, description: str) -> str:
    """An lm-eval task config for a local JSON-lines file of {context, choices, label}."""
    return (
        f"# {description}\n"
        f"task: {name}\n"
        "dataset_path: json\n"
        "dataset_kwargs:\n"
        "  data_files:\n"
        f"    test: {json.dumps(str(data_file))}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "{{context}}"\n'
        'doc_to_choice: "{{choices}}"\n'
        "doc_to_target: label\n"
        'target_delimiter: " "\n'
        "metric_list:\n"
        "  - metric: acc\n"
        "    aggregation: mean\n"
        "    higher_is_better: true\n"
        "  - metric: acc_norm\n"
        "    aggregation: mean\n"
        "    higher_is_better: true\n"
        "metadata:\n"
        "  version: 1.0\n"
    )


DESCRIPTIONS = {
    "word_order": "pick the true order of the next words of a held-out docstring among four "
    "orders of the same words",
    "continuation": "pick the true next words of a held-out docstring among those of four "
    "documents",
}


def write_task_folder(
    tasks: dict[str, list[dict]], tmp_dir: str | Path, final_dir: str | Path, settings: dict
) -> dict:
    """Write <name>.jsonl, <name>.yaml and tasks.json into tmp_dir; the YAML names the data file
    by its path under final_dir (absolute: lm-eval resolves data_files against the working
    directory), the folder tmp_dir becomes when renamed atomically."""
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir).resolve()
    index = []
    for kind, rows in tasks.items():
        name = task_name(kind)
        with open(tmp_dir / f"{name}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        (tmp_dir / f"{name}.yaml").write_text(
            task_yaml(name, final_dir / f"{name}.jsonl", DESCRIPTIONS[kind])
        )
        labels = np.bincount([r["label"] for r in rows], minlength=CHOICES).tolist()
        index.append(
            {
                "name": name,
                "kind": kind,
                "examples": len(rows),
                "choices": CHOICES,
                "chance": 1.0 / CHOICES,
                "label_counts": labels,
                "documents": len({r["doc"] for r in rows}),
                "description": DESCRIPTIONS[kind],
            }
        )
    record = {"tasks": index, "settings": settings}
    (tmp_dir / "tasks.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


# --------------------------------------------------------------------------- evaluation


def configure_offline(datasets_cache: str | Path | None) -> None:
    """No network; `datasets` caches the task files' Arrow conversion under datasets_cache."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    if datasets_cache is not None:
        Path(datasets_cache).mkdir(parents=True, exist_ok=True)
        os.environ["HF_DATASETS_CACHE"] = str(datasets_cache)
        import datasets.config

        datasets.config.HF_DATASETS_CACHE = Path(datasets_cache)


PRIMARY_METRICS = ("acc", "exact_match", "acc_norm", "f1", "mcc")


def results_rows(results: dict, names: Sequence[str]) -> list[dict]:
    """lm-eval's results dict -> one row per task: acc, acc_stderr, acc_norm, acc_norm_stderr
    (NaN where the task has none) and the task's primary metric as score / score_stderr /
    score_metric (acc, else exact_match under its first filter, e.g. gsm8k)."""
    rows = []
    for name in names:
        entry = results["results"][name]
        count = results.get("n-samples", {}).get(name, {}).get("effective")
        row = {"task": name, "samples": int(count or entry.get("sample_len", 0) or 0)}
        for metric in METRICS:
            value = entry.get(f"{metric},none")
            stderr = entry.get(f"{metric}_stderr,none")
            row[metric] = float(value) if isinstance(value, (int, float)) else float("nan")
            row[f"{metric}_stderr"] = (
                float(stderr) if isinstance(stderr, (int, float)) else float("nan")
            )
        keys = [
            k
            for k in entry
            if "," in k and "_stderr," not in k and isinstance(entry[k], (int, float))
        ]
        primary = next(
            (k for m in PRIMARY_METRICS for k in keys if k.split(",")[0] == m),
            keys[0] if keys else None,
        )
        if primary is None:
            row.update(score=float("nan"), score_stderr=float("nan"), score_metric="")
        else:
            metric, _, filter_name = primary.partition(",")
            stderr = entry.get(f"{metric}_stderr,{filter_name}")
            row.update(
                score=float(entry[primary]),
                score_stderr=float(stderr) if isinstance(stderr, (int, float)) else float("nan"),
                score_metric=primary,
            )
        rows.append(row)
    return rows


class TaskEvaluator:
    """lm-eval on the tasks of one folder, for one base model and any number of variants."""

    def __init__(
        self,
        model,
        tokenizer,
        tasks_dir: str | Path | None,
        names: Sequence[str] | None = None,
        batch_size: int = 64,
        datasets_cache: str | Path | None = None,
        bootstrap_iters: int = 1000,
        seed: int = 0,
        harness_tasks: Sequence[dict] | None = None,
    ):
        """Tasks: those of `tasks_dir` (all, or `names`), plus `harness_tasks`, the harness's
        own tasks as [{name, num_fewshot}] (the paper config: mmlu 5-shot, boolq, hellaswag,
        gsm8k; they need the datasets in the cache, nothing is downloaded offline)."""
        configure_offline(datasets_cache)
        import lm_eval  # noqa: F401  (after the cache is set)
        from lm_eval.tasks import TaskManager

        harness_tasks = list(harness_tasks or [])
        self.names = check_task_folder(tasks_dir, names) if tasks_dir is not None else []
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.bootstrap_iters = bootstrap_iters
        self.seed = seed
        self.manager = TaskManager(
            include_path=str(Path(tasks_dir).resolve()) if tasks_dir is not None else None,
            include_defaults=bool(harness_tasks),
        )
        self.tasks = self.manager.load(list(self.names))["tasks"] if self.names else {}
        for item in harness_tasks:
            loaded = self.manager.load([item["name"]])
            objects = loaded["groups"].get(item["name"]) or loaded["tasks"].get(item["name"])
            if objects is None:
                raise TaskFileError(
                    f"pruning.lm_eval.harness_tasks: '{item['name']}' is not "
                    f"an lm-eval task or group"
                )
            for task in loaded["tasks"].values():
                if item.get("num_fewshot") is not None:
                    task.set_config(key="num_fewshot", value=item["num_fewshot"])
            self.tasks[item["name"]] = objects
            self.names.append(item["name"])
        if not self.names:
            raise TaskFileError("pruning.lm_eval: no task to evaluate")
        self.model = model
        self.lm = self._wrap(model)

    @classmethod
    def from_spec(cls, model, tokenizer, spec: dict) -> TaskEvaluator:
        """lm-eval on a job spec's tasks folder with its `lm_eval` settings (the prune, heal,
        evaluate and fine-tuning jobs)."""
        lm_eval = spec["lm_eval"]
        return cls(
            model,
            tokenizer,
            spec["tasks"],
            lm_eval["tasks"],
            batch_size=lm_eval["batch_size"],
            datasets_cache=spec["datasets_cache"],
            bootstrap_iters=lm_eval["bootstrap_iters"],
            seed=spec["seed"],
            harness_tasks=lm_eval.get("harness_tasks"),
        )

    def _wrap(self, model):
        from lm_eval.models.huggingface import HFLM

        from depthlab.core.placement import input_device

        # HFLM takes a model instance as it is: it never moves it (lm_eval 0.4.13: `device` and
        # `parallelize` apply only to a model it loads itself), so a model dispatched over
        # several GPUs (depthlab.core.placement) stays where it is and its hooks move each batch on
        inputs_at = input_device(model)

        class QuietHFLM(HFLM):
            """lm-eval turns its progress bars on itself (no global switch reaches them): off
            unless stderr is a terminal, so job logs keep plain lines."""

            def loglikelihood(self, requests, disable_tqdm: bool = False):
                quiet = disable_tqdm or not sys.stderr.isatty()
                return super().loglikelihood(requests, disable_tqdm=quiet)

            @property
            def device(self):
                # HFLM sends batches to `model.device` (its first weight's), which is `meta`
                # when that weight is offloaded: the input embedding's device is always right
                return inputs_at

        return QuietHFLM(
            pretrained=model,
            tokenizer=self.tokenizer,
            batch_size=self.batch_size,
            device=str(inputs_at),
        )

    def evaluate(self, model=None) -> list[dict]:
        """Rows (task, samples, acc, acc_stderr, acc_norm, acc_norm_stderr) for the base model,
        or for another `model` (e.g. a fine-tuned or healed copy) when given."""
        # heavy: imported when tasks are scored, not by task building or the config checks
        import lm_eval

        results = lm_eval.simple_evaluate(
            model=self.lm if model is None else self._wrap(model),
            tasks=[self.tasks[n] for n in self.names],
            task_manager=self.manager,
            bootstrap_iters=self.bootstrap_iters,
            log_samples=False,
            random_seed=self.seed,
            numpy_random_seed=self.seed,
            torch_random_seed=self.seed,
            fewshot_random_seed=self.seed,
        )
        return results_rows(results, self.names)


def examples_from_settings(texts, tokenizer, settings: dict, examples, seed: int) -> dict:
    """build_examples over `texts` with a tasks section's kinds, words, context_tokens and
    max_per_document (`examples` per kind)."""
    return build_examples(
        texts,
        tokenizer,
        settings["kinds"],
        examples,
        settings["words"],
        settings["context_tokens"],
        settings["max_per_document"],
        seed,
    )


def build_task_job(spec: dict) -> dict:
    """The build_lm_tasks job: the local tasks built from the run's val.jsonl, written as a task
    folder into spec["out"] (atomically, with provenance.json); returns the folder's record."""
    from transformers import AutoTokenizer

    from depthlab.core.atomic_files import atomic_path
    from depthlab.core.provenance import Provenance

    try:
        validate_task_settings(spec, "pruning.tasks")
    except ValueError as error:
        raise TaskFileError(str(error)) from None
    val = Path(spec["data"]) / "val.jsonl"
    if not val.is_file():
        raise TaskFileError(f"data: {val} does not exist (is {spec['data']} a data stage output?)")
    provenance = Provenance(
        "pruning.tasks", config=spec, inputs=[val, spec["tokenizer"]], seed=spec["seed"]
    )
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    from depthlab.data.prepare import iter_jsonl_texts

    texts = iter_jsonl_texts(val, "text", "data")
    tasks = examples_from_settings(texts, tokenizer, spec, spec["examples"], spec["seed"])
    settings = {
        k: spec[k]
        for k in ("kinds", "examples", "words", "context_tokens", "max_per_document", "seed")
    }
    with atomic_path(spec["out"], is_dir=True) as tmp:
        record = write_task_folder(tasks, tmp, spec["out"], settings)
        provenance.extra["tasks"] = record["tasks"]
        provenance.write(tmp / "provenance.json")
    return record
