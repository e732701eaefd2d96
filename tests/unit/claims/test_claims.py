"""The claims table: intervals against independent formulas, the verdict rules, every claim
giving each verdict on planted tables, and the rule in a dry run."""

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from depthlab import claims
from depthlab.claims import RunData, build_claims, verdicts
from depthlab.claims.initial import InitialStatistics
from depthlab.claims.verdicts import INDICATIVE, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Estimate
from depthlab.config import load_config, resolve
from depthlab.core.paper_values import PAPER_VALUES
from local_snakemake import SNAKEMAKE, local_env
from scipy import stats

ROOT = Path(__file__).resolve().parents[3]
LAYERS = 8


# ---------------------------------------------------------------------------------------------
# Intervals and measurements


def test_over_seeds_uses_a_t_interval_from_three_seeds_and_no_interval_for_two():
    values = [1.0, 1.5, 3.0]
    low, high = stats.t.interval(0.95, 2, loc=np.mean(values), scale=stats.sem(values))
    e = verdicts.over_seeds([Estimate(v) for v in values])
    assert (e.value, e.low, e.high, e.n) == pytest.approx((np.mean(values), low, high, 3))
    two = verdicts.over_seeds([Estimate(2.0), Estimate(-1.0)])
    assert (two.value, two.n, two.has_interval) == (0.5, 2, False)
    own = verdicts.over_seeds([Estimate(1.0, 0.5, 1.5, "bootstrap")])
    assert (own.low, own.high, own.n) == (0.5, 1.5, 1) and "within one model" in own.method


def test_over_seeds_adds_the_shared_items_error_to_the_seeds_spread():
    values, item_se = [0.1, 0.2, 0.4], [0.05, 0.03, 0.04]
    e = verdicts.over_seeds([Estimate(v) for v in values], sample_se=item_se)
    se = np.sqrt(stats.sem(values) ** 2 + np.mean(np.square(item_se)))
    half = stats.t.ppf(0.975, 2) * se
    assert (e.value, e.low, e.high, e.n) == pytest.approx(
        (np.mean(values), e.value - half, e.value + half, 3)
    )
    assert e.high - e.low > 2 * stats.t.ppf(0.975, 2) * stats.sem(values)
    missing = verdicts.over_seeds([Estimate(v) for v in values], sample_se=[0.05, np.nan, 0.04])
    assert not missing.has_interval and "standard error" in missing.method


def test_log_variance_slope_matches_a_planted_exponential_and_skips_the_embedding():
    rng = np.random.default_rng(0)
    layers = np.arange(1, LAYERS + 1)
    log_var = 0.3 * layers + 2 + rng.normal(0, 0.05, layers.size)
    h_var = pd.Series([1e-6, *np.exp(log_var)], index=[0, *layers])
    e = claims.log_variance_slope(h_var)
    fit = stats.linregress(layers, log_var)
    half = stats.t.ppf(0.975, layers.size - 2) * fit.stderr
    assert (e.value, e.low, e.high) == pytest.approx(
        (fit.slope, fit.slope - half, fit.slope + half)
    )
    assert e.low < 0.3 < e.high


def test_unigram_entropy_and_final_val_loss():
    tokens = [0, 0, 1, 2]
    assert claims.unigram_entropy(tokens) == pytest.approx(
        -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    )
    log = pd.DataFrame(
        {
            "tokens": [10, 20, 30, 20],
            "split": ["val", "val", "train", "train"],
            "loss": [5.0, 4.0, 3.0, 3.5],
        }
    )
    assert claims.final_val_loss(log) == 4.0


def test_depth_score_trend_of_planted_effects_is_exact():
    # every problem: effect 0.1 on each layer plus 1 on layer 0 (easy) or the last (hard)
    effects = _problem_effects(easy_layer=0, hard_layer=LAYERS - 1, noise=0.0)
    trend = claims.depth_score_trend(effects, "hops", resamples=50, seed=0)
    total = 0.1 * LAYERS + 1.0
    spread = 0.1 * sum(range(LAYERS))
    expected = ((spread + (LAYERS - 1)) / total - spread / total) / (LAYERS - 1)
    e = trend["diffs"][4]
    assert (e.value, e.low, e.high) == pytest.approx((expected,) * 3)
    assert trend["slope"].value == pytest.approx(expected / 3)


def test_map_error_advantage_against_the_best_constant_target():
    # error |t - s| + 0.1: the equal-depth target wins by the depth-blind distance
    errors = _map_errors("equal")
    e = claims.map_error_advantage(errors)
    depths = np.linspace(0, 1, 5)
    best_constant = min(depths, key=lambda c: np.abs(depths - c).mean())
    assert e.value == pytest.approx(np.abs(depths - best_constant).mean())
    # a depth-blind map (the middle target best for every source) gains nothing or less
    blind = claims.map_error_advantage(_map_errors("middle"))
    assert blind.value < 0


def test_fit_parameter_flags_an_interval_touching_a_bound():
    fit = _fit(1.3, 0.9, 1.7)
    assert claims.fit_parameter(fit, "a_l", (0.0, 5.0))[1] is False
    assert claims.fit_parameter(_fit(1.3, 1e-12, 1.7), "a_l", (0.0, 5.0))[1] is True
    assert claims.fit_parameter(_fit(5.0, 0.9, 5.0), "a_l", (0.0, 5.0))[1] is True


# ---------------------------------------------------------------------------------------------
# Verdict rules


@pytest.mark.parametrize(
    "estimate, blockers, expected",
    [
        (Estimate(1.0, 0.5, 1.5), [], REPRODUCED),
        (Estimate(-1.0, -1.5, -0.5), [], NOT_REPRODUCED),
        (Estimate(1.0, -0.5, 2.5), [], NOT_TESTABLE),
        (Estimate(1.0), [], NOT_TESTABLE),
        (Estimate(1.0, 0.5, 1.5), ["did not learn"], NOT_TESTABLE),
        (Estimate(0.0, -0.001, 0.001), [], NOT_REPRODUCED),  # a precise null
        (Estimate(0.02, 0.005, 0.03), [], NOT_TESTABLE),  # straddles the threshold
        # wholly below the threshold, though it reaches above 0: the claimed rise of 0.01 is
        # excluded, so not reproduced (was "not testable" when only intervals below 0 or
        # inside (-0.01, 0.01) could reject)
        (Estimate(-0.034, -0.0745, 0.0064), [], NOT_REPRODUCED),
        (Estimate(0.006, 0.001, 0.009), [], NOT_REPRODUCED),  # a real effect, too small
    ],
)
def test_verdict_positive(estimate, blockers, expected):
    verdict, reason = verdicts.verdict_positive(estimate, blockers, threshold=0.01)
    assert verdict == expected
    if not blockers and estimate.has_interval:
        assert "threshold 0.01" in reason  # every row says which threshold decided it


