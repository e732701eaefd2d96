"""The two rules every claim row shares: the untrained twin counts by the claim's direction and
kind (rows.against_initialisation), and no single layer decides a row read off a per-layer
profile (rows.layer_check), on published LMs and on models trained here alike."""

import math

import numpy as np
import pandas as pd
import pytest
from depthlab.claims import RunData, build_claims
from depthlab.claims.measures import states_without_layer, without_layer
from depthlab.claims.rows import (
    ARCHITECTURE,
    MOVED_AWAY,
    MOVED_NOT,
    MOVED_TOWARDS,
    against_initialisation,
    layer_check,
)
from depthlab.claims.verdicts import (
    INIT_CONTRADICTS_IT,
    INIT_SHOWS_IT,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    ONE_LAYER_DECIDES,
    REPRODUCED,
    Estimate,
    verdict_positive,
)
from scipy import stats

THRESHOLD = 0.01


def _seeds(values, spread=1e-3):
    """Three trained seeds around each value (their own within-model estimate, no interval)."""
    return [Estimate(v + d) for v, d in zip(values, (-spread, 0.0, spread))]


# ---------------------------------------------------------------------------------------------
# The twin rule


def test_the_row_value_is_the_trained_one_and_the_paired_difference_is_beside_it():
    trained, twins = _seeds([0.05] * 3), [0.01, 0.012, 0.011]
    compared = against_initialisation(trained, twins, THRESHOLD)
    assert compared.trained.value == pytest.approx(0.05)
    deltas = [t.value - v for t, v in zip(trained, twins)]
    low, high = stats.t.interval(0.95, 2, loc=np.mean(deltas), scale=stats.sem(deltas))
    assert (compared.delta.value, compared.delta.low, compared.delta.high) == pytest.approx(
        (np.mean(deltas), low, high)
    )
    assert compared.moved == MOVED_TOWARDS and not compared.blockers
    columns = compared.columns()
    assert columns["untrained"] == pytest.approx(np.mean(twins))
    assert columns["training_moved"] == MOVED_TOWARDS


def test_twins_that_contradict_the_claim_never_say_the_initialisation_shows_it():
    # the Curse of Depth's angular distance: twins on the opposite side, training moved the
    # trained value towards the claim but not past the threshold: a fail that stands
    trained, twins = _seeds([-0.008] * 3), [-0.058, -0.06, -0.056]
    compared = against_initialisation(trained, twins, THRESHOLD)
    assert compared.moved == MOVED_TOWARDS and compared.blockers == []
    verdict = verdict_positive(compared.trained, compared.blockers, THRESHOLD)
    assert verdict[0] == NOT_REPRODUCED and INIT_SHOWS_IT not in verdict[1]


def test_the_twin_blocks_a_pass_and_a_fail_only_when_training_did_not_move_it():
    # a pass the twins already give, unmoved: blocked
    passed = against_initialisation(_seeds([0.05] * 3), [0.049, 0.05, 0.051], THRESHOLD)
    assert passed.moved == MOVED_NOT and INIT_SHOWS_IT in passed.blockers[0]
    # a fail the twins already give (the opposite effect), unmoved: blocked as well
    failed = against_initialisation(_seeds([-0.05] * 3), [-0.049, -0.05, -0.051], THRESHOLD)
    assert failed.moved == MOVED_NOT and INIT_CONTRADICTS_IT in failed.blockers[0]
    # a precise null on a null twin: no effect either way, the fail stands
    null = against_initialisation(_seeds([0.0] * 3, 1e-4), [0.0, 1e-4, -1e-4], THRESHOLD)
    assert null.blockers == []
    assert verdict_positive(null.trained, null.blockers, THRESHOLD)[0] == NOT_REPRODUCED
    # training moved it away from the claim: the fail is training's
    away = against_initialisation(_seeds([-0.05] * 3), [0.0, 0.001, -0.001], THRESHOLD)
    assert away.moved == MOVED_AWAY and away.blockers == []


def test_an_architecture_claim_gets_a_note_never_a_blocker():
    compared = against_initialisation(
        _seeds([0.08] * 3), [0.22, 0.23, 0.24], THRESHOLD, ARCHITECTURE
    )
    assert compared.blockers == [] and compared.moved == MOVED_AWAY
    assert "a property of the architecture" in compared.notes[0]


def test_the_direction_of_a_claim_decides_the_twins_side():
    # a claim "effect < -0.01": twins at -0.05 already show it
    compared = against_initialisation(
        _seeds([-0.05] * 3), [-0.049, -0.05, -0.051], -THRESHOLD, direction=-1
    )
    assert INIT_SHOWS_IT in compared.blockers[0]


