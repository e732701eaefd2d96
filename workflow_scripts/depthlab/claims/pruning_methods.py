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

from depthlab.claims.measures import (
    block_range,
    mean_task_score,
    no_room,
    removal_damage,
    sweep_layers,
    window_means,
)
from depthlab.claims.rows import (
    Claim,
    claim_row,
    decide,
    learned_threshold,
    not_learned,
    over_windows,
    scale_of,
    twin,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    NOT_TESTABLE,
    Estimate,
    difference,
    over_seeds,
    t_interval,
    verdict_positive,
)
from depthlab.core.paper_values import GROMOV_MAX_FRACTION, LEARNED_SHARE_NEGLIGIBLE
from depthlab.core.paper_values_pruning import (
    CRITERIA_GAP_NEGLIGIBLE,
    KIM,
    PAPER_VALUES,
    SONG,
)

# (claim id, paper, worse strategy, better strategy, the claim's words, paper value key, whether
# the paper's numbers are after healing: Kim et al.'s Table 2 is LoRA-healed; SLEB is training-free)
LOSS_COMPARISONS = (
    ("kim_ppl_vs_taylor", KIM, "taylor_plus", "ppl",
     "the PPL criterion leaves a lower validation loss than Taylor+", "kim_ppl_vs_taylor_loss",
     True),
    ("song_iterative_vs_one_shot", SONG, "ppl", "sleb",
     "SLEB's iterative removal leaves a lower validation loss than the one-shot PPL ranking",
     "song_iterative_vs_one_shot", False),
)  # fmt: skip


def common_n(keys, worse: str, better: str, prefix: str = "", max_n: int | None = None):
    """The n (as text) of the sets of both strategies under key `prefix` ("" unhealed,
    "healed:" healed), 1 <= n <= max_n (None: every n)."""
    ns = {
        k.removeprefix(prefix).split(":", 1)[1] for k in keys if k.startswith(f"{prefix}{worse}:")
    }
    return sorted(
        (
            n
            for n in ns
            if f"{prefix}{better}:{n}" in keys
            and int(n) >= 1
            and (max_n is None or int(n) <= max_n)
        ),
        key=lambda n: int(n),
    )


def strategy_gap_of_means(
    means: dict, worse: str, better: str, prefix: str = "", max_n: int | None = None
) -> float:
    """Mean over the common n of loss(worse, n) - loss(better, n) on set means keyed as
    window_means keys them (NaN when no n is common)."""
    ns = common_n(means, worse, better, prefix, max_n)
    if not ns:
        return math.nan
    return float(
        np.mean([means[f"{prefix}{worse}:{n}"] - means[f"{prefix}{better}:{n}"] for n in ns])
    )


def _sweep_losses(sweep: pd.DataFrame, strategy: str, healed: bool = False) -> dict:
    rows = sweep[(sweep["strategy"] == strategy) & (sweep["healed"].astype(str) == str(healed))]
    prefix = "healed:" if healed else ""
    return {f"{prefix}{strategy}:{n}": v for n, v in rows.groupby("n")["val_loss"].first().items()}


def strategy_gap(
    sweep: pd.DataFrame, worse: str, better: str, healed: bool = False, max_n: int | None = None
) -> Estimate | None:
    """A trained model's gap from its sweep.csv: t-interval over the common n (the seed
    interval is taken over models); None when no n is common."""
    means = {**_sweep_losses(sweep, worse, healed), **_sweep_losses(sweep, better, healed)}
    prefix = "healed:" if healed else ""
    ns = common_n(means, worse, better, prefix, max_n)
    if not ns:
        return None
    return t_interval(
        [means[f"{prefix}{worse}:{n}"] - means[f"{prefix}{better}:{n}"] for n in ns], "common n"
    )


def task_gap(
    sweep: pd.DataFrame, worse: str, better: str, healed: bool = False, max_n: int | None = None
) -> Estimate | None:
    """Mean task score of `better` minus `worse` over the tasks and common n lm-eval scored for
    both (healed or unhealed), with a normal interval from the scores' standard errors (items
    differ between tasks, so the errors of the means combine as independent); None when
    lm-eval scored no common set."""
    scored = sweep[(sweep["healed"].astype(str) == str(healed)) & sweep["score"].notna()]
    rows = {s: scored[scored["strategy"] == s].set_index(["n", "task"]) for s in (worse, better)}
    common = sorted(set(rows[worse].index) & set(rows[better].index))
    common = [(n, t) for n, t in common if n >= 1 and (max_n is None or n <= max_n)]
    if not common:
        return None

    return difference(
        mean_task_score(rows[better].loc[common]), mean_task_score(rows[worse].loc[common])
    )


def _loss_estimate(data: RunData, members, trained: bool, worse: str, better: str, healed, max_n):
    prefix = "healed:" if healed else ""
    if not trained and all(m in data.window_losses for m in members):
        if not all(
            math.isfinite(
                strategy_gap_of_means(
                    window_means(data.window_losses[m]), worse, better, prefix, max_n
                )
            )
            for m in members
        ):
            return None
        return over_seeds(
            [
                over_windows(
                    data,
                    m,
                    lambda means: strategy_gap_of_means(means, worse, better, prefix, max_n),
                )
                for m in members
            ]
        )
    gaps = [strategy_gap(data.sweeps[m], worse, better, healed, max_n) for m in members]
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


def _healed_both(data: RunData, members, worse: str, better: str) -> bool:
    return all(
        {worse, better}
        <= set(data.sweeps[m][data.sweeps[m]["healed"].astype(str) == "True"]["strategy"])
        for m in members
    )


