#!/usr/bin/env python
"""Build the fine-tuning stage's data: prompt/answer pairs to fine-tune on, held-out pairs, and
(offline source) the lm-eval tasks the fine-tuned models and their parents are scored on
(depthlab/stages/finetune/data.py describes the sources).

Spec (`build_finetune_data` job, one per run):
  source        tasks | hf_dataset
  data          the data stage's folder (tasks: train.bin + tokenizer/ for the pairs, val.jsonl
                for the evaluation tasks)
  tasks         tasks: {kinds, words, context_tokens, max_per_document, train_documents,
                train_examples, eval_examples} (see depthlab/stages/lm_tasks.py)
  hf_dataset    hf_dataset: {name, config_name, revision, split, prompt_template, answer_field,
                max_examples, val_examples}
  seed          the draw of documents, places and choices
  out           output folder (written atomically): train.jsonl, val.jsonl, data.json, task
                files (tasks source), provenance.json
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "build_finetune_data")
    from depthlab.stages.finetune.data import build_data_job

    record = build_data_job(spec)
    print(f"{record['train_pairs']} fine-tuning pairs, {record['val_pairs']} held-out pairs")
    for task in record.get("tasks", []):
        print(f"{task['name']}: {task['examples']} evaluation examples")


if __name__ == "__main__":
    main_guard(main)
