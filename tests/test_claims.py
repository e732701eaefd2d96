"""The claims table: intervals against independent formulas, the verdict rules, every claim
giving each verdict on planted tables, and the rule in a dry run."""

import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from depthlab import claims
from depthlab.claims import (NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Estimate, RunData,
                             build_claims)
from depthlab.config import load_config, resolve
from depthlab.paper_values import PAPER_VALUES
from local_snakemake import SNAKEMAKE, local_env

ROOT = Path(__file__).resolve().parents[1]
LAYERS = 8


# ---------------------------------------------------------------------------------------------
# Intervals and measurements


def test_over_seeds_uses_t_interval_from_three_seeds_and_min_max_for_two():
    values = [1.0, 1.5, 3.0]
    low, high = stats.t.interval(0.95, 2, loc=np.mean(values), scale=stats.sem(values))
    e = claims.over_seeds([Estimate(v) for v in values])
    assert (e.value, e.low, e.high, e.n) == pytest.approx((np.mean(values), low, high, 3))
    two = claims.over_seeds([Estimate(2.0), Estimate(-1.0)])
    assert (two.value, two.low, two.high) == (0.5, -1.0, 2.0)
    own = Estimate(1.0, 0.5, 1.5, "bootstrap")
    assert claims.over_seeds([own]) is own


def test_log_variance_slope_matches_a_planted_exponential_and_skips_the_embedding():
    rng = np.random.default_rng(0)
    layers = np.arange(1, LAYERS + 1)
    log_var = 0.3 * layers + 2 + rng.normal(0, 0.05, layers.size)
    h_var = pd.Series([1e-6, *np.exp(log_var)], index=[0, *layers])
    e = claims.log_variance_slope(h_var)
    fit = stats.linregress(layers, log_var)
    half = stats.t.ppf(0.975, layers.size - 2) * fit.stderr
    assert (e.value, e.low, e.high) == pytest.approx((fit.slope, fit.slope - half,
                                                      fit.slope + half))
    assert e.low < 0.3 < e.high


def test_unigram_entropy_and_final_val_loss():
    tokens = [0, 0, 1, 2]
    assert claims.unigram_entropy(tokens) == pytest.approx(-(0.5 * math.log(0.5)
                                                             + 2 * 0.25 * math.log(0.25)))
    log = pd.DataFrame({"tokens": [10, 20, 30, 20], "split": ["val", "val", "train", "train"],
                        "loss": [5.0, 4.0, 3.0, 3.5]})
    assert claims.final_val_loss(log) == 4.0


def test_depth_score_rise_of_planted_effects_is_exact():
    # every problem: effect 0.1 on each layer plus 1 on layer 0 (easy) or the last (hard)
    effects = _problem_effects(easy_layer=0, hard_layer=LAYERS - 1, noise=0.0)
    e = claims.depth_score_rise(effects, "hops", resamples=50, seed=0)
    total = 0.1 * LAYERS + 1.0
    spread = 0.1 * sum(range(LAYERS))
    expected = (spread + (LAYERS - 1)) / total - spread / total
    assert (e.value, e.low, e.high) == pytest.approx((expected,) * 3)


def test_linear_map_advantage_at_equal_depth_is_the_depth_blind_distance():
    best = pd.DataFrame({"source_depth": [0.0, 0.5, 1.0], "best_target_depth": [0.0, 0.5, 1.0]})
    e = claims.linear_map_advantage(best, target_layers=4)
    targets = np.linspace(0, 1, 5)
    expected = np.mean([np.abs(targets - s).mean() for s in (0.0, 0.5, 1.0)])
    assert e.value == pytest.approx(expected)


def test_fit_parameter_flags_an_interval_touching_a_bound():
    fit = _fit(1.3, 0.9, 1.7)
    assert claims.fit_parameter(fit, "a_l", (0.0, 5.0))[1] is False
    assert claims.fit_parameter(_fit(1.3, 1e-12, 1.7), "a_l", (0.0, 5.0))[1] is True
    assert claims.fit_parameter(_fit(5.0, 0.9, 5.0), "a_l", (0.0, 5.0))[1] is True


# ---------------------------------------------------------------------------------------------
# Verdict rules


