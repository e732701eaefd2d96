"""The fine-tuning stage's score tables (evaluate_finetuned's scores.csv): each model's mean task
score, and the before / after / gain table per parent that the figure and the claims read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

PRETRAINED, FINETUNED = "pretrained", "finetuned"


def model_scores(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per model: parent, seed, stage and `score`, the mean over tasks of each task's
    primary metric (the paper reports the average over its tasks)."""
    means = (
        scores.groupby(["model", "parent", "stage"], dropna=False, sort=False)
        .agg(score=("score", "mean"), seed=("seed", "first"))
        .reset_index()
    )
    return means[["model", "parent", "seed", "stage", "score"]]


def gain_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Per parent: the pretrained score, the fine-tuned mean over seeds, their min and max, and
    the gain (fine-tuned mean - pretrained)."""
    means = model_scores(scores)
    rows = []
    for parent, group in means.groupby("parent", sort=False):
        before = group[group["stage"] == PRETRAINED]["score"]
        after = group[group["stage"] == FINETUNED]["score"]
        rows.append(
            {
                "parent": parent,
                "before": float(before.iloc[0]) if len(before) else np.nan,
                "after": float(after.mean()) if len(after) else np.nan,
                "after_min": float(after.min()) if len(after) else np.nan,
                "after_max": float(after.max()) if len(after) else np.nan,
                "seeds": int(len(after)),
            }
        )
    table = pd.DataFrame(rows)
    table["gain"] = table["after"] - table["before"]
    return table


def read_scores(folders) -> pd.DataFrame:
    """The scores.csv of several evaluate_finetuned outputs, concatenated."""
    return pd.concat([pd.read_csv(Path(f) / "scores.csv") for f in folders], ignore_index=True)
