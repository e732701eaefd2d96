"""The generic power-law fitter on laws that are not the scaling stage's: recovery against
hand-written formulas, the closed form of a floor-less one-term law, feature offsets, bootstrap
by groups and held-out validation with caller-given units."""

import numpy as np
import pandas as pd
import pytest
from depthlab.stages import power_law_fitter
from depthlab.stages.power_law_fitter import FitSettings, Law

# A two-term law in made-up variables: L = p/u^a + q/v^b + F.
TWO_TERMS = Law("two_terms", "L = p/u^a + q/v^b + F", ("u", "v"), ("p", "q"), ("a", "b"), "F")
TRUE = {"p": 3.0, "a": 0.7, "q": 40.0, "b": 1.3, "F": 0.4}
FAST = FitSettings(start_exponents=(0.5, 1.0, 2.0), n_refine=4)


def two_terms(p, u, v):
    return p["p"] / u ** p["a"] + p["q"] / v ** p["b"] + p["F"]


def grid_points(noise=0.0, seed=0):
    u, v = (
        a.reshape(-1)
        for a in np.meshgrid(np.geomspace(1, 100, 8), np.geomspace(2, 50, 6), indexing="ij")
    )
    loss = two_terms(TRUE, u, v) * np.exp(
        noise * np.random.default_rng(seed).standard_normal(len(u))
    )
    group = np.repeat(np.arange(8), 6)  # the 6 points of each u value move together
    return pd.DataFrame({"u": u, "v": v, "loss": loss, "group": group})


def test_fit_recovers_a_two_term_law_and_predicts_with_the_formula():
    frame = grid_points()
    result = power_law_fitter.fit_law(frame, TWO_TERMS, FAST)
    for name, value in TRUE.items():
        assert result.estimates[name] == pytest.approx(value, rel=1e-6), name
    new = pd.DataFrame({"u": [1.5, 300.0], "v": [7.0, 1.1]})
    np.testing.assert_allclose(result.predict(new), two_terms(TRUE, new["u"], new["v"]), rtol=1e-6)
    assert np.max(np.abs(result.residuals)) < 1e-8
    assert result.parameters_at_bounds() == [] and result.negligible_terms() == []
    assert TWO_TERMS.parameter_names == ("p", "a", "q", "b", "F")


def test_floorless_one_term_fit_is_log_log_least_squares():
    rng = np.random.default_rng(3)
    x = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    loss = 2.5 / x**0.8 * np.exp(0.05 * rng.standard_normal(5))
    law = Law("power", "L = c/x^a", ("x",), ("c",), ("a",), None)
    result = power_law_fitter.fit_law(pd.DataFrame({"x": x, "loss": loss}), law, FAST)
    slope, intercept = np.polyfit(np.log(x), np.log(loss), 1)
    assert result.estimates["a"] == pytest.approx(-slope, abs=1e-8)
    assert result.estimates["c"] == pytest.approx(np.exp(intercept), rel=1e-8)


def test_feature_offset_enters_as_f_minus_k():
    frame = grid_points()
    frame["loss"] = two_terms(TRUE, frame["u"], frame["v"] - 1.5)
    shifted = power_law_fitter.fit_law(frame, TWO_TERMS, FAST, offsets={"v": 1.5})
    assert shifted.estimates["b"] == pytest.approx(TRUE["b"], rel=1e-6)
    assert shifted.predict(frame.iloc[:3]) == pytest.approx(frame["loss"].iloc[:3], rel=1e-6)
    with pytest.raises(ValueError, match="offset of v: 3 is not below every v"):
        power_law_fitter.fit_law(frame, TWO_TERMS, FAST, offsets={"v": 3.0})
    with pytest.raises(ValueError, match="offsets: 'w'"):
        power_law_fitter.design_matrix(frame, TWO_TERMS, {"w": 1.0})