@pytest.mark.parametrize("estimate, blockers, expected", [
    (Estimate(1.0, 0.5, 1.5), [], REPRODUCED),
    (Estimate(-1.0, -1.5, -0.5), [], NOT_REPRODUCED),
    (Estimate(1.0, -0.5, 2.5), [], NOT_TESTABLE),
    (Estimate(1.0), [], NOT_TESTABLE),
    (Estimate(1.0, 0.5, 1.5), ["did not learn"], NOT_TESTABLE),
])
def test_verdict_positive(estimate, blockers, expected):
    assert claims.verdict_positive(estimate, blockers)[0] == expected


@pytest.mark.parametrize("estimate, blockers, expected", [
    (Estimate(0.1, -0.2, 0.4), [], REPRODUCED),
    (Estimate(-1.0, -1.5, -0.5), [], REPRODUCED),
    (Estimate(1.0, 0.5, 1.5), [], NOT_REPRODUCED),
    (Estimate(0.1, -0.2, 0.4), ["at chance"], NOT_TESTABLE),
])
def test_verdict_no_rise(estimate, blockers, expected):
    assert claims.verdict_no_rise(estimate, blockers)[0] == expected


@pytest.mark.parametrize("estimate, blockers, expected", [
    (Estimate(1.3, 1.0, 1.8), [], REPRODUCED),
    (Estimate(2.3, 2.0, 2.8), [], NOT_REPRODUCED),
    (Estimate(1.3, 1.0, 1.8), ["at bound"], NOT_TESTABLE),
])
def test_verdict_value(estimate, blockers, expected):
    assert claims.verdict_value(estimate, 1.2, blockers)[0] == expected


# ---------------------------------------------------------------------------------------------
# Every claim, each verdict, on planted tables


def _seeded(base: str, seeds: int) -> list[str]:
    return [f"{base}_s{s}" for s in range(seeds)] if seeds > 1 else [base]


def _cod_data(effect: str, seeds: int = 1) -> RunData:
    """Pre-LN vs LNS where LNS has (effect = "paper") or lacks ("opposite") every CoD effect;
    "unlearned": the paper's effects on a model no better than unigram; "noisy": effects whose
    sign flips from layer to layer."""
    rng = np.random.default_rng(1)
    base, treat = _seeded("pre_ln", seeds), _seeded("lns", seeds)
    data = RunData(cod_pairs=[("pre_ln", base, "lns", treat)])
    sign = {"paper": 1.0, "unlearned": 1.0, "opposite": -1.0, "noisy": 1.0}[effect]
    layers = np.arange(LAYERS)
    for i, (b, t) in enumerate(zip(base, treat)):
        jitter = rng.normal(0, 0.01)
        data.val_loss[b], data.val_loss[t] = 5.5 + jitter, 5.5 + jitter - 0.2 * sign
        for name in (b, t):
            data.unigram[name] = 5.0 if effect == "unlearned" else 6.5
            data.scale[name] = "8 layers x 32, 1k tokens"
        states = np.arange(LAYERS + 1)
        data.h_var[b] = pd.Series(np.exp((0.2 if sign > 0 else 0.02) * states), index=states)
        data.h_var[t] = pd.Series(np.exp((0.02 if sign > 0 else 0.2) * states), index=states)
        gap = (0.05 * (-1.0) ** layers) if effect == "noisy" else np.full(LAYERS, 0.05 * sign)
        data.distance[b] = pd.Series(0.1 + rng.normal(0, 1e-3, LAYERS), index=layers)
        data.distance[t] = data.distance[b] + gap
        drop_b = 0.1 + rng.normal(0, 1e-3, LAYERS)
        data.single_layer[b] = pd.DataFrame({"layer": layers, "task": "x",
                                             "delta_score": -drop_b, "delta_loss": drop_b})
        data.single_layer[t] = pd.DataFrame({"layer": layers, "task": "x",
                                             "delta_score": -(drop_b + gap),
                                             "delta_loss": drop_b + gap})
    return data


def _verdicts(data: RunData) -> dict:
    table = build_claims(data)
    return dict(zip(table["claim_id"], table["verdict"]))


@pytest.mark.parametrize("claim", ["cod_variance_growth", "cod_lns_variance",
                                   "cod_angular_distance", "cod_delta_p"])
