"""kim_cpt_vs_lora (Kim et al. 2024, Shortened LLaMA): continued pretraining (healing method
`full`) heals better than LoRA at the largest n both healed, decided on planted window losses:
a published LM over a paired bootstrap of its validation windows, models trained here over
seeds; a row only where both methods healed; the Gromov healing gap reads the first method."""

import numpy as np
import pandas as pd
import pytest
from depthlab.claims import RunData, build_claims
from depthlab.claims.verdicts import INDICATIVE, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED
from depthlab.core.paper_values_pruning import PAPER_VALUES
from scipy import stats

COLUMNS = ["removed", "strategy", "n", "healed", "window", "loss", "method"]


def _windows(healed: dict, windows: int = 100, noise: float = 0.02, seed: int = 0):
    """window_losses.csv with unhealed angular / deepest sets at n 2 and 4 and the healed sets
    `healed` {(method, strategy, n): delta over the full model}, in the order given (the first
    method's rows first, as the gathering job writes them)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(3.0, 1.0, windows)  # documents differ a lot: pairing must cancel this
    rows = [("", "full", 0, False, w, base[w], "") for w in range(windows)]
    unhealed = {("angular", 2): 0.3, ("deepest", 2): 0.5, ("angular", 4): 0.8, ("deepest", 4): 1.2}
    for (strategy, n), delta in unhealed.items():
        loss = base + delta + rng.normal(0, noise, windows)
        rows += [(f"{strategy}{n}", strategy, n, False, w, loss[w], "") for w in range(windows)]
    for (method, strategy, n), delta in healed.items():
        loss = base + delta + rng.normal(0, noise, windows)
        rows += [(f"{strategy}{n}", strategy, n, True, w, loss[w], method) for w in range(windows)]
    return pd.DataFrame(rows, columns=COLUMNS)


def _healed(gap_at_4: float, gap_at_2: float = -0.3, first: str = "lora") -> dict:
    """lora and full healing of angular and deepest at n 2 and 4; lora - full = gap_at_n."""
    lora = {("lora", s, n): 0.2 * n for s in ("angular", "deepest") for n in (2, 4)}
    full = {
        ("full", s, n): 0.2 * n - (gap_at_4 if n == 4 else gap_at_2)
        for s in ("angular", "deepest")
        for n in (2, 4)
    }
    return {**lora, **full} if first == "lora" else {**full, **lora}


def _published(windows: pd.DataFrame) -> RunData:
    return RunData(
        pruning_groups={"real": ["real"]},
        window_losses={"real": windows},
        sweeps={"real": pd.DataFrame(columns=["strategy", "n", "healed", "val_loss"])},
        pretrained_scale={"real": "real (8 layers)"},
    )


def _by_hand(windows: pd.DataFrame, n: int, adapter: str = "lora") -> np.ndarray:
    """Per window: the mean over strategies of loss(adapter-healed) - loss(full-healed) at n."""
    healed = windows[windows["healed"] & (windows["n"] == n)]
    pivot = healed.pivot_table(index="window", columns=["method", "strategy"], values="loss")
    return (pivot[adapter] - pivot["full"]).mean(axis=1).to_numpy()


@pytest.mark.parametrize(
    "gap, expected", [(0.2, REPRODUCED), (-0.2, NOT_REPRODUCED), (0.0, NOT_TESTABLE)]
)
def test_a_published_lm_is_decided_over_its_windows_at_the_largest_n(gap, expected):
    # at n = 2 the planted gap has the other sign: the row must read n = 4 only
    noise = 0.02 if gap else 0.5
    windows = _windows(_healed(gap, gap_at_2=-gap or 0.3), noise=noise)
    row = build_claims(_published(windows)).set_index("claim_id").loc["kim_cpt_vs_lora:real"]
    assert row["measured"] == pytest.approx(_by_hand(windows, 4).mean())
    if gap:
        assert row["measured"] == pytest.approx(gap, abs=0.02)
    assert "100 validation windows" in row["interval"] and row["low"] < row["high"]
    # healing trains the model here: one healing run per block is indicative; the reason says
    # what the windows' interval would decide
    assert row["verdict"] == INDICATIVE and f"interval {expected}" in row["reason"], row["reason"]
    assert "healing trains the model here" in row["reason"]
    assert "largest healed n (4)" in row["claim"] and row["seeds"] == 1
    assert row["paper_value"] == PAPER_VALUES["kim_cpt_vs_lora"].describe()
    assert row["size_verdict"] == "no size stated"


def test_the_interval_is_a_paired_bootstrap_over_windows():
    """Independent: resample the windows with the run's seed, the per-window gap's mean each
    time, percentiles: the same interval (the bootstrap draws the same windows)."""
    windows = _windows(_healed(0.1), noise=0.05)
    data = _published(windows)
    row = build_claims(data).set_index("claim_id").loc["kim_cpt_vs_lora:real"]
    per_window = _by_hand(windows, 4)
    rng = np.random.default_rng(data.bootstrap["seed"])
    draws = [
        per_window[rng.integers(0, len(per_window), len(per_window))].mean()
        for _ in range(data.bootstrap["resamples"])
    ]
    low, high = np.quantile(draws, [0.025, 0.975])
    assert (row["low"], row["high"]) == pytest.approx((low, high))
    # unpaired, the windows' spread (sd 1) would swamp a gap of 0.1; paired it decides
    assert row["high"] - row["low"] < 0.05 and f"interval {REPRODUCED}" in row["reason"]


def test_the_first_method_may_be_full_and_gromov_reads_the_first_methods_rows():
    windows = _windows(_healed(0.2, first="full"))
    table = build_claims(_published(windows)).set_index("claim_id")
    assert table.loc["kim_cpt_vs_lora:real", "measured"] == pytest.approx(0.2, abs=0.02)
    # gromov_healing_gap: |gap before| - |gap after| over n with the first method's (full's)
    # healed rows alone, not an average of both methods'
    means = windows.groupby(["strategy", "n", "healed", "method"])["loss"].mean()
    by_hand = np.mean(
        [
            abs(means[("deepest", n, False, "")] - means[("angular", n, False, "")])
            - abs(means[("deepest", n, True, "full")] - means[("angular", n, True, "full")])
            for n in (2, 4)
        ]
    )
    assert table.loc["gromov_healing_gap:real", "measured"] == pytest.approx(by_hand)


def test_continued_pretraining_on_a_few_tokens_is_no_test_of_the_paper():
    data = _published(_windows(_healed(0.2)))
    data.healing = {
        "real": {
            "full": {"tokens": 1536, "lr": 5e-5, "runs": 1},
            "lora": {"tokens": 1536, "lr": 2e-3, "runs": 1},
        }
    }
    row = build_claims(data).set_index("claim_id").loc["kim_cpt_vs_lora:real"]
    assert row["verdict"] == NOT_TESTABLE
    assert "1,536 tokens at lr 5e-05 against lora at lr 0.002" in row["reason"]


def test_no_row_without_both_methods():
    lora_only = {k: v for k, v in _healed(0.2).items() if k[0] == "lora"}
    for windows in (
        _windows(lora_only),
        _windows(_healed(0.2)).drop(columns="method"),  # written before the method column
        _windows({}),
    ):
        table = build_claims(_published(windows)).set_index("claim_id")
        assert not any(i.startswith("kim_cpt_vs_lora") for i in table.index)
    # healed by both, but never the same (strategy, n): nothing to compare
    apart = {("lora", "angular", 2): 0.4, ("full", "deepest", 4): 0.6}
    table = build_claims(_published(_windows(apart))).set_index("claim_id")
    assert not any(i.startswith("kim_cpt_vs_lora") for i in table.index)


@pytest.mark.parametrize("seeds, expected", [(3, REPRODUCED), (1, INDICATIVE)])
def test_models_trained_here_are_decided_over_seeds(seeds, expected):
    members = [f"m_s{i}" for i in range(seeds)]
    gaps = [0.2, 0.25, 0.18][:seeds]
    windows = {m: _windows(_healed(g), seed=i) for i, (m, g) in enumerate(zip(members, gaps))}
    data = RunData(
        pruning_groups={"m": members},
        trained=set(members),
        window_losses=windows,
        sweeps={m: pd.DataFrame(columns=["strategy", "n", "healed", "val_loss"]) for m in members},
        scale={m: "4 layers x 64, 1M tokens" for m in members},
    )
    row = build_claims(data).set_index("claim_id").loc["kim_cpt_vs_lora:m"]
    per_seed = [_by_hand(windows[m], 4).mean() for m in members]
    assert row["measured"] == pytest.approx(np.mean(per_seed)) and row["seeds"] == seeds
    assert row["verdict"] == expected, row["reason"]
    if seeds == 3:
        half = stats.t.ppf(0.975, 2) * np.std(per_seed, ddof=1) / np.sqrt(3)
        assert (row["low"], row["high"]) == pytest.approx((np.mean(per_seed) - half,
                                                          np.mean(per_seed) + half))  # fmt: skip
        assert "seeds" in row["interval"]
