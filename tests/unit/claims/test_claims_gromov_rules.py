"""Gromov et al.'s rows on planted sweeps (issue 49): the block choice decided on the trained
models with the twins beside them, the n a row names read from the data, QA against the
early-degrading tasks on each task's margin above chance, QA's collapse and the healed loss's
smoothness, each able to pass and to fail."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from depthlab.claims import RunData, build_claims
from depthlab.claims.gromov_tasks import normalised_score, steepness, task_chance
from depthlab.claims.initial import InitialStatistics
from depthlab.claims.measures import n_text
from depthlab.claims.verdicts import (
    INDICATIVE,
    INIT_SHOWS_IT,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    REPRODUCED,
    Estimate,
)
from depthlab.core import paper_values as pv

COLUMNS = ["strategy", "n", "fraction", "healed", "val_loss", "task", "score", "score_stderr"]


def _table(data: RunData) -> pd.DataFrame:
    return build_claims(data).set_index("claim_id")


def _members(group: str, seeds: int) -> list[str]:
    return [f"{group}_s{i}" for i in range(seeds)]


# ---------------------------------------------------------------------------------------------
# measures


def test_measures_of_the_n_chance_and_steepness():
    assert n_text([1, 2, 3, 4]) == "n = 1..4"
    assert n_text([2, 4, 8]) == "n in {2, 4, 8}"
    assert task_chance("mmlu_anatomy", pv.GROMOV_TASK_CHANCE) == 0.25
    assert task_chance("depthlab_word_order", pv.GROMOV_TASK_CHANCE) is None
    e = normalised_score(Estimate(0.8, se=0.0), Estimate(0.5, se=0.01), 0.25)
    assert e.value == pytest.approx(0.25 / 0.55) and e.se == pytest.approx(0.01 / 0.55)
    assert steepness([0, 1, 2, 3], [0, 1, 2, 3]) == pytest.approx(1.0)
    assert steepness([0, 1, 2, 3], [0, 0, 0, 1]) == pytest.approx(3.0)
    assert math.isnan(steepness([0, 1, 2], [1, 1, 1]))


# ---------------------------------------------------------------------------------------------
# gromov_block_choice: the trained models' gap, the n read from the data


def _block_sweep(gap: float, ns, layers: int) -> pd.DataFrame:
    rows = [("angular", 0, 0.0, False, 5.0, "", math.nan, math.nan)]
    for n in ns:
        loss = 5.0 + 0.1 * n
        rows += [
            ("angular", n, n / layers, False, loss, "", math.nan, math.nan),
            ("deepest", n, n / layers, False, loss + gap, "", math.nan, math.nan),
        ]
    return pd.DataFrame(rows, columns=COLUMNS)


def _twin(gap: float, ns) -> InitialStatistics:
    losses = {"full": 8.0}
    for n in ns:
        losses |= {f"angular:{n}": 8.0, f"deepest:{n}": 8.0 + gap}
    return InitialStatistics(
        h_var=pd.Series([1.0]), distance=pd.Series([0.1]), angle_update=pd.Series([1.0]),
        losses=losses,
    )  # fmt: skip


def _block_data(gaps, twin_gap, ns=(2, 4, 8), layers: int = 30) -> RunData:
    members = _members("m", len(gaps))
    data = RunData(pruning_groups={"m": members}, trained=set(members))
    for m, gap in zip(members, gaps):
        data.sweeps[m] = _block_sweep(gap, ns, layers)
        if twin_gap is not None:
            data.initial[m] = _twin(twin_gap, ns)
    return data


def test_block_choice_value_is_the_trained_gap_with_the_twins_beside_it():
    row = _table(_block_data([0.20, 0.21, 0.22], twin_gap=0.10)).loc["gromov_block_choice:m"]
    assert row["measured"] == pytest.approx(0.21)  # the trained models', not trained - untrained
    assert row["verdict"] == REPRODUCED, row["reason"]
    assert row["untrained"] == pytest.approx(0.10)
    assert row["training_effect"] == pytest.approx(0.11)
    assert "trained - untrained" not in row["claim"]


def test_block_choice_twins_that_already_show_it_block_it():
    row = _table(_block_data([0.20, 0.21, 0.22], twin_gap=0.21)).loc["gromov_block_choice:m"]
    assert row["verdict"] == NOT_TESTABLE and INIT_SHOWS_IT in row["reason"]
    assert row["measured"] == pytest.approx(0.21)


def test_block_choice_names_the_n_it_used():
    row = _table(_block_data([0.2, 0.21, 0.22], None)).loc["gromov_block_choice:m"]
    assert "n in {2, 4, 8} of 30 layers" in row["claim"] and "1..15" not in row["claim"]
    contiguous = _block_data([0.2, 0.21, 0.22], None, ns=range(1, 8), layers=8)
    assert "n = 1..4 of 8 layers" in _table(contiguous).loc["gromov_block_choice:m", "claim"]


# ---------------------------------------------------------------------------------------------
# gromov_qa_vs_math: the paper's grouping, drops on each task's margin above chance


def _scored_sweep(scores: dict, layers: int = 28, stderr: float = 0.002, healed=()) -> pd.DataFrame:
    """scores: {task: {n: score}} of the angular blocks (n = 0: intact), unhealed; healed:
    {task: {n: score}} scored on the healed blocks; val_loss 3 + 0.1 n."""
    rows = []
    for flag, table in ((False, scores), (True, dict(healed))):
        for task, by_n in table.items():
            for n, score in by_n.items():
                loss = 3.0 + 0.1 * n
                rows.append(("angular", n, n / layers, flag, loss, task, score, stderr))
    return pd.DataFrame(rows, columns=COLUMNS)


def _published(sweep: pd.DataFrame) -> RunData:
    return RunData(pruning_groups={"real": ["real"]}, sweeps={"real": sweep})


def _linear(intact: float, drop: float, ns=range(0, 8), layers: int = 8) -> dict:
    return {n: intact - drop * n / layers for n in ns}


def test_hellaswag_counts_with_the_early_degrading_tasks():
    sweep = _scored_sweep({"boolq": _linear(0.8, 0.02), "hellaswag": _linear(0.7, 0.4)}, layers=8)
    row = _table(_published(sweep)).loc["gromov_qa_vs_math:real"]
    assert row["verdict"] == REPRODUCED, row["reason"]
    assert "early-degrading: hellaswag, gsm8k" in row["claim"]
    assert "n = 1..4 of 8 layers" in row["claim"]


def test_drops_are_read_against_the_margin_above_chance():
    # raw points: GSM8K loses 0.1 at n = 4, BoolQ 0.05; but BoolQ had 0.078 above chance
    # (0.622), GSM8K 0.8: BoolQ lost most of its margin, GSM8K an eighth
    sweep = _scored_sweep(
        {"boolq": _linear(0.70, 0.1), "gsm8k": _linear(0.8, 0.2)}, layers=8, stderr=0.001
    )
    row = _table(_published(sweep)).loc["gromov_qa_vs_math:real"]
    assert row["verdict"] == NOT_REPRODUCED, row["reason"]
    assert row["measured"] == pytest.approx((0.2 / 0.8 - 0.1 / 0.078) * 2.5 / 8)


def test_an_intact_score_not_above_chance_by_its_interval_is_not_testable():
    sweep = _scored_sweep(
        {"boolq": _linear(0.63, 0.0), "gsm8k": _linear(0.8, 0.4)}, layers=8, stderr=0.01
    )
    row = _table(_published(sweep)).loc["gromov_qa_vs_math:real"]
    assert row["verdict"] == NOT_TESTABLE
    assert "task boolq" in row["reason"] and "does not lie above chance 0.622" in row["reason"]


def test_a_task_of_unknown_chance_is_named(monkeypatch):
    monkeypatch.setattr(pv, "GROMOV_TASK_CHANCE", {"boolq": 0.622})
    sweep = _scored_sweep({"boolq": _linear(0.8, 0.02), "gsm8k": _linear(0.8, 0.4)}, layers=8)
    row = _table(_published(sweep)).loc["gromov_qa_vs_math:real"]
    assert row["verdict"] == NOT_TESTABLE and "task gsm8k: chance unknown" in row["reason"]


# ---------------------------------------------------------------------------------------------
# gromov_qa_collapse


def _qa_profile(normalised: dict, layers: int = 28) -> pd.DataFrame:
    """BoolQ and MMLU whose normalised scores are `normalised` {n: q} (intact 0.8 / 0.6)."""
    scores = {}
    for task, intact in (("boolq", 0.8), ("mmlu", 0.6)):
        chance = pv.GROMOV_TASK_CHANCE[task]
        scores[task] = {0: intact} | {
            n: chance + q * (intact - chance) for n, q in normalised.items()
        }
    return _scored_sweep(scores, layers=layers)


@pytest.mark.parametrize(
    "profile, expected",
    [
        ({2: 1.0, 4: 0.98, 7: 0.97, 10: 0.95, 14: 0.05, 21: 0.0}, REPRODUCED),
        ({2: 0.5, 4: 0.4, 7: 0.3, 10: 0.2, 14: 0.05, 21: 0.0}, NOT_REPRODUCED),  # no hold
        ({2: 1.0, 4: 1.0, 7: 1.0, 10: 0.98, 14: 0.97, 21: 0.96}, NOT_REPRODUCED),  # no collapse
        ({2: 1.0, 4: 1.0}, NOT_TESTABLE),  # scored too little of the range
    ],
)
def test_qa_holds_then_collapses(profile, expected):
    row = _table(_published(_qa_profile(profile))).loc["gromov_qa_collapse:real"]
    assert row["verdict"] == expected, row["reason"]
    if expected == REPRODUCED:
        assert row["measured"] == pytest.approx(10 / 28)
        assert "n in {2, 4, 7, 10, 14, 21} of 28 layers" in row["claim"]


def test_qa_collapse_without_a_qa_task_says_what_was_scored():
    sweep = _scored_sweep({"depthlab_word_order": {0: 0.6, 6: 0.4}}, layers=12)
    row = _table(_published(sweep)).loc["gromov_qa_collapse:real"]
    assert row["verdict"] == NOT_TESTABLE and "scored: depthlab_word_order" in row["reason"]


# ---------------------------------------------------------------------------------------------
# gromov_healed_loss_smooth


def _healed(losses: dict, qa: dict | None, seeds: int = 3, layers: int = 12) -> RunData:
    """Seeds whose healed angular blocks have `losses` {n: loss} (intact 3.0) and, when `qa`
    {n: normalised score} is given, BoolQ and MMLU scored on the healed blocks."""
    members = _members("h", seeds)
    data = RunData(pruning_groups={"h": members}, trained=set(members))
    for i, m in enumerate(members):
        rows = [("angular", 0, 0.0, False, 3.0, "", math.nan, math.nan)]
        for n, loss in losses.items():
            rows.append(("angular", n, n / layers, False, loss + 1.0, "", math.nan, math.nan))
            rows.append(("angular", n, n / layers, True, loss + 0.001 * i, "", math.nan, math.nan))
        sweep = pd.DataFrame(rows, columns=COLUMNS)
        if qa is not None:
            scored = _qa_profile({}, layers)
            healed = _qa_profile(qa, layers)
            healed = healed[healed["n"] > 0].assign(healed=True)
            sweep = pd.concat([sweep, scored, healed], ignore_index=True)
        data.sweeps[m] = sweep
    return data


STEP = {2: 1.0, 4: 1.0, 6: 0.0}  # QA flat, then at chance


@pytest.mark.parametrize(
    "losses, qa, expected",
    [
        ({2: 3.1, 4: 3.2, 6: 3.3}, STEP, REPRODUCED),
        ({2: 3.01, 4: 3.02, 6: 3.5}, STEP, NOT_REPRODUCED),  # the loss jumps too
        ({2: 3.1, 4: 3.2, 6: 3.3}, {2: 0.67, 4: 0.33, 6: 0.0}, NOT_REPRODUCED),  # QA smooth
        ({2: 3.1, 4: 3.2, 6: 3.3}, None, NOT_TESTABLE),  # QA not scored after healing
    ],
)
def test_healed_loss_smooth_while_qa_jumps(losses, qa, expected):
    row = _table(_healed(losses, qa)).loc["gromov_healed_loss_smooth:h"]
    assert row["verdict"] == expected, row["reason"]


def test_healed_loss_smooth_healed_at_one_n_is_not_testable():
    row = _table(_healed({8: 3.2}, None)).loc["gromov_healed_loss_smooth:h"]
    assert row["verdict"] == NOT_TESTABLE and "healed at n = 8" in row["reason"]
    assert f">= {pv.GROMOV_SMOOTH_MIN_HEALED} healed n" in row["reason"]


def test_healing_gap_names_the_healed_n():
    data = _block_data([0.2, 0.21, 0.22], None)
    for m, sweep in data.sweeps.items():
        healed = sweep[sweep["n"] == 8].assign(healed=True)
        data.sweeps[m] = pd.concat([sweep, healed], ignore_index=True)
    assert "mean over healed n = 8 of" in _table(data).loc["gromov_healing_gap:m", "claim"]


@pytest.mark.parametrize("jump, expected", [(False, REPRODUCED), (True, NOT_REPRODUCED)])
def test_a_published_lms_healed_loss_is_bootstrapped_over_its_windows(jump, expected):
    import numpy as np

    losses = {2: 3.01, 4: 3.02, 6: 3.5} if jump else {2: 3.1, 4: 3.2, 6: 3.3}
    data = _healed(losses, STEP, seeds=1)
    data.trained = set()
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.01, 16)
    sets = [("full", 0, False, 3.0)] + [("angular", n, True, loss) for n, loss in losses.items()]
    data.window_losses["h_s0"] = pd.DataFrame(
        [
            ("", strategy, n, healed, w, loss + noise[w], "lora" if healed else "")
            for strategy, n, healed, loss in sets
            for w in range(16)
        ],
        columns=["removed", "strategy", "n", "healed", "window", "loss", "method"],
    )
    row = _table(data).loc["gromov_healed_loss_smooth:h"]
    assert "validation windows" in row["interval"]
    # healing trains here: one healing run is indicative, with what the windows say
    assert row["verdict"] == INDICATIVE
    assert f"on this run's interval {expected}:" in row["reason"], row["reason"]