def test_cod_claims_give_each_verdict(claim):
    assert _verdicts(_cod_data("paper"))[claim] == REPRODUCED
    assert _verdicts(_cod_data("unlearned"))[claim] == NOT_TESTABLE
    if claim != "cod_variance_growth":  # the opposite plants Pre-LN growth too
        assert _verdicts(_cod_data("opposite"))[claim] == NOT_REPRODUCED
    else:
        flat = _cod_data("paper")
        flat.h_var["pre_ln"] = pd.Series(np.exp(-0.1 * np.arange(LAYERS + 1)))
        assert _verdicts(flat)[claim] == NOT_REPRODUCED
    if claim in ("cod_angular_distance", "cod_delta_p"):
        assert _verdicts(_cod_data("noisy"))[claim] == NOT_TESTABLE


def test_cod_val_loss_needs_seeds_for_a_verdict():
    assert _verdicts(_cod_data("paper", seeds=1))["cod_val_loss"] == NOT_TESTABLE
    assert _verdicts(_cod_data("paper", seeds=3))["cod_val_loss"] == REPRODUCED
    assert _verdicts(_cod_data("opposite", seeds=3))["cod_val_loss"] == NOT_REPRODUCED
    table = build_claims(_cod_data("paper", seeds=3)).set_index("claim_id")
    assert table.loc["cod_val_loss", "measured"] == pytest.approx(0.2)
    assert "3 seeds" in table.loc["cod_val_loss", "scale"]


def _sweep(gap_before: float, gap_after: float | None, noisy: bool = False) -> pd.DataFrame:
    rows = []
    for n in range(1, LAYERS):
        gap = gap_before * ((-1) ** n if noisy else 1)
        rows += [("angular", n, False, 5.0 + 0.1 * n), ("deepest", n, False, 5.0 + 0.1 * n + gap)]
        if gap_after is not None and n % 2 == 0:
            rows += [("angular", n, True, 5.0), ("deepest", n, True, 5.0 + gap_after)]
    return pd.DataFrame(rows, columns=["strategy", "n", "healed", "val_loss"])


@pytest.mark.parametrize("before, after, noisy, expected", [
    (0.2, 0.05, False, (REPRODUCED, REPRODUCED)),
    (-0.2, -0.4, False, (NOT_REPRODUCED, NOT_REPRODUCED)),
    (0.2, None, True, (NOT_TESTABLE, NOT_TESTABLE)),
])
def test_gromov_claims_give_each_verdict(before, after, noisy, expected):
    data = RunData(pruning_groups={"m": ["m"]}, sweeps={"m": _sweep(before, after, noisy)})
    if after is not None:  # the healed gap varies with n, so its interval has a width
        healed = data.sweeps["m"]["healed"] & (data.sweeps["m"]["strategy"] == "deepest")
        data.sweeps["m"].loc[healed, "val_loss"] += np.linspace(0, 0.01, healed.sum())
    verdicts = _verdicts(data)
    assert (verdicts["gromov_block_choice:m"], verdicts["gromov_healing_gap:m"]) == expected


def _best_targets(equal: bool) -> pd.DataFrame:
    sources = np.linspace(0, 1, 5)
    best = sources if equal else np.where(sources < 0.5, 1.0, 0.0)
    return pd.DataFrame({"source_depth": sources, "best_target_depth": best})


@pytest.mark.parametrize("equal, learned, expected", [
    (True, True, REPRODUCED), (False, True, NOT_REPRODUCED), (True, False, NOT_TESTABLE)])
def test_linear_map_claim_gives_each_verdict(equal, learned, expected):
    data = RunData(map_groups={"p": ["p"]}, best_target={"p": _best_targets(equal)},
                   map_ends={"p": ("a", "b", 16)}, val_loss={"a": 5.0, "b": 5.0},
                   unigram={"a": 6.0, "b": 6.0 if learned else 4.0})
    if equal:  # a little spread so the interval has a width
        data.best_target["p"]["best_target_depth"] += [0, 0.0625, 0, -0.0625, 0]
    assert _verdicts(data)["csordas_linear_maps:p"] == expected


