"""Scoring of the fine-tuning stage: every fine-tuned model and its pretrained parent on the same
lm-eval tasks (depthlab.stages.lm_tasks.TaskEvaluator: the offline task folder and/or lm-eval's own
tasks); the before / after / gain tables are depthlab.stages.finetune.scores'.

scores.csv (one evaluate_finetuned job per parent): model, parent, seed (empty for the parent),
stage (pretrained | finetuned), task, samples, acc, acc_stderr, acc_norm, acc_norm_stderr, score,
score_stderr, score_metric. Each model is loaded from its own folder on disk, so the scores are
those of the weights the fine-tuning job wrote.
"""

from __future__ import annotations

import pandas as pd

from depthlab.stages.finetune.scores import FINETUNED, PRETRAINED


def evaluate_before_after(spec: dict, device: str, log=print) -> pd.DataFrame:
    """scores.csv's rows for one parent (spec: an evaluate_finetuned job's) and its fine-tuned
    models, in that order."""
    from depthlab.models.architectures import load_model, load_tokenizer
    from depthlab.stages.lm_tasks import TaskEvaluator

    parent = load_model(
        spec["parent"], dtype=spec["dtype"], device=device, revision=spec["revision"]
    )
    tokenizer = load_tokenizer(spec["parent"], revision=spec["revision"])
    evaluator = TaskEvaluator.from_spec(parent, tokenizer, spec)
    rows = [
        {
            "model": spec["parent_name"],
            "parent": spec["parent_name"],
            "seed": None,
            "stage": PRETRAINED,
            **row,
        }
        for row in evaluator.evaluate()
    ]
    log(f"{spec['parent_name']} (pretrained): {_mean_text(rows)}")
    del parent
    for name, entry in spec["finetuned"].items():
        model = load_model(entry["path"], dtype=spec["dtype"], device=device)
        scored = evaluator.evaluate(model=model)
        rows += [
            {
                "model": name,
                "parent": spec["parent_name"],
                "seed": entry["seed"],
                "stage": FINETUNED,
                **row,
            }
            for row in scored
        ]
        log(f"{name} (fine-tuned, seed {entry['seed']}): {_mean_text(scored)}")
        del model
    return pd.DataFrame(rows)


def _mean_text(rows) -> str:
    return ", ".join(f"{r['task']} {r['score']:.3f}" for r in rows)
