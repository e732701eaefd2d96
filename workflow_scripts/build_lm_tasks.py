#!/usr/bin/env python
"""Build the offline multiple-choice tasks of a run from its held-out corpus, as lm-eval task
YAML + JSON-lines in one folder (depthlab/stages/lm_tasks.py describes the tasks).

Spec (`build_lm_tasks` job, one per run); every key is required:
  data              the data stage's folder (reads val.jsonl; the tokenizer below sizes contexts)
  tokenizer         tokenizer folder used to cut contexts to context_tokens (the run's
                    data/tokenizer)
  out               output folder (written atomically): depthlab_<kind>.jsonl,
                    depthlab_<kind>.yaml per task, tasks.json, provenance.json
  kinds             task kinds: word_order, continuation
  examples          examples per task (fewer when the corpus runs out; tasks.json says)
  words             {kind: words per choice}
  context_tokens    at most this many tokens of context (context + choice must fit the model)
  max_per_document  at most this many contexts from one document
  seed              the draw of places, orders and distractors

Example: {"data": "results/default/data", "tokenizer": "results/default/data/tokenizer",
"out": "results/default/pruning/tasks", "kinds": ["word_order", "continuation"],
"examples": 64, "words": {"word_order": 6, "continuation": 1}, "context_tokens": 24,
"max_per_document": 4, "seed": 0}
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "build_lm_tasks")
    from depthlab.stages.lm_tasks import build_task_job

    for task in build_task_job(spec)["tasks"]:
        print(f"{task['name']}: {task['examples']} examples from {task['documents']} documents")


if __name__ == "__main__":
    main_guard(main)
