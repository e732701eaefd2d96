"""Rows on the field's depth-pruning criteria compared on one yardstick (the same model,
calibration windows, held-out windows and tasks): Shortened LLaMA's PPL criterion against
Taylor+ (Kim et al. 2024: PPL wins on perplexity, Taylor+ on tasks) and SLEB's iterative removal
against the one-shot PPL ranking (Song et al. 2024), each a mean over the n both strategies ran.

Published checkpoints are decided over their validation windows (paired window bootstrap: every
set's mean over the same draw), models trained here over seeds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from depthlab.claims.measures import mean_task_score, window_means
from depthlab.claims.rows import claim_row, decide, not_learned, over_windows, scale_of
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    NOT_TESTABLE,
    Estimate,
    difference,
    over_seeds,
    t_interval,
    verdict_positive,
)
from depthlab.core.paper_values_pruning import (
    CRITERIA_GAP_NEGLIGIBLE,
    KIM,
    PAPER_VALUES,
    SONG,
)

# (claim id, paper, worse strategy, better strategy, the claim's words, paper value key)
LOSS_COMPARISONS = (
    ("kim_ppl_vs_taylor", KIM, "taylor_plus", "ppl",
     "the PPL criterion leaves a lower validation loss than Taylor+", "kim_ppl_vs_taylor_loss"),
    ("song_iterative_vs_one_shot", SONG, "ppl", "sleb",
     "SLEB's iterative removal leaves a lower validation loss than the one-shot PPL ranking",
     "song_iterative_vs_one_shot"),
)  # fmt: skip


def common_n(keys, worse: str, better: str) -> list[str]:
    """The n (as text) of the unhealed sets of both strategies, n >= 1."""
    ns = {k.split(":", 1)[1] for k in keys if k.startswith(f"{worse}:")}
    return sorted((n for n in ns if f"{better}:{n}" in keys and int(n) >= 1), key=lambda n: int(n))


def strategy_gap_of_means(means: dict, worse: str, better: str) -> float:
    """Mean over the common n of loss(worse, n) - loss(better, n) on set means keyed as
    window_means keys them (NaN when no n is common)."""
    ns = common_n(means, worse, better)
    if not ns:
        return math.nan
    return float(np.mean([means[f"{worse}:{n}"] - means[f"{better}:{n}"] for n in ns]))


def _unhealed_losses(sweep: pd.DataFrame, strategy: str) -> dict:
    rows = sweep[(sweep["strategy"] == strategy) & (sweep["healed"].astype(str) == "False")]
    return {f"{strategy}:{n}": v for n, v in rows.groupby("n")["val_loss"].first().items()}


def strategy_gap(sweep: pd.DataFrame, worse: str, better: str) -> Estimate | None:
    """A trained model's gap from its sweep.csv: t-interval over the common n (the seed
    interval is taken over models); None when no n is common."""
    means = {**_unhealed_losses(sweep, worse), **_unhealed_losses(sweep, better)}
    ns = common_n(means, worse, better)
    if not ns:
        return None
    return t_interval([means[f"{worse}:{n}"] - means[f"{better}:{n}"] for n in ns], "common n")


def task_gap(sweep: pd.DataFrame, worse: str, better: str) -> Estimate | None:
    """Mean task score of `better` minus `worse` over the tasks and common n lm-eval scored for
    both (unhealed), with a normal interval from the scores' standard errors (items differ
    between tasks, so the errors of the means combine as independent); None when lm-eval scored
    no common set."""
    scored = sweep[(sweep["healed"].astype(str) == "False") & sweep["score"].notna()]
    rows = {s: scored[scored["strategy"] == s].set_index(["n", "task"]) for s in (worse, better)}
    common = sorted(set(rows[worse].index) & set(rows[better].index))
    common = [(n, t) for n, t in common if n >= 1]
    if not common:
        return None

    return difference(
        mean_task_score(rows[better].loc[common]), mean_task_score(rows[worse].loc[common])
    )


def _loss_estimate(data: RunData, members, trained: bool, worse: str, better: str):
    if not trained and all(m in data.window_losses for m in members):
        if not all(
            math.isfinite(strategy_gap_of_means(window_means(data.window_losses[m]), worse, better))
            for m in members
        ):
            return None
        return over_seeds(
            [
                over_windows(data, m, lambda means: strategy_gap_of_means(means, worse, better))
                for m in members
            ]
        )
    gaps = [strategy_gap(data.sweeps[m], worse, better) for m in members]
    return None if any(g is None for g in gaps) else over_seeds(gaps)


def _row(claim_id, paper, claim, key, estimate, threshold, scale, trained, blockers, missing):
    if estimate is None:
        return claim_row(
            claim_id, paper, claim, None, Estimate(math.nan), scale, (NOT_TESTABLE, missing),
            paper_value=PAPER_VALUES[key].describe(),
        )  # fmt: skip
    verdict = verdict_positive(estimate, blockers, threshold)
    return claim_row(
        claim_id, paper, claim, None, estimate, scale,
        decide(estimate, verdict, trained, blockers), paper_value=PAPER_VALUES[key].describe(),
    )  # fmt: skip


def pruning_method_claims(data: RunData) -> list[dict]:
    """The criteria rows of every pruned group whose sweeps hold both strategies of a row."""
    rows = []
    for group, members in data.pruning_groups.items():
        if not all(m in data.sweeps for m in members):
            continue
        strategies = set.intersection(*(set(data.sweeps[m]["strategy"]) for m in members))
        blockers = not_learned(data, members)
        trained = any(m in data.trained for m in members)
        scale = scale_of(data, members)
        for claim_id, paper, worse, better, words, key in LOSS_COMPARISONS:
            if not {worse, better} <= strategies:
                continue
            claim = (
                f"{group}: {words}: mean over the common n of val_loss({worse}) - "
                f"val_loss({better}) > {CRITERIA_GAP_NEGLIGIBLE:g} (unhealed)"
            )
            estimate = _loss_estimate(data, members, trained, worse, better)
            rows.append(
                _row(f"{claim_id}:{group}", paper, claim, key, estimate, CRITERIA_GAP_NEGLIGIBLE,
                     scale, trained, blockers, "no n at which both strategies removed layers")
            )  # fmt: skip
        if {"ppl", "taylor_plus"} <= strategies:
            gaps = [task_gap(data.sweeps[m], "ppl", "taylor_plus") for m in members]
            estimate = None
            if not any(g is None for g in gaps):  # every seed scored on the same items
                estimate = over_seeds(gaps, sample_se=[g.se for g in gaps])
            claim = (
                f"{group}: Taylor+ keeps more task accuracy than the PPL criterion: mean over "
                f"the tasks and common n of score(taylor_plus) - score(ppl) > 0 (unhealed)"
            )
            rows.append(
                _row(f"kim_taylor_vs_ppl_tasks:{group}", KIM, claim, "kim_taylor_vs_ppl_tasks",
                     estimate, 0.0, scale, trained, blockers,
                     "lm-eval scored no n of both ppl and taylor_plus (pruning.lm_eval.n_grid)")
            )  # fmt: skip
    return rows