# ---------------------------------------------------------------------------------------------
# One layer left out


def test_states_without_layer_removes_that_layers_step_from_every_later_state():
    rng = np.random.default_rng(0)
    h_var = pd.Series(np.exp(np.cumsum(rng.normal(0.1, 0.3, 9))), index=range(9))
    without = states_without_layer(h_var, 3)
    steps = np.diff(np.log(h_var.to_numpy()))
    expected = np.exp(np.log(h_var[0]) + np.r_[0, np.cumsum(np.delete(steps, 3))])
    assert list(without.index) == list(range(8))
    assert without.to_numpy() == pytest.approx(expected)
    assert list(without_layer(pd.Series([1.0, 2.0, 3.0]), 1).index) == [0, 2]


def test_layer_check_names_the_layer_that_flips_a_verdict():
    values = pd.Series([0.5, 0.02, 0.02, 0.03, 0.03])  # one large first layer decides the mean
    check = layer_check(lambda k: Estimate(float(without_layer(values, k).mean())), range(5),
                        lambda e: ("reproduced" if e.value > 0.05 else "not reproduced", ""),
                        0.05)  # fmt: skip
    assert check.flips == (0,) and "layer 0" in check.text
    assert ONE_LAYER_DECIDES in check.blockers[0]
    steady = layer_check(lambda k: Estimate(float(without_layer(values[1:], k).mean())),
                         range(1, 5), lambda e: ("not reproduced", ""), 0.05)  # fmt: skip
    assert steady.flips == () and steady.text == "holds without any one of 4 layers"


def _published(h_var_log, distance, shards=4):
    """A published LM's measures per document shard: ln Var per state and d(l, l+1) per layer,
    with small shard-to-shard noise."""
    rng = np.random.default_rng(1)
    layers = len(distance)
    replicates = []
    for _ in range(shards):
        rows = [
            ("h_var", l, math.exp(v + rng.normal(0, 1e-3))) for l, v in enumerate(h_var_log)
        ] + [("block_rel_norm", l, 0.3 - 0.02 * l + rng.normal(0, 1e-3)) for l in range(layers)]
        frame = pd.DataFrame(rows, columns=["measure", "layer", "value"])
        replicates.append((frame, pd.Series(distance) + rng.normal(0, 1e-4, layers), "all tokens"))
    return RunData(pretrained={"lm": replicates}, pretrained_scale={"lm": "lm"})


def test_variance_growth_that_is_one_massive_activations_step_is_not_decided():
    layers = 12
    step = np.r_[np.zeros(6), np.full(layers + 1 - 6, 6.0)]  # one ~400x jump at layer 5
    steady = 0.3 * np.arange(layers + 1)
    falling = -0.3 * np.arange(layers + 1)
    distance = np.r_[np.full(6, 0.3), np.full(6, 0.1)]
    rows = {
        name: build_claims(_published(profile, distance)).set_index("claim_id")
        for name, profile in (("step", step), ("steady", steady), ("falling", falling))
    }
    blocked = rows["step"].loc["cod_variance_growth:lm"]
    assert blocked["verdict"] == NOT_TESTABLE and ONE_LAYER_DECIDES in blocked["reason"]
    assert "layer 5" in blocked["reason"] and blocked["layer_check"].startswith("flips")
    assert rows["steady"].loc["cod_variance_growth:lm", "verdict"] == REPRODUCED
    assert rows["steady"].loc["cod_variance_growth:lm", "layer_check"] == (
        f"holds without any one of {layers} layers"
    )
    assert rows["falling"].loc["cod_variance_growth:lm", "verdict"] == NOT_REPRODUCED
    assert rows["steady"].loc["cod_variance_growth:lm", "kind"] == ARCHITECTURE


def test_deep_identity_decided_by_the_first_layer_alone_is_not_decided():
    layers = 12
    flat = np.r_[np.full(6, 0.1), np.full(6, 0.11)]  # deep layers slightly farther
    first = flat.copy()
    first[0] = 0.5  # d(0, 1) large: alone it makes the shallow half look farther
    h_var = 0.3 * np.arange(layers + 1)
    decided_by_one = build_claims(_published(h_var, first)).set_index("claim_id")
    row = decided_by_one.loc["cod_deep_identity:lm"]
    assert row["measured"] > 0.01  # all layers: "reproduced" on the mean
    assert row["verdict"] == NOT_TESTABLE and "layer 0" in row["reason"]
    honest = build_claims(_published(h_var, np.r_[np.full(6, 0.3), np.full(6, 0.1)]))
    assert honest.set_index("claim_id").loc["cod_deep_identity:lm", "verdict"] == REPRODUCED
    reversed_ = build_claims(_published(h_var, flat)).set_index("claim_id")
    assert reversed_.loc["cod_deep_identity:lm", "verdict"] == NOT_REPRODUCED