def _problem_effects(easy_layer: int, hard_layer: int, noise: float = 0.3) -> pd.DataFrame:
    rng = np.random.default_rng(2)
    rows = []
    for level, layer in ((1, easy_layer), (4, hard_layer)):
        for problem in range(40):
            effect = np.full(LAYERS, 0.1) + noise * rng.random(LAYERS)
            effect[layer] += 1.0
            rows += [(problem + 100 * level, "hops", level, skipped, effect[skipped])
                     for skipped in range(LAYERS)]
    return pd.DataFrame(rows, columns=["problem", "family", "level", "skipped",
                                       "output_effect"])


@pytest.mark.parametrize("hard_layer, hard_accuracy, expected", [
    (2, 0.9, REPRODUCED), (LAYERS - 1, 0.9, NOT_REPRODUCED), (2, 0.06, NOT_TESTABLE)])
def test_depth_score_claim_gives_each_verdict(hard_layer, hard_accuracy, expected):
    accuracy = pd.DataFrame({"family": "hops", "level": [1, 4], "accuracy": [1.0, hard_accuracy],
                             "problems": 40, "chance": 0.0625})
    data = RunData(depth_groups={"m": ["m"]}, problem_effects={"m": _problem_effects(2,
                                                                                   hard_layer)},
                   accuracy={"m": accuracy}, bootstrap={"resamples": 200, "seed": 0})
    assert _verdicts(data)["csordas_depth_score:m:hops"] == expected


def _fit(a_l: float, low: float, high: float, at_bounds=()) -> dict:
    return {"law": "decomposed", "estimates": {"a_l": a_l},
            "intervals": {"a_l": {"low": low, "high": high}},
            "parameters_at_bounds": list(at_bounds), "n_points_used": 200,
            "bootstrap": {"confidence": 0.95, "resamples": 100, "unit": "points"}}


@pytest.mark.parametrize("fit, expected", [
    (_fit(1.3, 0.9, 1.7), REPRODUCED), (_fit(2.5, 2.1, 2.9), NOT_REPRODUCED),
    (_fit(4.9, 3.0, 5.0), NOT_TESTABLE), (_fit(1.3, 0.9, 1.7, ["a_m"]), NOT_TESTABLE)])
def test_scaling_exponent_claim_gives_each_verdict(fit, expected):
    assert PAPER_VALUES["liu_a_l"].value == 1.2
    data = RunData(fits={"chin": (fit, (0.0, 5.0))})
    assert _verdicts(data)["liu_a_l:chin"] == expected


@pytest.mark.parametrize("tied, se, expected", [
    (3.0, 0.1, REPRODUCED), (0.5, 0.1, NOT_REPRODUCED), (1.1, 0.5, NOT_TESTABLE)])
def test_toy_claim_gives_each_verdict(tied, se, expected):
    fits = [{"teacher_kind": "independent", "temperature": 1.0, "a": 1.0, "a_se": se},
            {"teacher_kind": "tied", "temperature": 1.0, "a": tied, "a_se": se}]
    data = RunData(toy_fit={"form": "power", "fits": fits, "losses": []})
    table = build_claims(data).set_index("claim_id")
    row = table.loc["liu_toy_tied_exceeds:T=1"]
    half = stats.norm.ppf(0.975) * math.hypot(se, se)
    assert (row["measured"], row["low"], row["high"]) == pytest.approx(
        (tied - 1.0, tied - 1.0 - half, tied - 1.0 + half))
    assert row["verdict"] == expected


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


# ---------------------------------------------------------------------------------------------
# Config and rule


def test_config_pairs_pre_ln_with_lns_of_the_same_architecture_only():
    config = load_config(ROOT / "config" / "default.yaml")
    config["models"]["lns_wide"] = {**config["models"]["lns"],
                                    "architecture": {**config["models"]["lns"]["architecture"],
                                                     "hidden_size": 256}}
    spec = resolve(config).jobs("make_claims")["claims"]
    assert spec["cod_pairs"] == [["pre_ln", ["pre_ln"], "lns", ["lns"]]]
    assert set(spec["pruning"]) == {"pre_ln", "lns"}
    assert set(spec["depth_score"]) == {"depth_problems"}


def test_claims_rule_plans_after_the_stages_it_reads():
    result = subprocess.run([SNAKEMAKE, "--configfile=config/test.yaml", "-n", "claims",
                             "--forceall"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env=local_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rule make_claims:" in result.stdout
    for stage_rule in ("prune_model", "fit_scaling", "analyse_model"):
        assert f"rule {stage_rule}:" in result.stdout
