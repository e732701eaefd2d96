"""The pruning speed-up compares like with like (depthlab.stages.pruning.speed.measure_exports): the full model
and every pruned variant are exports of the job's own model, loaded back in the job's dtype,
their temporary folders removed. Before, the full model was reloaded from its source in float32
without the pinned revision (the hub's current `main`) while the pruned variants ran in the
export's dtype. Where the variants fit in memory together they are timed in the same rounds and
each speed-up is the median of per-round ratios (paired); else one at a time."""

import os

import pytest
import torch
from depthlab.stages.pruning.speed import measure, measure_exports, speedup_range, speedups
from tiny_models import build

SETTINGS = {"batch_size": 2, "prompt_length": 8, "new_tokens": 4, "repeats": 1}


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_variant_runs_in_the_jobs_dtype_with_its_own_layers(tmp_path, dtype):
    model = build("llama", dtype=getattr(torch, dtype)).eval()
    layers = model.config.num_hidden_layers
    per_layer = sum(p.numel() for p in model.model.layers[0].parameters())
    sets = {"n1": (layers - 1,), "n2": (0, 1)}
    measured = measure_exports(model, sets, **SETTINGS, dtype=dtype, work_dir=tmp_path)
    assert list(measured) == ["full", "n1", "n2"]
    assert {result["dtype"] for result in measured.values()} == {dtype}
    full = sum(p.numel() for p in model.parameters())
    assert measured["full"]["parameters"] == full
    assert measured["n1"]["parameters"] == full - per_layer
    assert measured["n2"]["parameters"] == full - 2 * per_layer
    assert all(result["prefill_tokens_per_s"] > 0 for result in measured.values())
    assert os.listdir(tmp_path) == [], "temporary exports left behind"


def test_the_default_dtype_is_the_models_own(tmp_path):
    model = build("llama", dtype=torch.bfloat16).eval()
    measured = measure_exports(model, {"n1": (0,)}, **SETTINGS, work_dir=tmp_path)
    assert {result["dtype"] for result in measured.values()} == {"bfloat16"}


def test_each_time_is_the_median_of_its_rounds_with_their_range(monkeypatch):
    """Planted round times: the reported seconds are their median, min and max (the warm-up
    round left out), and the speed-up's range is full's fastest over the variant's slowest round
    and full's slowest over the variant's fastest."""
    from depthlab.stages.pruning import speed

    planted = iter([9.0, 9.0, 0.30, 0.12, 0.20, 0.10, 0.25, 0.11, 0.50, 0.2])
    monkeypatch.setattr(speed, "_time_prefill", lambda model, ids: next(planted))
    monkeypatch.setattr(speed, "_time_generation", lambda model, ids, new_tokens: next(planted))
    model = build("llama").eval()
    result = measure({"m": model}, batch_size=2, prompt_length=8, new_tokens=4, repeats=4)["m"]
    assert result["prefill_seconds"] == pytest.approx(0.275)  # median of 0.30, 0.20, 0.25, 0.50
    assert (result["prefill_seconds_min"], result["prefill_seconds_max"]) == (0.20, 0.50)
    assert result["generation_seconds"] == pytest.approx(0.115)  # median of 0.12, 0.10, 0.11, 0.2
    assert (result["generation_seconds_min"], result["generation_seconds_max"]) == (0.10, 0.2)
    assert result["prefill_tokens_per_s"] == pytest.approx(16 / 0.275)
    variant = {"prefill_seconds_min": 0.1, "prefill_seconds_max": 0.4}
    low, high = speedup_range(result, variant, "prefill")
    assert (low, high) == pytest.approx((0.20 / 0.4, 0.50 / 0.1))


def _record_calls(monkeypatch, seconds):
    """Time every prefill/generation call as `seconds(layers, call)` and record which model
    (its layer count) ran, in order."""
    from depthlab.stages.pruning import speed

    calls = []

    def fake(model, *args):
        calls.append(model.config.num_hidden_layers)
        return seconds(model.config.num_hidden_layers, len(calls))

    monkeypatch.setattr(speed, "_time_prefill", fake)
    monkeypatch.setattr(speed, "_time_generation", fake)
    return calls


def test_paired_rounds_cancel_a_load_that_changes_between_rounds(tmp_path, monkeypatch):
    """The machine slows down 1x, 3x, 9x over three rounds; within a round the 2-layer variant
    takes 2/3 of the full model's time. Paired, every round's ratio is 3/2: the speed-up is 3/2
    with no spread. Timed apart, the same rounds give a range from 0.5 to 4.5."""
    model = build("llama").eval()  # 3 layers
    calls = _record_calls(monkeypatch, lambda layers, call: layers * 3 ** ((call - 1) // 4))
    settings = {**SETTINGS, "repeats": 2}
    measured = measure_exports(model, {"n1": (2,)}, **settings, work_dir=tmp_path, paired=True)
    # warm-up round, then every other round reversed: full n1 | n1 full | full n1 (2 calls each)
    assert calls == [3, 3, 2, 2, 2, 2, 3, 3, 3, 3, 2, 2]
    variant = measured["n1"]
    assert variant["paired"] and measured["full"]["prefill_speedup"] == 1.0
    for kind in ("prefill", "generation"):
        assert variant[f"{kind}_speedup"] == pytest.approx(3 / 2)
        assert variant[f"{kind}_speedup_low"] == pytest.approx(3 / 2)
        assert variant[f"{kind}_speedup_high"] == pytest.approx(3 / 2)
    apart = speedups(measured["full"], variant, None)
    assert not apart["paired"] and apart["prefill_speedup"] == pytest.approx(18 / 12)
    assert apart["prefill_speedup_low"] == pytest.approx(9 / 18)
    assert apart["prefill_speedup_high"] == pytest.approx(27 / 6)
    assert os.listdir(tmp_path) == [], "temporary exports left behind"


def test_variants_that_do_not_fit_together_are_timed_one_at_a_time(tmp_path, monkeypatch):
    """Free memory for less than twice two copies: each variant gets its own warm-up and rounds,
    the first freed before the next loads, and the speed-up is the ratio of medians."""
    from depthlab.stages.pruning import speed

    model = build("llama").eval()
    weights = sum(p.numel() for p in model.parameters()) * 4
    monkeypatch.setattr(speed, "_free_memory", lambda device: 4 * weights - 1)
    calls = _record_calls(monkeypatch, lambda layers, call: float(layers))
    assert not speed.fits_together(model, {"n1": (2,)}, torch.float32, "cpu", tmp_path)
    measured = measure_exports(model, {"n1": (2,)}, **SETTINGS, work_dir=tmp_path)
    assert calls == [3, 3, 3, 3, 2, 2, 2, 2]
    assert not measured["n1"]["paired"]
    assert measured["n1"]["generation_speedup"] == pytest.approx(3 / 2)
    monkeypatch.setattr(speed, "_free_memory", lambda device: 4 * weights)
    assert speed.fits_together(model, {"n1": (2,)}, torch.float32, "cpu", tmp_path)


def test_a_run_without_speed_measurements_says_so_instead_of_drawing_the_ideal_alone():
    """config/your_model.yaml switches speed off: the figure showed the ideal curve on empty axes
    titled "(none removal)", as if measured."""
    import pandas as pd
    from depthlab.stages.pruning.plots import plot_speedup

    fig = plot_speedup(pd.DataFrame(), {"mine": "mine"}, "your_model")
    assert fig.axes == []
    assert [t.get_text() for t in fig.texts][0].startswith("speed-up not measured")