def test_verdict_positive_without_a_band_cannot_reject_a_precise_null():
    assert verdicts.verdict_positive(Estimate(0.0, -0.001, 0.001))[0] == NOT_TESTABLE


@pytest.mark.parametrize(
    "diffs, expected",
    [
        ({2: (0.01, -0.02, 0.03), 3: (0.0, -0.03, 0.04)}, REPRODUCED),
        ({2: (0.01, -0.02, 0.03), 3: (0.118, 0.054, 0.185)}, NOT_REPRODUCED),  # a level-3 rise
        ({2: (0.0, -5.0, 5.0)}, NOT_TESTABLE),  # [-5, 5] is no test
        ({2: (-0.2, -0.3, -0.1)}, NOT_REPRODUCED),  # a clear fall
        ({2: (0.01, -0.02, 0.03)}, REPRODUCED),
    ],
)
def test_verdict_equivalent(diffs, expected):
    estimates = {k: Estimate(*v) for k, v in diffs.items()}
    assert verdicts.verdict_equivalent(estimates, 0.05)[0] == expected
    assert verdicts.verdict_equivalent(estimates, 0.05, ["at chance"])[0] == NOT_TESTABLE


@pytest.mark.parametrize(
    "estimate, blockers, expected",
    [
        (Estimate(1.3, 1.0, 1.4), [], REPRODUCED),
        # the default run's Chinchilla a_l: contains 1.2 but is wider than the paper's whole
        # band 1.2 ± 0.3, so it decides nothing (was "reproduced": 1.2 inside the interval)
        (Estimate(1.325, 0.977, 1.793), [], NOT_TESTABLE),
        (Estimate(1.0, 0.5, 2.5), [], NOT_TESTABLE),  # wider still: never more likely to pass
        (Estimate(2.3, 2.0, 2.8), [], NOT_REPRODUCED),
        (Estimate(0.7, 0.6, 0.85), [], NOT_REPRODUCED),  # below the band
        (Estimate(1.3, 1.0, 1.4), ["at bound"], NOT_TESTABLE),
    ],
)
def test_verdict_within_is_an_equivalence_test(estimate, blockers, expected):
    verdict, reason = verdicts.verdict_within(estimate, (0.9, 1.5), blockers, "stated ± 0.3")
    assert verdict == expected
    if not blockers:
        assert "[0.9, 1.5] (stated ± 0.3)" in reason


@pytest.mark.parametrize(
    "interval, verdict, expected",
    [
        ((1.0, 1.4), REPRODUCED, verdicts.SIZE_REPRODUCED),
        ((1.6, 2.0), REPRODUCED, verdicts.SIZE_NOT_REPRODUCED),
        ((1.2, 2.0), REPRODUCED, NOT_TESTABLE),
        ((1.0, 1.4), INDICATIVE, INDICATIVE),
        ((1.0, 1.4), NOT_TESTABLE, NOT_TESTABLE),
    ],
)
def test_verdict_size(interval, verdict, expected):
    e = Estimate(sum(interval) / 2, *interval)
    assert verdicts.verdict_size(e, (0.9, 1.5), verdict) == expected
    assert verdicts.verdict_size(e, None, verdict) == verdicts.NO_SIZE


def test_one_or_two_seeds_are_indicative_three_decide():
    rule = verdicts.verdict_positive(Estimate(1.0, 0.5, 1.5))
    one = verdicts.with_seeds(Estimate(1.0, 0.5, 1.5, n=1), rule)
    assert one[0] == INDICATIVE and REPRODUCED in one[1]
    assert verdicts.with_seeds(Estimate(1.0, 0.5, 1.5, n=2), rule)[0] == INDICATIVE
    assert verdicts.with_seeds(Estimate(1.0, 0.5, 1.5, n=3), rule) == rule
    # a published checkpoint has no seeds to vary: its own interval decides
    assert verdicts.with_seeds(Estimate(1.0, 0.5, 1.5, n=1), rule, trained_here=False) == rule


# ---------------------------------------------------------------------------------------------
# Every claim, each verdict, on planted tables


def _seeded(base: str, seeds: int) -> list[str]:
    return [f"{base}_s{s}" for s in range(seeds)] if seeds > 1 else [base]


def _flat_twin(layers: int = LAYERS, loss: float = 8.3) -> InitialStatistics:
    """An untrained twin with none of the CoD effects: flat variance, equal distances, every
    removal costing nothing."""
    states = np.arange(layers + 1)
    return InitialStatistics(
        h_var=pd.Series(np.ones(layers + 1), index=states),
        distance=pd.Series(np.full(layers, 0.1), index=np.arange(layers)),
        angle_update=pd.Series(np.full(layers - 1, 1.0)),
        losses={"full": loss, **{f"single:{l}": loss for l in range(layers)}},
    )


def _cod_data(
    effect: str, seeds: int = 3, gain: float = 0.05, twins: str | None = "flat"
) -> RunData:
    """Pre-LN vs LNS trained here, where LNS has (effect = "paper") or lacks ("opposite") every
    CoD effect; "unlearned": the paper's effects on a model no better than unigram; "noisy":
    effects whose sign flips from seed to seed; "null": no effect at all. twins: "flat"
    untrained twins without any effect, "same" twins that already show every trained effect
    (the trained tables copied), None no twins. Trained to 25 tokens per parameter, all-token
    distances."""
    rng = np.random.default_rng(1)
    base, treat = _seeded("pre_ln", seeds), _seeded("lns", seeds)
    data = RunData(cod_pairs=[("pre_ln", base, "lns", treat)], trained=set(base + treat))
    sign = {"paper": 1.0, "unlearned": 1.0, "opposite": -1.0, "noisy": 1.0, "null": 0.0}[effect]
    layers = np.arange(LAYERS)
    for i, (b, t) in enumerate(zip(base, treat)):
        seed_sign = (-1.0) ** i if effect == "noisy" else 1.0
        jitter = rng.normal(0, 0.003)
        data.val_loss[b], data.val_loss[t] = 5.5 + jitter, 5.5 + jitter - gain * sign * seed_sign
        for name in (b, t):
            data.unigram[name] = 5.0 if effect == "unlearned" else 6.0
            data.scale[name] = "8 layers x 32, 1k tokens"
        states = np.arange(LAYERS + 1)
        data.h_var[b] = pd.Series(np.exp((0.2 if sign >= 0 else 0.02) * states), index=states)
        data.h_var[t] = pd.Series(np.exp((0.02 if sign > 0 else 0.2) * states), index=states)
        gap = np.full(LAYERS, 0.05 * sign * seed_sign)
        data.distance[b] = pd.Series(0.1 + rng.normal(0, 1e-4, LAYERS), index=layers)
        data.distance[t] = data.distance[b] + gap
        drop_b = 0.1 + rng.normal(0, 1e-4, LAYERS)
        data.single_layer[b] = pd.DataFrame(
            {"layer": layers, "task": "x", "delta_score": np.nan, "delta_loss": drop_b}
        )
        data.single_layer[t] = pd.DataFrame(
            {
                "layer": layers,
                "task": "x",
                "delta_score": np.nan,
                "delta_loss": drop_b + gap,
            }
        )
    for name in base + treat:
        data.tokens_per_param[name] = 25.0
        data.distance_tokens[name] = "all tokens"
        if twins == "flat":
            data.initial[name] = _flat_twin()
        elif twins == "same":  # the untrained twin already has the trained model's effects
            drops = data.single_layer[name].set_index("layer")["delta_loss"]
            data.initial[name] = InitialStatistics(
                h_var=data.h_var[name],
                distance=data.distance[name],
                losses={
                    "full": 8.0 + data.val_loss[name],
                    **{f"single:{l}": 8.0 + data.val_loss[name] + d for l, d in drops.items()},
                },
            )
    return data


