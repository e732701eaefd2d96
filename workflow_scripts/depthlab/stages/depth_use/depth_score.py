"""The depth score of Csordás et al. 2025 ("Do Language Models Use Their Depth Efficiently?"):
the effect-weighted mean layer sum_l l e_l / sum_l e_l of a per-layer effect vector (e.g. the
output effect of skipping each layer at the answer positions of a problem), and its value per
group of prompts (difficulty level) with a percentile bootstrap interval over prompts.

numpy only (pandas for the table), so the claims stage reads it without the intervention code.
"""

from __future__ import annotations

import math

import numpy as np


def depth_score(effect) -> float:
    """sum_l l * e_l / sum_l e_l (layers counted from 0); NaN when the effects sum to zero."""
    effect = np.asarray(effect, dtype=np.float64)
    if effect.ndim != 1:
        raise ValueError(f"effect: a 1-D vector per layer (got shape {effect.shape})")
    if np.any(effect < 0) or not np.all(np.isfinite(effect)):
        raise ValueError("effect: effects must be finite and non-negative")
    total = effect.sum()
    if total <= 0:
        return math.nan
    return float((np.arange(effect.size) * effect).sum() / total)


def depth_scores_by_group(
    effects: np.ndarray, groups, resamples: int = 1000, confidence: float = 0.95, seed: int = 0
):
    """Depth score per group (e.g. difficulty level) of the mean effect vector of its prompts,
    with a percentile bootstrap interval over prompts. effects: (prompts, layers), NaN rows
    (no measured position) dropped. Returns a frame: group, prompts, depth_score,
    depth_score_normalised (/ (L - 1)), ci_low, ci_high."""
    import pandas as pd

    effects = np.asarray(effects, dtype=np.float64)
    groups = np.asarray(groups)
    if effects.ndim != 2 or effects.shape[0] != groups.shape[0]:
        raise ValueError("effects: (prompts, layers) with one group label per prompt")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: in (0, 1) (got {confidence})")
    L = effects.shape[1]
    keep = np.all(np.isfinite(effects), axis=1)
    rng = np.random.default_rng(seed)
    rows = []
    for group in sorted(set(groups[keep].tolist())):
        member = effects[keep & (groups == group)]
        score = depth_score(member.mean(axis=0))
        boot = []
        for _ in range(resamples):
            sample = member[rng.integers(0, len(member), len(member))]
            boot.append(depth_score(sample.mean(axis=0)))
        boot = np.asarray([b for b in boot if np.isfinite(b)])
        alpha = (1 - confidence) / 2
        low, high = np.quantile(boot, [alpha, 1 - alpha]) if boot.size else (np.nan, np.nan)
        rows.append((group, len(member), score, score / max(L - 1, 1), float(low), float(high)))
    return pd.DataFrame(
        rows,
        columns=["group", "prompts", "depth_score", "depth_score_normalised", "ci_low", "ci_high"],
    )
