"""The fine-tuning stage's data: prompt/answer pairs to fine-tune on and held-out ones, plus, for
the offline source, the lm-eval task folder the fine-tuned models and their parents are scored on.

Sources (`finetune.data.source`):

  tasks       offline, from the run's own corpus (CPU scale): the multiple-choice tasks of
              depthlab.stages.lm_tasks (word_order, continuation), built twice with the same settings.
              Fine-tuning pairs (context -> the true choice) come from documents of the *train*
              split (decoded from train.bin with the run's tokenizer, a seeded sample); the
              evaluation tasks come from the held-out `val.jsonl`, exactly as build_lm_tasks builds
              them, so no evaluated context was fine-tuned on. val.jsonl of this folder (the
              held-out task loss logged while fine-tuning) holds the pairs of a tenth of the train
              documents, never trained on.
  hf_dataset  a hub dataset of instructions (the paper: Commonsense170K) read with `datasets` at a
              pinned revision; each row's prompt is `prompt_template` filled with its fields and
              its answer `answer_field`; the last `val_examples` rows are held out. Evaluation
              then uses lm-eval's own tasks (`finetune.lm_eval.harness_tasks`).

Folder: train.jsonl and val.jsonl ({prompt, answer} per line), data.json (counts, settings), for
`tasks` the task files of lm_tasks.write_task_folder (tasks.json, <name>.yaml, <name>.jsonl),
provenance.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from depthlab.core.errors import UserError

VAL_DOCUMENT_EVERY = 10  # every 10th train document's pairs are held out (the task-loss monitor)


class FinetuneError(UserError):
    """Bad fine-tuning input: a data file, settings that do not fit the model or dataset."""


def read_pairs(path: str | Path) -> list[dict]:
    """[{prompt, answer}] of a JSON-lines file; FinetuneError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FinetuneError(f"{path}: does not exist (run build_finetune_data first)")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise FinetuneError(f"{path}:{number}: not JSON ({error.msg})") from None
        if not isinstance(row, dict) or not all(
            isinstance(row.get(k), str) and row.get(k) for k in ("prompt", "answer")
        ):
            raise FinetuneError(f"{path}:{number}: needs non-empty string prompt and answer")
        rows.append({"prompt": row["prompt"], "answer": row["answer"]})
    if not rows:
        raise FinetuneError(f"{path}: no prompt/answer pairs")
    return rows


def write_pairs(path: str | Path, pairs: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(json.dumps(pair, ensure_ascii=False) + "\n")


def train_documents(data_dir: str | Path, tokenizer, count: int, seed: int) -> list[str]:
    """`count` documents of the train split (all when fewer), drawn from `seed`, decoded from
    train.bin (each document ends with the eos id)."""
    from depthlab.data.prepare import load_tokens, read_meta

    tokens = np.asarray(load_tokens(data_dir, "train"))
    eos = read_meta(data_dir)["eos_id"]
    ends = np.flatnonzero(tokens == eos) + 1
    starts = np.concatenate([[0], ends[:-1]])
    picks = np.random.default_rng([seed, 1]).permutation(len(ends))[:count]
    return [
        tokenizer.decode(tokens[starts[i] : ends[i] - 1].tolist()) for i in sorted(picks.tolist())
    ]


def task_pairs(
    documents: list[str], tokenizer, settings: dict, examples: dict, seed: int
) -> tuple[list[dict], list[dict]]:
    """(train pairs, held-out pairs) from `documents`: every task kind's examples as
    context -> true choice; the pairs of every VAL_DOCUMENT_EVERY-th document are held out."""
    from depthlab.stages.lm_tasks import examples_from_settings

    tasks = examples_from_settings(documents, tokenizer, settings, examples, seed)
    train, val = [], []
    for rows in tasks.values():
        for row in rows:
            pair = {"prompt": row["context"], "answer": row["choices"][row["label"]]}
            (val if row["doc"] % VAL_DOCUMENT_EVERY == 0 else train).append(pair)
    return train, val


def dataset_pairs(dataset: dict) -> tuple[list[dict], list[dict]]:
    """(train pairs, held-out pairs) of a hub dataset (`finetune.data.hf_dataset`)."""
    import datasets

    loaded = datasets.load_dataset(
        dataset["name"],
        dataset.get("config_name"),
        split=dataset["split"],
        revision=dataset.get("revision"),
    )
    limit = dataset.get("max_examples")
    pairs = []
    for index, row in enumerate(loaded):
        if limit is not None and index >= limit:
            break
        try:
            prompt = dataset["prompt_template"].format(**row)
        except KeyError as error:
            raise FinetuneError(
                f"finetune.data.hf_dataset.prompt_template: field {error} is not a column of "
                f"{dataset['name']} (columns: {', '.join(loaded.column_names)})"
            ) from None
        answer = row.get(dataset["answer_field"])
        if not isinstance(answer, str):
            raise FinetuneError(
                f"finetune.data.hf_dataset.answer_field: '{dataset['answer_field']}' is not a "
                f"text column of {dataset['name']} (columns: {', '.join(loaded.column_names)})"
            )
        if answer.strip():
            pairs.append({"prompt": prompt, "answer": answer.strip()})
    held = dataset["val_examples"]
    if len(pairs) <= held:
        raise FinetuneError(
            f"finetune.data.hf_dataset.val_examples: {held} held-out rows leave none of the "
            f"{len(pairs)} rows of {dataset['name']} to fine-tune on"
        )
    return pairs[:-held], pairs[-held:]


def build_data_job(spec: dict) -> dict:
    """The build_finetune_data job: the fine-tuning pairs (from the run's tasks or a dataset)
    and, from tasks, the held-out evaluation task folder, written into spec["out"] atomically
    with data.json and provenance.json; returns data.json's record."""
    from depthlab.core.atomic_files import atomic_path
    from depthlab.core.provenance import Provenance

    inputs = [spec["data"]] if spec["source"] == "tasks" else []
    provenance = Provenance("finetune.data", config=spec, inputs=inputs, seed=spec["seed"])
    record = {"source": spec["source"]}
    with atomic_path(spec["out"], is_dir=True) as tmp:
        if spec["source"] == "tasks":
            from transformers import AutoTokenizer

            from depthlab.data.prepare import iter_jsonl_texts
            from depthlab.stages.lm_tasks import examples_from_settings, write_task_folder

            tasks = spec["tasks"]
            tokenizer = AutoTokenizer.from_pretrained(Path(spec["data"]) / "tokenizer")
            documents = train_documents(
                spec["data"], tokenizer, tasks["train_documents"], spec["seed"]
            )
            train, val = task_pairs(
                documents, tokenizer, tasks, tasks["train_examples"], spec["seed"]
            )
            texts = iter_jsonl_texts(Path(spec["data"]) / "val.jsonl", "text", "data")
            held_out = examples_from_settings(
                texts, tokenizer, tasks, tasks["eval_examples"], spec["seed"]
            )
            settings = {**tasks, "seed": spec["seed"]}
            record["tasks"] = write_task_folder(held_out, tmp, spec["out"], settings)["tasks"]
            record["train_documents"] = len(documents)
        else:
            train, val = dataset_pairs(spec["hf_dataset"])
        write_pairs(tmp / "train.jsonl", train)
        write_pairs(tmp / "val.jsonl", val)
        record.update(train_pairs=len(train), val_pairs=len(val))
        (tmp / "data.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        provenance.extra["data"] = record
        provenance.write(tmp / "provenance.json")
    return record