def _verdicts(data: RunData, column: str = "verdict") -> dict:
    table = build_claims(data)
    return dict(zip(table["claim_id"], table[column]))


@pytest.mark.parametrize(
    "claim",
    [
        "cod_variance_growth",
        "cod_lns_variance",
        "cod_angular_distance",
        "cod_delta_p",
        "cod_val_loss",
    ],
)
def test_cod_claims_give_each_verdict(claim):
    assert _verdicts(_cod_data("paper"))[claim] == REPRODUCED
    assert _verdicts(_cod_data("unlearned"))[claim] == NOT_TESTABLE
    assert _verdicts(_cod_data("paper", seeds=1))[claim] == INDICATIVE
    if claim != "cod_variance_growth":  # the opposite plants Pre-LN growth too
        assert _verdicts(_cod_data("opposite"))[claim] == NOT_REPRODUCED
        if claim != "cod_lns_variance":  # noisy flips the other effects from seed to seed
            assert _verdicts(_cod_data("noisy"))[claim] == NOT_TESTABLE
    else:
        flat = _cod_data("paper")
        for name in ("pre_ln_s0", "pre_ln_s1", "pre_ln_s2"):
            flat.h_var[name] = pd.Series(np.exp(-0.1 * np.arange(LAYERS + 1)))
        assert _verdicts(flat)[claim] == NOT_REPRODUCED
    if claim in ("cod_angular_distance", "cod_delta_p", "cod_val_loss"):
        assert _verdicts(_cod_data("null"))[claim] == NOT_REPRODUCED  # a precise null


@pytest.mark.parametrize("claim", ["cod_angular_distance", "cod_delta_p", "cod_val_loss"])
def test_a_training_claim_whose_twin_already_shows_it_unmoved_is_not_testable(claim):
    # every trained effect of the paper, and untrained twins that already have it
    row = build_claims(_cod_data("paper", twins="same")).set_index("claim_id").loc[claim]
    assert row["verdict"] == NOT_TESTABLE
    assert verdicts.INIT_SHOWS_IT in row["reason"]
    assert row["training_moved"] == "no"
    assert row["training_effect"] == pytest.approx(0.0, abs=1e-9)
    # the row's value is the trained model's
    flat = build_claims(_cod_data("paper")).set_index("claim_id").loc[claim]
    assert row["measured"] == pytest.approx(flat["measured"])
    assert abs(flat["measured"]) > 0.01
    # twins without the effect: the same trained tables reproduce, training moved it there
    assert flat["verdict"] == REPRODUCED and flat["training_moved"] == "towards the claim"
    # symmetric: twins that already show the opposite, unmoved, block the fail too
    opposite = build_claims(_cod_data("opposite", twins="same")).set_index("claim_id").loc[claim]
    assert opposite["verdict"] == NOT_TESTABLE
    assert verdicts.INIT_CONTRADICTS_IT in opposite["reason"]
    assert build_claims(_cod_data("opposite")).set_index("claim_id").loc[claim, "verdict"] == (
        NOT_REPRODUCED
    )


@pytest.mark.parametrize("claim", ["cod_variance_growth", "cod_lns_variance"])
def test_an_architecture_claim_is_decided_on_the_trained_model_whatever_its_twin(claim):
    row = build_claims(_cod_data("paper", twins="same")).set_index("claim_id").loc[claim]
    assert row["verdict"] == REPRODUCED and row["kind"] == "architecture"
    assert "a property of the architecture" in row["claim"]
    assert row["training_moved"] == "no"


def test_cod_rows_show_the_trained_value_and_trained_minus_untrained_beside_it():
    data = _cod_data("paper")
    for name in data.cod_pairs[0][1]:  # Pre-LN twins whose variance already grows by 0.05
        data.initial[name].h_var = pd.Series(np.exp(0.05 * np.arange(LAYERS + 1)))
    table = build_claims(data).set_index("claim_id")
    assert table.loc["cod_variance_growth", "measured"] == pytest.approx(0.2)
    assert table.loc["cod_variance_growth", "untrained"] == pytest.approx(0.05)
    assert table.loc["cod_variance_growth", "training_effect"] == pytest.approx(0.2 - 0.05)
    assert table.loc["cod_lns_variance", "measured"] == pytest.approx(0.18)
    assert table.loc["cod_lns_variance", "training_effect"] == pytest.approx(0.18 - 0.05)


def test_cod_val_loss_before_the_papers_budget_is_not_testable():
    data = _cod_data("paper")
    data.tokens_per_param = {m: 0.22 for m in data.tokens_per_param}
    row = build_claims(data).set_index("claim_id").loc["cod_val_loss"]
    assert row["verdict"] == NOT_TESTABLE and "tokens per non-embedding parameter" in row["reason"]
    assert row["size_verdict"] == NOT_TESTABLE  # a blocked row decides no size


def test_cod_angular_distance_on_the_last_token_is_not_testable():
    data = _cod_data("paper")
    data.distance_tokens = {m: "last token" for m in data.distance}
    row = build_claims(data).set_index("claim_id").loc["cod_angular_distance"]
    assert row["verdict"] == NOT_TESTABLE and "all_token_distance" in row["reason"]


def test_cod_delta_p_threshold_is_a_share_of_what_the_model_learned():
    data = _cod_data("paper")  # learned: unigram 6 - val loss 5.5 = 0.5 nats
    row = build_claims(data).set_index("claim_id").loc["cod_delta_p"]
    assert "(5% of the 0.499 nats the models learned below the unigram loss)" in row["claim"]
    # a 0.015-nat LNS effect: above 0.005 nats, below 5% of what the model learned
    for name in data.cod_pairs[0][3]:
        data.single_layer[name]["delta_loss"] -= 0.05 - 0.015
    assert build_claims(data).set_index("claim_id").loc["cod_delta_p", "verdict"] == (
        NOT_REPRODUCED
    )