NOT_HEALED = (
    "the paper's numbers are after LoRA healing; this run healed neither ranking's blocks "
    "(add {worse} and {better} to pruning.healing.strategies): shown unhealed"
)


def _twin_text(data: RunData, members) -> str:
    """Why the untrained twins' criteria gap is about zero: their removals barely move the loss."""
    moves = [
        max(abs(v - stats.losses["full"]) for k, v in stats.losses.items() if k != "full")
        for m in members
        if (stats := twin(data, m)) is not None and len(stats.losses) > 1
    ]
    if not moves:
        return ""
    return (
        f"; untrained twins: any removal moves their loss by at most {max(moves):.2g} nats, so "
        f"their gap is about 0 and the trained value is training's"
    )


def pruning_method_claims(data: RunData) -> list[dict]:
    """The criteria rows of every pruned group whose sweeps hold both strategies of a row, over
    the block sizes of the papers' range (n up to about half the layers). A row whose paper
    measured after healing uses the healed sets where the run healed both strategies, and is
    not testable otherwise (the unhealed gap shown). A model whose removals cost less than the
    threshold at all cannot show two rankings differing by it: not testable."""
    rows = []
    for group, members in data.pruning_groups.items():
        if not all(m in data.sweeps for m in members):
            continue
        strategies = set.intersection(*(set(data.sweeps[m]["strategy"]) for m in members))
        trained = any(m in data.trained for m in members)
        scale = scale_of(data, members)
        layers = sweep_layers(data.sweeps[members[0]])
        max_n = block_range(layers, GROMOV_MAX_FRACTION)
        threshold, threshold_text = learned_threshold(data, members, CRITERIA_GAP_NEGLIGIBLE)
        n_text = f"n = 1..{max_n} of {layers} layers" if max_n else "the common n"
        twin_text = _twin_text(data, members) if trained else ""
        for claim_id, paper, worse, better, words, key, paper_healed in LOSS_COMPARISONS:
            if not {worse, better} <= strategies:
                continue
            blockers = not_learned(data, members)
            healed = paper_healed and _healed_both(data, members, worse, better)
            if paper_healed and not healed:
                blockers.append(NOT_HEALED.format(worse=worse, better=better))
            blockers += no_room(
                [removal_damage(data.sweeps[m], worse, max_n) for m in members],
                threshold,
                f"mean over {n_text} of {worse}'s blocks",
            )
            claim = (
                f"{group}: {words}: mean over {n_text} of val_loss({worse}) - "
                f"val_loss({better}) > {threshold_text} "
                f"({'healed' if healed else 'unhealed'}){twin_text}"
            )
            estimate = _loss_estimate(data, members, trained, worse, better, healed, max_n)
            rows.append(
                _row(f"{claim_id}:{group}", paper, claim, key, estimate, threshold,
                     scale, trained, blockers, "no n at which both strategies removed layers")
            )  # fmt: skip
        if {"ppl", "taylor_plus"} <= strategies:
            healed = _healed_both(data, members, "ppl", "taylor_plus")
            gaps = [task_gap(data.sweeps[m], "ppl", "taylor_plus", healed, max_n) for m in members]
            blockers = not_learned(data, members)
            if not healed:
                blockers.append(NOT_HEALED.format(worse="ppl", better="taylor_plus"))
            estimate = None
            if not any(g is None for g in gaps):  # every seed scored on the same items
                estimate = over_seeds(gaps, sample_se=[g.se for g in gaps])
            claim = (
                f"{group}: Taylor+ keeps more task accuracy than the PPL criterion: mean over "
                f"the tasks and {n_text} of score(taylor_plus) - score(ppl) > 0 "
                f"({'healed' if healed else 'unhealed'})"
            )
            rows.append(
                _row(f"kim_taylor_vs_ppl_tasks:{group}", KIM, claim, "kim_taylor_vs_ppl_tasks",
                     estimate, 0.0, scale, trained, blockers,
                     "lm-eval scored no n of both ppl and taylor_plus (pruning.lm_eval.n_grid)")
            )  # fmt: skip
    return rows


_THRESHOLD = (
    f"> {LEARNED_SHARE_NEGLIGIBLE:.0%} of what the model learned (trained here), "
    f"{CRITERIA_GAP_NEGLIGIBLE:g} nats (published)"
)
_RANGE = f"n ≤ {GROMOV_MAX_FRACTION:g} L"

CLAIMS = (
    Claim(
        "kim_ppl_vs_taylor:<group>",
        PAPER_VALUES["kim_ppl_vs_taylor_loss"],
        f"loss(taylor_plus) - loss(ppl) over {_RANGE}, healed",
        "seeds; validation windows (published)",
        _THRESHOLD,
        "not testable unless both rankings are healed",
        pruning_method_claims,
    ),
    Claim(
        "song_iterative_vs_one_shot:<group>",
        PAPER_VALUES["song_iterative_vs_one_shot"],
        f"loss(ppl) - loss(sleb) over {_RANGE}, unhealed",
        "seeds; validation windows (published)",
        _THRESHOLD,
        "LNS toy: no room (its removals cost less than the threshold)",
        pruning_method_claims,
    ),
    Claim(
        "kim_taylor_vs_ppl_tasks:<group>",
        PAPER_VALUES["kim_taylor_vs_ppl_tasks"],
        f"score(taylor_plus) - score(ppl) over the tasks and {_RANGE}, healed",
        "seeds (+ items)",
        "> 0",
        "not testable unless both rankings are healed",
        pruning_method_claims,
    ),
)