def test_bootstrap_on_exact_points_gives_zero_width_intervals_at_the_truth():
    frame = grid_points()
    result = power_law_fitter.fit_law(frame, TWO_TERMS, FAST)
    for groups in (None, frame["group"].to_numpy()):
        boot = power_law_fitter.bootstrap(
            result, resamples=20, confidence=0.9, seed=1, groups=groups
        )
        assert boot["failures"] == 0 and len(boot["samples"]) == 20
        for name, value in TRUE.items():
            assert boot["intervals"][name]["low"] == pytest.approx(value, rel=1e-5)
            assert boot["intervals"][name]["high"] == pytest.approx(value, rel=1e-5)
    noisy = power_law_fitter.fit_law(grid_points(noise=0.01, seed=2), TWO_TERMS, FAST)
    boot = power_law_fitter.bootstrap(noisy, resamples=40, seed=0, groups=frame["group"].to_numpy())
    assert boot["intervals"]["a"]["low"] < TRUE["a"] < boot["intervals"]["a"]["high"]
    with pytest.raises(ValueError, match="confidence"):
        power_law_fitter.bootstrap(noisy, resamples=2, confidence=1.0)


def test_held_out_validation_with_caller_given_units():
    frame = grid_points(noise=0.002, seed=4)
    sizes = frame["u"].to_numpy()
    report = power_law_fitter.held_out_validation(
        frame,
        TWO_TERMS,
        FAST,
        random_groups=frame["group"].to_numpy(),
        extrapolation_groups=frame["group"].to_numpy(),
        sizes=sizes,
        random_splits=2,
        test_fraction=0.25,
        extrapolation_train_fraction=0.75,
        seed=0,
    )
    for split in report["random"]:
        assert split["n_test"] == 12 and split["n_train"] == 36  # 2 of 8 groups of 6 points
        assert split["rmse_log_test"] < 0.01
    extra = report["extrapolation"]
    assert extra["n_train"] == 36 and extra["n_test"] == 12  # the 6 smallest u values
    assert extra["size_cut"] == pytest.approx(sorted(set(sizes))[5])
    assert extra["rmse_log_test"] < 0.01


def test_settings_from_config_ignore_keys_that_are_not_fit_settings():
    settings = FitSettings.from_config(
        {
            "law": "decomposed",
            "objective": "huber",
            "depth_offset": 1.0,
            "exponent_bounds": [0, 3],
            "start_grid": {"exponents": [1.0], "term_fractions": [0.1], "floor_fractions": [0.5]},
        }
    )
    assert settings == FitSettings(
        objective="huber",
        exponent_bounds=(0, 3),
        start_exponents=(1.0,),
        start_term_fractions=(0.1,),
        start_floor_fractions=(0.5,),
    )
    with pytest.raises(ValueError, match="optimizer"):
        FitSettings(optimizer="adam")


def test_full_bootstrap_refits_start_from_the_grid_and_cover_the_truth():
    frame = grid_points(noise=0.01, seed=2)
    result = power_law_fitter.fit_law(frame, TWO_TERMS, FAST)
    full = power_law_fitter.bootstrap(result, resamples=30, seed=3, refit="full")
    warm = power_law_fitter.bootstrap(result, resamples=30, seed=3, refit="warm")
    # full: the n_refine best grid points of every resample are optimised; warm: one start each
    assert full["local_fits"] == 30 * FAST.n_refine and warm["local_fits"] == 30
    assert full["refit"] == "full" and full["failures"] == 0
    for name, value in TRUE.items():
        interval = full["intervals"][name]
        assert interval["low"] < value < interval["high"], name
    # a well-conditioned problem has one optimum: both refits find it on every resample
    np.testing.assert_allclose(full["samples"].to_numpy(), warm["samples"].to_numpy(), rtol=1e-4)
    # an independent loop: the same resamples (same generator) fitted from scratch by fit_law
    rng = np.random.default_rng(3)
    for row in range(3):
        idx = rng.integers(0, len(frame), size=len(frame))
        scratch = power_law_fitter.fit_law(frame.iloc[idx], TWO_TERMS, FAST).estimates
        for name in TRUE:
            assert full["samples"][name].iloc[row] == pytest.approx(scratch[name], rel=1e-4)
    with pytest.raises(ValueError, match="bootstrap.refit: 'cold'"):
        power_law_fitter.bootstrap(result, resamples=2, refit="cold")