def test_cod_val_loss_size_against_table_1():
    table = build_claims(_cod_data("paper", gain=0.05)).set_index("claim_id")
    assert table.loc["cod_val_loss", "measured"] == pytest.approx(0.05, abs=1e-9)
    assert table.loc["cod_val_loss", "seeds"] == 3
    assert table.loc["cod_val_loss", "size_verdict"] == verdicts.SIZE_REPRODUCED
    # the right sign, 0.5 nats: ten times Table 1's gains
    big = build_claims(_cod_data("paper", gain=0.5)).set_index("claim_id")
    assert big.loc["cod_val_loss", "verdict"] == REPRODUCED
    assert big.loc["cod_val_loss", "size_verdict"] == verdicts.SIZE_NOT_REPRODUCED
    assert _verdicts(_cod_data("paper", seeds=1), "size_verdict")["cod_val_loss"] == INDICATIVE
    assert table.loc["cod_variance_growth", "size_verdict"] == verdicts.NO_SIZE
    assert PAPER_VALUES["cod_lns_gain"].value == pytest.approx(
        tuple(
            math.log(p / q)
            for p, q in zip((26.73, 21.92, 19.58, 17.02), (25.76, 20.35, 18.20, 15.71))
        )
    )


def test_cod_angular_distance_reads_the_all_token_matrix(tmp_path):
    matrix = pd.DataFrame(np.arange(9.0).reshape(3, 3), columns=["0", "1", "2"])
    matrix.insert(0, "layer", [0, 1, 2])
    assert list(claims.next_layer_distance(matrix)) == [1.0, 5.0]
    data = _cod_data("paper")
    data.distance_tokens = {m: "all tokens" for m in data.distance}
    assert (
        "(all tokens)"
        in build_claims(data).set_index("claim_id").loc["cod_angular_distance", "claim"]
    )


def _sweep(
    gap_before: float, gap_after: float | None, noisy: bool = False, shift: float = 0.0
) -> pd.DataFrame:
    rows = []
    for n in range(1, LAYERS):
        gap = gap_before * ((-1) ** n if noisy else 1) + shift
        rows += [("angular", n, False, 5.0 + 0.1 * n), ("deepest", n, False, 5.0 + 0.1 * n + gap)]
        if gap_after is not None and n % 2 == 0:
            rows += [("angular", n, True, 5.0), ("deepest", n, True, 5.0 + gap_after + shift)]
    frame = pd.DataFrame(rows, columns=["strategy", "n", "healed", "val_loss"])
    return frame.assign(fraction=frame["n"] / LAYERS)


