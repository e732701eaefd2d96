"""The pruning-method rows (Shortened LLaMA's PPL vs Taylor+, SLEB's iterative vs one-shot):
each verdict on planted sweeps and window losses, against the gaps worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from depthlab.claims import RunData, build_claims
from depthlab.claims.verdicts import INDICATIVE, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED
from depthlab.core.paper_values_pruning import CRITERIA_GAP_NEGLIGIBLE
from scipy import stats

N_VALUES = (1, 2, 4)


def _sweep(
    gaps: dict, shift: float = 0.0, scores: dict | None = None, healed: bool = True
) -> pd.DataFrame:
    """sweep.csv rows: strategy s at n has loss 5 + 0.1 n + gaps[s] * n (+ shift); with scores,
    one lm-eval task row per (s, n) scoring scores[s] with stderr 0.01; healed: the same rows
    again as the healed sets (Kim et al.'s numbers are after LoRA healing)."""
    rows = []
    for strategy, gap in gaps.items():
        for n in N_VALUES:
            loss = 5.0 + 0.1 * n + gap * n + shift
            score = (scores or {}).get(strategy, np.nan)
            for flag in (False, True) if healed else (False,):
                rows.append((strategy, n, flag, loss, "t", score, 0.01 if scores else np.nan))
    return pd.DataFrame(
        rows, columns=["strategy", "n", "healed", "val_loss", "task", "score", "score_stderr"]
    )


def _table(data: RunData) -> pd.DataFrame:
    return build_claims(data).set_index("claim_id")


@pytest.mark.parametrize(
    "taylor, sleb, expected",
    [
        (0.2, -0.1, (REPRODUCED, REPRODUCED)),
        (-0.2, 0.1, (NOT_REPRODUCED, NOT_REPRODUCED)),
        (0.0, 0.0, (NOT_TESTABLE, NOT_TESTABLE)),  # seeds straddle the threshold
    ],
)
def test_trained_models_are_decided_over_seeds(taylor, sleb, expected):
    members = ["m_s0", "m_s1", "m_s2"]
    spread = 0.01 if taylor == 0.0 else 0.0  # seed-to-seed differences of the gaps
    sweeps = {
        m: _sweep(
            {"ppl": 0.0, "taylor_plus": taylor + spread * (i - 1), "sleb": sleb - spread * (i - 1)},
            shift=0.01 * i,
        )
        for i, m in enumerate(members)
    }
    data = RunData(pruning_groups={"m": members}, trained=set(members), sweeps=sweeps)
    table = _table(data)
    rows = (table.loc["kim_ppl_vs_taylor:m"], table.loc["song_iterative_vs_one_shot:m"])
    assert tuple(r["verdict"] for r in rows) == expected
    # by hand: mean over n of loss(taylor_plus) - loss(ppl) = taylor * mean(n)
    assert rows[0]["measured"] == pytest.approx(taylor * np.mean(N_VALUES))
    assert rows[1]["measured"] == pytest.approx(-sleb * np.mean(N_VALUES))
    assert rows[0]["seeds"] == 3 and f"> {CRITERIA_GAP_NEGLIGIBLE:g}" in rows[0]["claim"]
    gaps = {"ppl": 0.0, "taylor_plus": taylor, "sleb": sleb}
    one = RunData(pruning_groups={"m": ["m"]}, trained={"m"}, sweeps={"m": _sweep(gaps)})
    assert _table(one).loc["kim_ppl_vs_taylor:m", "verdict"] == INDICATIVE


def test_kim_rows_without_healed_rankings_are_not_testable():
    members = ["m_s0", "m_s1", "m_s2"]
    sweeps = {
        m: _sweep({"ppl": 0.0, "taylor_plus": 0.2, "sleb": -0.1}, shift=0.01 * i, healed=False)
        for i, m in enumerate(members)
    }
    table = _table(RunData(pruning_groups={"m": members}, trained=set(members), sweeps=sweeps))
    kim = table.loc["kim_ppl_vs_taylor:m"]
    assert kim["verdict"] == NOT_TESTABLE and "after LoRA healing" in kim["reason"]
    assert kim["measured"] == pytest.approx(0.2 * np.mean(N_VALUES))  # shown, unhealed
    # SLEB is training-free: its row stays unhealed and decides
    assert table.loc["song_iterative_vs_one_shot:m", "verdict"] == REPRODUCED


def test_removals_cheaper_than_the_threshold_leave_nothing_to_rank():
    members = ["m_s0", "m_s1", "m_s2"]
    sweeps = {}
    for i, m in enumerate(members):
        sweep = _sweep({"ppl": 0.0, "sleb": -0.001 * (i + 1)}, healed=False)
        sweep["val_loss"] = (
            5.0 + 0.0005 * sweep["n"] - 0.001 * (i + 1) * sweep["n"] * (sweep["strategy"] == "sleb")
        )
        intact = sweep.iloc[[0]].assign(n=0, strategy="angular", val_loss=5.0)
        sweeps[m] = pd.concat([intact, sweep], ignore_index=True)
    data = RunData(pruning_groups={"m": members}, trained=set(members), sweeps=sweeps)
    data.val_loss = {m: 5.0 for m in members}
    data.unigram = {m: 6.0 for m in members}  # learned 1 nat: threshold 0.05
    row = _table(data).loc["song_iterative_vs_one_shot:m"]
    assert row["verdict"] == NOT_TESTABLE and "not shown to reach the threshold" in row["reason"]


def test_rows_need_both_strategies():
    data = RunData(pruning_groups={"m": ["m"]}, trained={"m"}, sweeps={"m": _sweep({"ppl": 0.0})})
    ids = set(_table(data).index)
    assert not any(i.startswith(("kim_", "song_")) for i in ids)


def test_published_models_are_decided_over_validation_windows():
    rng = np.random.default_rng(0)
    windows, base = 60, rng.normal(3.0, 1.0, 60)
    deltas = {("ppl", 2): 0.30, ("taylor_plus", 2): 0.50, ("sleb", 2): 0.25,
              ("ppl", 4): 0.60, ("taylor_plus", 4): 0.70, ("sleb", 4): 0.50}  # fmt: skip
    rows = [("", "full", 0, False, w, base[w]) for w in range(windows)]
    for (strategy, n), delta in deltas.items():
        loss = base + delta + rng.normal(0, 0.01, windows)
        rows += [("x", strategy, n, False, w, loss[w]) for w in range(windows)]
        if strategy != "sleb":  # Kim et al.'s rankings healed too (their numbers are healed)
            rows += [("x", strategy, n, True, w, loss[w] - 0.1) for w in range(windows)]
    frame = pd.DataFrame(rows, columns=["removed", "strategy", "n", "healed", "window", "loss"])
    sweep = (
        frame[frame["strategy"] != "full"]
        .groupby(["strategy", "n", "healed"], as_index=False)["loss"]
        .mean()
        .rename(columns={"loss": "val_loss"})
        .assign(task="t", score=np.nan, score_stderr=np.nan)
    )
    data = RunData(
        pruning_groups={"real": ["real"]},
        sweeps={"real": sweep},
        window_losses={"real": frame},
        bootstrap={"resamples": 200, "seed": 0},
    )
    table = _table(data)
    means = frame[~frame["healed"]].groupby(["strategy", "n"])["loss"].mean()
    healed = frame[frame["healed"]].groupby(["strategy", "n"])["loss"].mean()
    by_hand = np.mean([healed[("taylor_plus", n)] - healed[("ppl", n)] for n in (2, 4)])
    kim = table.loc["kim_ppl_vs_taylor:real"]
    assert kim["measured"] == pytest.approx(by_hand)
    assert "validation windows" in kim["interval"] and kim["verdict"] == REPRODUCED
    assert "(healed)" in kim["claim"]
    song = table.loc["song_iterative_vs_one_shot:real"]
    assert song["measured"] == pytest.approx(
        np.mean([means[("ppl", n)] - means[("sleb", n)] for n in (2, 4)])
    )
    assert song["verdict"] == REPRODUCED
    # no lm-eval on these sets: the tasks row says so
    tasks = table.loc["kim_taylor_vs_ppl_tasks:real"]
    assert tasks["verdict"] == NOT_TESTABLE and "lm-eval" in tasks["reason"]


def test_task_row_reads_the_lm_eval_scores():
    gaps = {"ppl": 0.0, "taylor_plus": 0.1}
    sweep = _sweep(gaps, scores={"ppl": 0.50, "taylor_plus": 0.60})
    data = RunData(pruning_groups={"r": ["r"]}, sweeps={"r": sweep})
    row = _table(data).loc["kim_taylor_vs_ppl_tasks:r"]
    assert row["measured"] == pytest.approx(0.10)
    # the interval from the standard errors: each strategy's mean over 3 n of se 0.01
    se = np.hypot(0.01 * np.sqrt(3) / 3, 0.01 * np.sqrt(3) / 3)
    assert row["high"] - row["low"] == pytest.approx(2 * 1.959963984540054 * se, rel=1e-6)
    assert row["verdict"] == REPRODUCED
    worse = _sweep(gaps, scores={"ppl": 0.60, "taylor_plus": 0.50})
    data = RunData(pruning_groups={"r": ["r"]}, sweeps={"r": worse})
    assert _table(data).loc["kim_taylor_vs_ppl_tasks:r", "verdict"] == NOT_REPRODUCED


def test_seeds_scored_on_the_same_items_keep_the_items_error():
    """Three seeds that all lose the same item: the seeds do not spread, but the items' error
    (shared by every seed) keeps the interval open: not a zero-width 'not reproduced'."""
    members = ["m_s0", "m_s1", "m_s2"]
    sweeps = {m: _sweep({"ppl": 0.0, "taylor_plus": 0.1}, scores={"ppl": 0.6, "taylor_plus": 0.59})
              for m in members}  # fmt: skip
    data = RunData(pruning_groups={"m": members}, trained=set(members), sweeps=sweeps)
    row = _table(data).loc["kim_taylor_vs_ppl_tasks:m"]
    assert row["measured"] == pytest.approx(-0.01)
    # zero seed spread: se^2 = 0 / 3 + mean(item se^2); item se of each seed's difference as in
    # test_task_row_reads_the_lm_eval_scores; t quantile with 2 df
    item_se = np.hypot(0.01 * np.sqrt(3) / 3, 0.01 * np.sqrt(3) / 3)
    half = stats.t.ppf(0.975, 2) * item_se
    assert (row["low"], row["high"]) == pytest.approx((-0.01 - half, -0.01 + half))
    assert row["verdict"] == NOT_TESTABLE and "same items" in row["interval"]