def test_the_room_gate_decides_on_the_seeds_interval_not_on_their_mean():
    from depthlab.claims.measures import no_room

    # three seeds whose mean damage reaches the threshold but whose interval does not: room is
    # not shown (another CPU could put the mean below), so a fail would be forced: blocked
    blocked = no_room([0.015, 0.03, 0.025], 0.02, "deepest")
    assert "costs 0.0233 nats [" in blocked[0] and "over 3 seeds" in blocked[0]
    # the whole interval at or above it: room shown, the gate stays open
    assert no_room([0.03, 0.031, 0.032], 0.02, "deepest") == []
    # one model (an indicative row anyway): its value
    assert no_room([0.01], 0.02, "deepest") and not no_room([0.03], 0.02, "deepest")


def _pruned_lm(layers: int, layer_params: int, cost_per_layer: float, seed: int):
    """A pruned published LM's window losses and sweep: the angular block of n layers costs
    cost_per_layer * n nats on every window (plus noise), one single-layer removal each."""
    rng = np.random.default_rng(seed)
    base = rng.normal(3.0, 0.5, 40)
    rows = [("", "full", 0, False, w, base[w]) for w in range(40)]
    rows += [("0", "single", 1, False, w, base[w] + 0.01) for w in range(40)]
    sweep = [{"strategy": "angular", "n": 0, "removed_params": 0, "healed": False}]
    for n in range(1, layers // 2 + 1):
        loss = base + cost_per_layer * n + rng.normal(0, 0.002, 40)
        rows += [(f"{layers - n}-{layers - 1}", "angular", n, False, w, loss[w]) for w in range(40)]
        sweep.append({"strategy": "angular", "n": n, "removed_params": n * layer_params,
                      "healed": False})  # fmt: skip
    windows = pd.DataFrame(rows, columns=["removed", "strategy", "n", "healed", "window", "loss"])
    sweep = pd.DataFrame(sweep).assign(val_loss=np.nan, fraction=lambda f: f["n"] / layers)
    return windows, sweep


@pytest.mark.parametrize(
    "large_cost, expected", [(0.01, REPRODUCED), (0.05, NOT_REPRODUCED)]
)  # the larger model removes 10 of 20 layers within 0.1 nats, or 2 of 20 (the smaller: 5 of 20)
def test_removable_share_grows_with_size_on_two_published_lms(large_cost, expected):
    data = RunData(bootstrap={"resamples": 200, "seed": 0})
    for name, layers, params, cost in (
        ("small", 20, 1_000, 0.019),
        ("large", 20, 5_000, large_cost),
    ):
        data.window_losses[name], data.sweeps[name] = _pruned_lm(layers, params, cost, 1)
        data.pruning_groups[name] = [name]
        data.single_layer[name] = pd.DataFrame({"layer": [0], "delta_loss": [0.01]})
    row = build_claims(data).set_index("claim_id").loc["cod_removable_grows:small-vs-large"]
    assert row["verdict"] == expected
    share = {0.01: 10 / 20, 0.05: 2 / 20}[large_cost]
    assert row["measured"] == pytest.approx(share - 5 / 20)
    one = RunData(bootstrap={"resamples": 200, "seed": 0})
    one.window_losses["small"], one.sweeps["small"] = (
        data.window_losses["small"],
        data.sweeps["small"],
    )
    one.pruning_groups["small"] = ["small"]
    one.single_layer["small"] = data.single_layer["small"]
    alone = build_claims(one).set_index("claim_id").loc["cod_removable_grows:published"]
    assert alone["verdict"] == NOT_TESTABLE and "two sizes" in alone["reason"]


def test_delta_p_half_gap_without_a_layer_is_the_half_gap_of_the_rest():
    from depthlab.claims.measures import delta_p_half_gap, half_gap

    rng = np.random.default_rng(3)
    means = {"full": 3.0, **{f"single:{l}": 3.0 + rng.uniform(0, 1) for l in range(9)}}
    increase = pd.Series({l: means[f"single:{l}"] - 3.0 for l in range(9)})
    for left_out in (None, 0, 4, 8):
        rest = increase if left_out is None else increase.drop(left_out)
        # independent: the layers' halves of the model without that layer
        deep = [l for l in rest.index if l >= (max(rest.index) + 1) // 2]
        expected = rest.drop(deep).mean() - rest[deep].mean()
        assert delta_p_half_gap(means, left_out) == pytest.approx(expected)
        assert delta_p_half_gap(means, left_out) == half_gap(rest)
