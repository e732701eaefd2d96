#!/usr/bin/env python
"""Build the fine-tuning stage's data: prompt/answer pairs to fine-tune on, held-out pairs, and
(offline source) the lm-eval tasks the fine-tuned models and their parents are scored on
(depthlab/stages/finetune/data.py describes the sources).

Spec (`build_finetune_data` job, one per run):
  source        tasks | hf_dataset
  data          the data stage's folder (tasks: train.bin + tokenizer/ for the pairs, val.jsonl
                for the evaluation tasks)
  tasks         tasks: {kinds, words, context_tokens, max_per_document, train_documents,
                train_examples, eval_examples} (see depthlab/stages/pruning/lm_tasks.py)
  hf_dataset    hf_dataset: {name, config_name, revision, split, prompt_template, answer_field,
                max_examples, val_examples}
  seed          the draw of documents, places and choices
  out           output folder (written atomically): train.jsonl, val.jsonl, data.json, task
                files (tasks source), provenance.json
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "build_finetune_data")
    import json
    from pathlib import Path

    from depthlab.core.atomic_files import atomic_path
    from depthlab.core.provenance import Provenance
    from depthlab.stages.finetune.data import (
        dataset_pairs,
        task_pairs,
        train_documents,
        write_pairs,
    )

    inputs = [spec["data"]] if spec["source"] == "tasks" else []
    provenance = Provenance("finetune.data", config=spec, inputs=inputs, seed=spec["seed"])
    record = {"source": spec["source"]}
    with atomic_path(spec["out"], is_dir=True) as tmp:
        if spec["source"] == "tasks":
            from depthlab.data.prepare import iter_jsonl_texts
            from depthlab.stages.pruning.lm_tasks import build_examples, write_task_folder
            from transformers import AutoTokenizer

            tasks = spec["tasks"]
            tokenizer = AutoTokenizer.from_pretrained(Path(spec["data"]) / "tokenizer")
            documents = train_documents(
                spec["data"], tokenizer, tasks["train_documents"], spec["seed"]
            )
            train, val = task_pairs(
                documents, tokenizer, tasks, tasks["train_examples"], spec["seed"]
            )
            held_out = build_examples(
                iter_jsonl_texts(Path(spec["data"]) / "val.jsonl", "text", "data"),
                tokenizer,
                tasks["kinds"],
                tasks["eval_examples"],
                tasks["words"],
                tasks["context_tokens"],
                tasks["max_per_document"],
                spec["seed"],
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
    print(f"{len(train)} fine-tuning pairs, {len(val)} held-out pairs")
    for task in record.get("tasks", []):
        print(f"{task['name']}: {task['examples']} evaluation examples")


if __name__ == "__main__":
    main_guard(main)