def test_gromov_block_choice_covers_the_papers_range_of_n():
    members = _seeded("m", 3)
    sweeps = {}
    for i, m in enumerate(members):
        sweep = _sweep(0.2, None, shift=0.01 * i)
        beyond = (sweep["n"] > LAYERS // 2) & (sweep["strategy"] == "deepest")
        sweep.loc[beyond, "val_loss"] -= 2.0  # past half the layers the deepest block wins
        sweeps[m] = sweep
    data = RunData(pruning_groups={"m": members}, trained=set(members), sweeps=sweeps)
    row = build_claims(data).set_index("claim_id").loc["gromov_block_choice:m"]
    assert row["verdict"] == REPRODUCED and row["measured"] == pytest.approx(0.21)
    assert f"n = 1..{LAYERS // 2} of {LAYERS} layers" in row["claim"]
    # untrained twins whose angular block already wins by as much: not testable
    for m in members:
        twin = _flat_twin()
        twin.losses.update(
            {f"angular:{n}": 5.0 for n in range(1, 5)} | {f"deepest:{n}": 5.21 for n in range(1, 5)}
        )
        data.initial[m] = twin
    row = build_claims(data).set_index("claim_id").loc["gromov_block_choice:m"]
    assert row["verdict"] == NOT_TESTABLE and verdicts.INIT_SHOWS_IT in row["reason"]


@pytest.mark.parametrize(
    "before, after, noisy, expected",
    [
        (0.2, 0.05, False, (REPRODUCED, REPRODUCED)),
        (-0.2, -0.4, False, (NOT_REPRODUCED, NOT_REPRODUCED)),
        (0.2, None, True, (NOT_TESTABLE, NOT_TESTABLE)),
    ],
)
def test_gromov_claims_give_each_verdict(before, after, noisy, expected):
    members = _seeded("m", 3)
    data = RunData(
        pruning_groups={"m": members},
        trained=set(members),
        sweeps={m: _sweep(before, after, noisy, shift=0.01 * i) for i, m in enumerate(members)},
    )
    verdicts = _verdicts(data)
    assert (verdicts["gromov_block_choice:m"], verdicts["gromov_healing_gap:m"]) == expected
    one = RunData(pruning_groups={"m": ["m"]}, trained={"m"}, sweeps={"m": _sweep(before, after)})
    assert _verdicts(one)["gromov_block_choice:m"] == INDICATIVE


def _map_errors(kind: str, noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """relative_error.csv of a 4-layer source onto a 4-layer target: "equal": error |t - s|
    (equal relative depth best); "middle": the middle target is best for every source (a
    depth-blind map); "flat": every target equally good."""
    rng = np.random.default_rng(seed)
    depths = np.linspace(0, 1, 5)
    rows = []
    for i, s in enumerate(depths):
        for j, t in enumerate(depths):
            error = {"equal": abs(t - s), "middle": abs(t - 0.5), "flat": 0.0}[kind]
            rows.append(("p", i, j, s, t, 0.1 + error + noise * rng.random(), 0.1))
    return pd.DataFrame(
        rows,
        columns=[
            "pair",
            "source_layer",
            "target_layer",
            "source_depth",
            "target_depth",
            "relative_error",
            "alpha",
        ],
    )


@pytest.mark.parametrize(
    "kind, learned, seeds, expected",
    [
        ("equal", True, 3, REPRODUCED),
        ("middle", True, 3, NOT_REPRODUCED),
        ("flat", True, 3, NOT_REPRODUCED),
        ("equal", False, 3, NOT_TESTABLE),
        ("equal", True, 1, INDICATIVE),
    ],
)
def test_linear_map_claim_gives_each_verdict(kind, learned, seeds, expected):
    pairs = _seeded("p", seeds)
    data = RunData(
        map_groups={"p": pairs},
        trained={"a", "b"},
        map_errors={p: _map_errors(kind, 0.002, i) for i, p in enumerate(pairs)},
        map_ends={p: ("a", "b", 4) for p in pairs},
        val_loss={"a": 5.0, "b": 5.0},
        unigram={"a": 6.0, "b": 6.0 if learned else 4.0},
    )
    assert _verdicts(data)["csordas_linear_maps:p"] == expected


def _problem_effects(
    easy_layer: int, hard_layer: int, noise: float = 0.3, levels=None, seed: int = 2
) -> pd.DataFrame:
    """Per level, the layer every problem leans on (effect 1 on it, 0.1 + noise elsewhere)."""
    rng = np.random.default_rng(seed)
    levels = levels or {1: easy_layer, 4: hard_layer}
    rows = []
    for level, layer in levels.items():
        for problem in range(40):
            effect = np.full(LAYERS, 0.1) + noise * rng.random(LAYERS)
            effect[layer] += 1.0
            rows += [
                (problem + 100 * level, "hops", level, skipped, effect[skipped])
                for skipped in range(LAYERS)
            ]
    return pd.DataFrame(rows, columns=["problem", "family", "level", "skipped", "output_effect"])


def _depth_data(
    levels: dict,
    seeds: int = 3,
    task_trained: bool = False,
    hard_accuracy: float = 0.9,
    noise: float = 0.05,
) -> RunData:
    members = _seeded("m", seeds)
    accuracy = pd.DataFrame(
        {
            "family": "hops",
            "level": sorted(levels),
            "accuracy": [1.0] * (len(levels) - 1) + [hard_accuracy],
            "problems": 40,
            "chance": 0.0625,
        }
    )
    return RunData(
        depth_groups={"m": members},
        trained=set(members),
        task_trained=set(members) if task_trained else set(),
        problem_effects={
            m: _problem_effects(0, 0, noise, levels, seed=i) for i, m in enumerate(members)
        },
        accuracy={m: accuracy for m in members},
        bootstrap={"resamples": 200, "seed": 0},
    )


FLAT = {1: 3, 2: 3, 3: 3, 4: 3}
RISE_AT_3 = {1: 3, 2: 3, 3: LAYERS - 1, 4: 3}  # only level 3 leans on a deeper layer
RISE = {1: 1, 2: 3, 3: 5, 4: LAYERS - 1}


@pytest.mark.parametrize(
    "levels, seeds, hard_accuracy, expected",
    [
        (FLAT, 3, 0.9, REPRODUCED),
        (RISE_AT_3, 3, 0.9, NOT_REPRODUCED),
        (RISE, 3, 0.9, NOT_REPRODUCED),
        (FLAT, 3, 0.06, NOT_TESTABLE),
        (FLAT, 1, 0.9, INDICATIVE),
    ],
)
def test_depth_score_pretrained_statement_gives_each_verdict(
    levels, seeds, hard_accuracy, expected
):
    table = build_claims(_depth_data(levels, seeds, hard_accuracy=hard_accuracy))
    row = table.set_index("claim_id").loc["csordas_depth_score:m:hops"]
    assert row["verdict"] == expected
    assert "pretrained-LLM statement" in row["claim"]
    if levels is RISE_AT_3 and seeds == 3:  # the ends agree; level 3 is the difference shown
        assert row["measured"] > claims.pv.CSORDAS_DEPTH_SCORE_MARGIN


def test_depth_score_wide_interval_is_not_testable():
    assert _verdicts(_depth_data(FLAT, noise=30.0))["csordas_depth_score:m:hops"] == NOT_TESTABLE


@pytest.mark.parametrize("levels, expected", [(RISE, REPRODUCED), (FLAT, NOT_REPRODUCED)])
def test_depth_score_from_scratch_model_tests_the_moeut_statement(levels, expected):
    table = build_claims(_depth_data(levels, task_trained=True)).set_index("claim_id")
    row = table.loc["csordas_depth_score:m:hops"]
    assert "from-scratch statement" in row["claim"]
    assert row["verdict"] == expected


def _fit(a_l: float, low: float, high: float, at_bounds=()) -> dict:
    return {
        "law": "decomposed",
        "estimates": {"a_l": a_l},
        "intervals": {"a_l": {"low": low, "high": high}},
        "parameters_at_bounds": list(at_bounds),
        "n_points_used": 200,
        "bootstrap": {"confidence": 0.95, "resamples": 100, "unit": "points"},
    }


@pytest.mark.parametrize(
    "fit, expected, size",
    [
        # consistent both ways (1.2 inside the interval, 1.3 inside the band); the size, the
        # whole interval inside the band, is not decided
        (_fit(1.3, 0.9, 1.7), REPRODUCED, verdicts.NOT_TESTABLE_DATA),
        # published points: "not testable on these data", never "at this scale"
        (_fit(1.6, 1.1, 2.1), verdicts.NOT_TESTABLE_DATA, verdicts.NOT_TESTABLE_DATA),
        (_fit(1.3, 1.0, 1.4), REPRODUCED, verdicts.SIZE_REPRODUCED),
        (_fit(2.5, 2.1, 2.9), NOT_REPRODUCED, verdicts.SIZE_NOT_REPRODUCED),
        (_fit(4.9, 3.0, 5.0), verdicts.NOT_TESTABLE_DATA, verdicts.NOT_TESTABLE_DATA),
        (_fit(1.3, 0.9, 1.7, ["a_m"]), verdicts.NOT_TESTABLE_DATA, verdicts.NOT_TESTABLE_DATA),
    ],
)
def test_scaling_exponent_claim_gives_each_verdict(fit, expected, size):
    assert PAPER_VALUES["liu_a_l"].value == 1.2
    assert "liu_a_D" not in PAPER_VALUES  # not stated in Liu et al.'s text
    data = RunData(fits={"chin": (fit, (0.0, 5.0))})
    assert _verdicts(data)["liu_a_l:chin"] == expected
    assert _verdicts(data, "size_verdict")["liu_a_l:chin"] == size
    assert "[0.9, 1.5] (the paper's stated ± 0.3)" in build_claims(data)["claim"].iloc[0]


@pytest.mark.parametrize(
    "seeds, unit, expected",
    [
        (1, "points", INDICATIVE),  # one seed of the sweep: never decisive (was "reproduced")
        (2, "architectures", INDICATIVE),
        (3, "points", NOT_TESTABLE),  # points of one training curve are not independent
        (3, "architectures", REPRODUCED),
    ],
)
def test_a_sweep_fit_of_models_trained_here_goes_through_the_seed_gate(seeds, unit, expected):
    fit = _fit(1.2, 1.0, 1.4)
    fit["bootstrap"]["unit"] = unit
    data = RunData(fits={"sweep": (fit, (0.0, 5.0))}, fit_seeds={"sweep": seeds})
    row = build_claims(data).set_index("claim_id").loc["liu_a_l:sweep"]
    assert (row["verdict"], row["seeds"]) == (expected, seeds)
    if expected == INDICATIVE:  # the row still says what this run's interval shows
        assert "inside the band" in row["reason"]
    # the same fit of published points decides on its own interval
    published = RunData(fits={"chin": (fit, (0.0, 5.0))})
    assert _verdicts(published)["liu_a_l:chin"] == REPRODUCED


def test_config_marks_the_sweep_fit_as_trained_here_with_its_seeds():
    config = load_config(ROOT / "config" / "default.yaml")
    fits = resolve(config).jobs("make_claims")["claims"]["fits"]
    assert fits["sweep"]["trained_here"] and fits["sweep"]["seeds"] == 1
    assert "trained_here" not in fits["chinchilla_liu"]
    config["sweeps"]["depth_width"]["seeds"] = [0, 1, 2]
    assert resolve(config).jobs("make_claims")["claims"]["fits"]["sweep"]["seeds"] == 3


def _toy_fit(
    tied: list[float], indep: list[float], se: float = 0.05, protocol: str = "converged"
) -> dict:
    def row(kind, values):
        return {
            "teacher_kind": kind,
            "temperature": 1.0,
            "a": float(np.mean(values)),
            "a_se": se,
            "replicates": [
                {"replicate": i, "a": a, "a_se": se, "teacher_seed": 100 * i}
                for i, a in enumerate(values)
            ],
        }

    return {
        "form": "power",
        "protocol": {"name": protocol},
        "fits": [row("independent", indep), row("tied", tied)],
        "losses": [],
    }


@pytest.mark.parametrize(
    "tied, indep, expected, size",
    [
        ([3.0, 3.1, 2.9], [1.0, 1.05, 0.95], REPRODUCED, verdicts.SIZE_REPRODUCED),
        (
            [1.45, 1.5, 1.4],
            [1.0, 1.02, 0.98],
            REPRODUCED,
            verdicts.SIZE_NOT_REPRODUCED,
        ),  # sign only
        ([0.5, 0.55, 0.45], [1.0, 1.05, 0.95], NOT_REPRODUCED, verdicts.SIZE_NOT_REPRODUCED),
        ([3.0, 0.2, 1.5], [1.0, 1.0, 1.0], NOT_TESTABLE, NOT_TESTABLE),
        ([3.0], [1.0], INDICATIVE, INDICATIVE),
    ],
)
def test_toy_claim_uses_its_replicates(tied, indep, expected, size):
    table = build_claims(RunData(toy_fit=_toy_fit(tied, indep))).set_index("claim_id")
    row = table.loc["liu_toy_tied_exceeds:T=1"]
    gaps = np.subtract(tied, indep)
    assert row["measured"] == pytest.approx(gaps.mean())
    if len(gaps) >= 3:  # a t-interval over replicates with n - 1 df
        low, high = stats.t.interval(0.95, len(gaps) - 1, loc=gaps.mean(), scale=stats.sem(gaps))
        assert (row["low"], row["high"]) == pytest.approx((low, high))
        assert row["seeds"] == len(gaps)
    assert (row["verdict"], row["size_verdict"]) == (expected, size)


@pytest.mark.parametrize(
    "tied, indep, expected",
    [
        ([1.1, 1.05, 1.12], [1.0, 1.02, 0.98], REPRODUCED),  # close, as the paper says
        ([3.0, 3.1, 2.9], [1.0, 1.05, 0.95], NOT_REPRODUCED),  # the converged gap, too early
        ([3.0, 0.2, 1.5], [1.0, 1.0, 1.0], NOT_TESTABLE),
    ],
)
def test_an_unconverged_toy_is_tested_for_no_gap(tied, indep, expected):
    fit = _toy_fit(tied, indep, protocol="embedding")
    table = build_claims(RunData(toy_fit=fit)).set_index("claim_id")
    assert "liu_toy_tied_exceeds:T=1" not in table.index
    row = table.loc["liu_toy_unconverged_no_gap:T=1"]
    assert (row["verdict"], row["size_verdict"]) == (expected, verdicts.NO_SIZE)


def test_toy_gap_of_one_replicate_uses_the_t_quantile_of_its_fits():
    fit = _toy_fit([3.0], [1.0], se=0.1)
    fit["losses"] = [{"student_depth": d} for d in (2, 4, 8, 16)]  # 4 depths - 2 parameters
    row = build_claims(RunData(toy_fit=fit)).set_index("claim_id").loc["liu_toy_tied_exceeds:T=1"]
    half = stats.t.ppf(0.975, 2) * math.hypot(0.1, 0.1)
    assert (row["low"], row["high"]) == pytest.approx((2.0 - half, 2.0 + half))
    assert "t (2 df)" in row["interval"]


def test_a_decidable_size_is_shown_when_the_direction_is_not():
    # lad_layer_swaps: the margin straddles 0 (direction undecided) while the middle swaps'
    # kept accuracy lies wholly above the paper's 72-95%
    e = Estimate(0.999, 0.9968, 1.002)
    reason = verdicts.verdict_positive(Estimate(0.18, -0.22, 0.59))[1]
    assert verdicts.TOO_WIDE in reason
    assert verdicts.verdict_size(e, (0.72, 0.95), NOT_TESTABLE, reason) == (
        verdicts.SIZE_NOT_REPRODUCED
    )
    # a blocked row (a model that did not learn) decides no size
    assert verdicts.verdict_size(e, (0.72, 0.95), NOT_TESTABLE, "did not learn") == NOT_TESTABLE


def test_markdown_shows_every_claim_with_its_interval_and_verdict():
    data = _cod_data("paper")
    data.pruning_groups, data.sweeps = {"m": ["m"]}, {"m": _sweep(0.2, 0.05)}
    table = build_claims(data)
    text = claims.render_markdown(table, "Claims")
    for row in table.itertuples():
        assert f"`{row.claim_id}`" in text and f"**{row.verdict}**" in text
    # claims such as |gap before| keep their pipes escaped: every row has the header's columns
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len({len(re.findall(r"(?<!\\)\|", line)) for line in rows}) == 1
    assert len(rows) == len(table) + 2


def _planted_table(measured=0.2, low=0.1, high=0.3, verdict=REPRODUCED, extra=None):
    rows = [
        {
            "claim_id": "cod_val_loss",
            "measured": measured,
            "low": low,
            "high": high,
            "verdict": verdict,
            "size_verdict": verdicts.SIZE_REPRODUCED,
        },
        {
            "claim_id": "liu_a_l:chin",
            "measured": 1.3,
            "low": 1.0,
            "high": 1.6,
            "verdict": REPRODUCED,
            "size_verdict": NOT_TESTABLE,
        },
    ]
    return pd.DataFrame(rows + ([extra] if extra else []))


def test_compare_claims_lists_changed_verdicts_and_moved_values(tmp_path):
    same = claims.compare_claims(_planted_table(), _planted_table(measured=0.25))
    assert same.empty and not claims.verdicts_changed(same)
    b = _planted_table(
        measured=0.05,
        low=-0.05,
        high=0.15,
        verdict=NOT_TESTABLE,
        extra={
            "claim_id": "new",
            "measured": 1.0,
            "low": math.nan,
            "high": math.nan,
            "verdict": INDICATIVE,
            "size_verdict": "x",
        },
    )
    found = claims.compare_claims(_planted_table(), b)
    assert set(zip(found["claim_id"], found["kind"])) == {
        ("cod_val_loss", "verdict changed"),
        ("cod_val_loss", "value moved"),
        ("new", "only in B"),
    }
    assert claims.verdicts_changed(found)
    text = claims.render_comparison(found, "A", "B")
    assert "1 verdict(s) changed, 1 value(s) moved" in text
    # the command: two result folders, exit status 1 when a verdict changed
    for name, table in (("a", _planted_table()), ("b", b)):
        (tmp_path / name).mkdir()
        table.to_csv(tmp_path / name / "claims.csv", index=False)
    script = ROOT / "workflow_scripts" / "compare_claims.py"
    changed = subprocess.run(
        [sys.executable, script, tmp_path / "a", tmp_path / "b"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert changed.returncode == 1, changed.stderr
    assert "verdict changed       cod_val_loss: reproduced -> not testable" in changed.stdout
    stable = subprocess.run(
        [sys.executable, script, tmp_path / "a", tmp_path / "a/claims.csv"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert stable.returncode == 0 and "0 verdict(s) changed" in stable.stdout


# ---------------------------------------------------------------------------------------------
# Config and rule


def test_config_pairs_pre_ln_with_lns_of_the_same_architecture_only():
    config = load_config(ROOT / "config" / "default.yaml")
    config["models"]["lns_wide"] = {
        **config["models"]["lns"],
        "architecture": {**config["models"]["lns"]["architecture"], "hidden_size": 256},
    }
    spec = resolve(config).jobs("make_claims")["claims"]
    pre_ln, lns = ([f"{base}_s{seed}" for seed in range(3)] for base in ("pre_ln", "lns"))
    assert spec["cod_pairs"] == [["pre_ln", pre_ln, "lns", lns]]  # lns_wide: another shape
    assert set(spec["pruning"]) == {*pre_ln, *lns, "smollm2"}
    # the seeded problem model: its seeds scored one by one, decided as one group
    seeds = [f"depth_problems_s{seed}" for seed in range(3)]
    assert set(spec["depth_score"]) == {*seeds, "smollm2"}
    assert spec["depth_groups"] == {"depth_problems": seeds, "smollm2": ["smollm2"]}


def test_claims_rule_plans_after_the_stages_it_reads():
    result = subprocess.run(
        [SNAKEMAKE, "--configfile=config/test.yaml", "-n", "claims", "--forceall"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=local_env(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rule make_claims:" in result.stdout
    for stage_rule in ("prune_model", "fit_scaling", "analyse_model"):
        assert f"rule {stage_rule}:" in result.stdout


def _measures_frame(layers: int, var_slope: float, contribution, rng) -> pd.DataFrame:
    """A measures.csv frame: h_var growing as exp(var_slope * l) (times noise) and block_rel_norm
    per layer."""
    rows = [
        ("h_var", l, np.nan, math.exp(var_slope * l) * rng.uniform(0.999, 1.001))
        for l in range(layers + 1)
    ]
    rows += [("block_rel_norm", l, np.nan, contribution[l]) for l in range(layers)]
    return pd.DataFrame(rows, columns=["measure", "layer", "n", "value"])


def _pretrained_data(var_slope: float, deep_contribution: float, shards: int) -> RunData:
    rng = np.random.default_rng(0)
    layers = 8
    replicates = []
    for _ in range(shards):
        contribution = [0.5] * 4 + [deep_contribution] * 4 + rng.normal(0, 0.01, layers)
        contribution[0] = 20.0  # the embedding's small norm: excluded, it would decide alone
        distance = pd.Series(np.r_[[0.3] * 4, [0.1] * 4] + rng.normal(0, 0.005, layers))
        replicates.append(
            (_measures_frame(layers, var_slope, contribution, rng), distance, "all tokens")
        )
    data = RunData(pretrained={"real": replicates}, pretrained_scale={"real": "real (8 layers)"})
    data.single_layer["real"] = pd.DataFrame(
        {"layer": range(layers), "delta_loss": [1.0, 0.5, 0.4, 0.3, 0.05, 0.04, 0.06, 0.5]}
    )
    return data


def test_pretrained_claims_use_shards_as_replicates():
    data = _pretrained_data(var_slope=0.3, deep_contribution=0.1, shards=4)
    table = build_claims(data).set_index("claim_id")
    row = table.loc["cod_variance_growth:real"]
    # independent: the OLS slope of ln h_var over l >= 1 per shard, then a t-interval over shards
    slopes = []
    for frame, _, _ in data.pretrained["real"]:
        v = frame[(frame["measure"] == "h_var") & (frame["layer"] >= 1)]
        slopes.append(stats.linregress(v["layer"], np.log(v["value"])).slope)
    half = stats.t.ppf(0.975, 3) * np.std(slopes, ddof=1) / 2
    assert row["measured"] == pytest.approx(np.mean(slopes))
    assert row["high"] - row["low"] == pytest.approx(2 * half)
    assert "4 document shards" in row["interval"]
    assert row["verdict"] == REPRODUCED
    closer = table.loc["cod_deep_identity:real"]
    assert closer["measured"] == pytest.approx(
        np.mean([d[:4].mean() - d[4:].mean() for _, d, _ in data.pretrained["real"]])
    )
    assert closer["verdict"] == REPRODUCED
    assert table.loc["csordas_second_half:real", "measured"] == pytest.approx(0.4, abs=0.02)
    assert table.loc["csordas_second_half:real", "verdict"] == REPRODUCED
    # delta P: shallow mean 0.55 - deep mean 0.1625; without window losses there is no
    # sampling variance to decide on (the layers of each half are no samples): not testable
    # (was decided on an interval over the layers)
    delta = table.loc["cod_delta_p_depth:real"]
    assert delta["measured"] == pytest.approx(0.55 - 0.1625)
    assert not math.isfinite(delta["low"]) and delta["verdict"] == NOT_TESTABLE
    assert "window_losses.csv" in delta["interval"]


def test_pretrained_claims_not_reproduced_and_flat():
    # no variance growth, a second half that contributes as much as the first
    table = build_claims(_pretrained_data(0.0, 0.5, shards=4)).set_index("claim_id")
    assert table.loc["cod_variance_growth:real", "verdict"] == NOT_REPRODUCED
    assert table.loc["csordas_second_half:real", "verdict"] == NOT_REPRODUCED
    # one shard: no interval, so nothing is decided
    one = build_claims(_pretrained_data(0.3, 0.1, shards=1)).set_index("claim_id")
    assert one.loc["cod_variance_growth:real", "verdict"] == NOT_TESTABLE


def test_config_reads_pretrained_models_over_their_shards(tmp_path):
    config = load_config(ROOT / "config" / "default.yaml")
    config["analysis"]["text_sets"] = {
        "val": {"source": "val"},
        **{
            f"val_{i}": {"source": "val", "shard": {"index": i, "count": 3}, "logit_lens": False}
            for i in range(3)
        },
    }
    config["models"]["llm"] = {"kind": "hf", "path": "some-org/some-llm"}
    config["analysis"]["models"] = None  # every declared model, llm among them
    config.pop("lens_swaps")  # it names the default's four shards
    resolved = resolve(config)
    spec = resolved.jobs("make_claims")["claims"]
    # the shards' passes skip the logit lens (a per-text-set setting); the full set keeps it
    analyses = resolved.jobs("analyse_model")
    assert analyses["val_1/llm"]["texts"]["shard"] == [1, 3]
    assert not analyses["val_1/llm"]["logit_lens"] and analyses["val/llm"]["logit_lens"]
    # the MiniLM encoder has no LM head: not a pretrained LM the papers speak of; the default
    # suite's SmolLM2 and Gemma-3 are
    assert set(spec["pretrained"]) == {"llm", "smollm2", "gemma3"}
    for name in ("llm", "smollm2", "gemma3"):
        assert spec["pretrained"][name]["analysis"] == [
            f"results/default/analysis/val_{i}/{name}" for i in range(3)
        ]
    bad = load_config(ROOT / "config" / "default.yaml")
    bad["analysis"]["text_sets"]["val_9"] = {"source": "val", "shard": {"index": 3, "count": 3}}
    with pytest.raises(Exception, match=r"analysis\.text_sets\.val_9\.shard\.index: 3"):
        resolve(bad)


def _window_losses(windows: int, deltas: dict, noise: float, seed: int = 0) -> pd.DataFrame:
    """window_losses.csv rows: the full model's loss varies a lot between windows (documents
    differ); each set adds its own delta plus a little noise, window by window."""
    rng = np.random.default_rng(seed)
    base = rng.normal(3.0, 1.0, windows)
    rows = [("", "full", 0, False, w, base[w]) for w in range(windows)]
    for (strategy, n, removed, *healed), delta in deltas.items():
        loss = base + delta + rng.normal(0, noise, windows)
        rows += [(removed, strategy, n, bool(healed), w, loss[w]) for w in range(windows)]
    return pd.DataFrame(rows, columns=["removed", "strategy", "n", "healed", "window", "loss"])


def test_window_bootstrap_pairs_sets_window_by_window():
    deltas = {("single", 1, str(l)): d for l, d in enumerate([1.0, 0.6, 0.1, 0.05])}
    windows = _window_losses(200, deltas, noise=0.01)
    e = claims.window_bootstrap(windows, claims.delta_p_half_gap, 500, 0)
    # independent: per layer, mean over windows of (single - full), then shallow - deep half
    pivot = windows.pivot_table(index="window", columns=["strategy", "removed"], values="loss")
    increase = [(pivot[("single", str(l))] - pivot[("full", "")]).mean() for l in range(4)]
    assert e.value == pytest.approx(np.mean(increase[:2]) - np.mean(increase[2:]))
    # paired: the windows' large common spread (sd 1) cancels; only the 0.01 noise remains
    assert e.low < e.value < e.high and e.high - e.low < 0.01
    assert "200 validation windows" in e.method


def test_pretrained_block_choice_and_delta_p_read_the_window_losses():
    deltas = {("single", 1, str(l)): d for l, d in enumerate([1.0, 0.6, 0.1, 0.05])}
    deltas.update({("angular", 2, "2-3"): 0.2, ("deepest", 2, "1-2"): 0.5})
    deltas.update({("angular", 2, "2-3", True): 0.1, ("deepest", 2, "1-2", True): 0.15})
    windows = _window_losses(100, deltas, noise=0.05)
    data = _pretrained_data(0.3, 0.1, shards=4)
    data.window_losses["real"] = windows
    data.single_layer["real"] = (
        windows[windows["strategy"] == "single"]
        .groupby("removed")["loss"]
        .mean()
        .sub(windows[windows["strategy"] == "full"]["loss"].mean())
        .rename("delta_loss")
        .rename_axis("layer")
        .reset_index()
        .astype({"layer": int})
    )
    data.pruning_groups = {"real": ["real"]}
    data.sweeps["real"] = _sweep(0.3, None)
    table = build_claims(data).set_index("claim_id")
    assert "validation windows" in table.loc["cod_delta_p_depth:real", "interval"]
    assert table.loc["cod_delta_p_depth:real", "verdict"] == REPRODUCED
    # lm-eval scored the removals too: the windows still decide, not the layers of the task
    # score drop (whose half means here point the other way and are no samples)
    data.single_layer["real"]["delta_score"] = np.r_[[0.0] * 4, [-1.0] * 4][
        data.single_layer["real"]["layer"]
    ]
    data.single_layer["real"]["task"] = "t"
    lm_eval = build_claims(data).set_index("claim_id").loc["cod_delta_p_depth:real"]
    assert "validation windows" in lm_eval["interval"] and "val loss increase" in lm_eval["claim"]
    assert lm_eval["measured"] == pytest.approx(table.loc["cod_delta_p_depth:real", "measured"])
    block = table.loc["gromov_block_choice:real"]
    assert "validation windows" in block["interval"]
    assert block["measured"] == pytest.approx(0.3, abs=0.03)
    assert block["verdict"] == REPRODUCED
    # healing: |gap before| - |gap after| from the same windows, by hand
    gap = table.loc["gromov_healing_gap:real"]
    means = windows.groupby(["strategy", "n", "healed"])["loss"].mean()
    by_hand = abs(means[("deepest", 2, False)] - means[("angular", 2, False)]) - abs(
        means[("deepest", 2, True)] - means[("angular", 2, True)]
    )
    assert gap["measured"] == pytest.approx(by_hand)
    # a healed model is trained here: one healing run is indicative, whatever the windows say
    assert "validation windows" in gap["interval"] and gap["verdict"] == INDICATIVE
    assert "healing trains the model here" in gap["reason"] and REPRODUCED in gap["reason"]


def test_cod_delta_p_where_no_layer_costs_the_threshold_is_not_testable():
    data = _cod_data("paper")  # threshold: 5% of 0.5 nats learned = 0.025
    for name in data.single_layer:
        data.single_layer[name]["delta_loss"] *= 0.1  # deep layers cost 0.01-0.015 nats
    row = build_claims(data).set_index("claim_id").loc["cod_delta_p"]
    assert row["verdict"] == NOT_TESTABLE and "not shown to reach the threshold" in row["reason"]


def test_gromov_block_choice_where_removals_cost_nothing_is_not_testable():
    members = _seeded("m", 3)
    sweeps = {}
    for i, m in enumerate(members):
        sweep = _sweep(0.002, None, shift=0.0001 * i)
        sweep["val_loss"] = 5.0 + (sweep["val_loss"] - 5.0) * 0.01  # removals cost < 0.01 nats
        sweeps[m] = pd.concat(
            [sweep, pd.DataFrame([("angular", 0, False, 5.0, 0.0)], columns=sweep.columns)]
        )
    data = RunData(pruning_groups={"m": members}, trained=set(members), sweeps=sweeps)
    data.val_loss = {m: 5.0 for m in members}
    data.unigram = {m: 6.0 for m in members}  # learned 1 nat: threshold 0.05
    row = build_claims(data).set_index("claim_id").loc["gromov_block_choice:m"]
    assert row["verdict"] == NOT_TESTABLE and "not shown to reach the threshold" in row["reason"]
