"""The tuned-lens (Belrose et al.) and layer-swap (Lad et al.) rows: their statistics against
direct computations on planted tables, and each verdict over seeds and over document shards."""

import numpy as np
import pandas as pd
import pytest
from depthlab.claims import RunData, build_claims
from depthlab.claims.lens import middle_swaps, swap_statistics, tuned_lens_gap
from depthlab.claims.verdicts import INDICATIVE, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED
from depthlab.core.paper_values_lens import PAPER_VALUES

LAYERS = 12


def lens_frame(gaps, logit=3.0):
    """lens.csv rows: KL of the logit lens `logit` at every state l < L, the tuned lens `logit -
    gap_l`; both 0 at l = L."""
    rows = []
    for l in range(LAYERS + 1):
        last = l == LAYERS
        rows.append(("logit", "kl", l, 0.0 if last else logit))
        rows.append(("tuned", "kl", l, 0.0 if last else logit - gaps[l]))
        rows.append(("tuned", "top1_agreement", l, 0.5))
    return pd.DataFrame(rows, columns=["lens", "measure", "layer", "value"])


def swaps_frame(middle_kept, first_kept, other=0.3):
    kept = [first_kept] + [
        middle_kept if l in middle_swaps(LAYERS) else other for l in range(1, LAYERS - 1)
    ]
    rows = [("intact", -1, 1.0)] + [("swap", l, k) for l, k in enumerate(kept)]
    rows += [("delete", l, 0.1) for l in range(LAYERS)]
    return pd.DataFrame(rows, columns=["kind", "layer", "kept_accuracy"])


def test_statistics_against_direct_computation():
    gaps = np.linspace(0.5, 2.0, LAYERS)
    gaps[4] = -0.3
    # relative: 1 - (3 - gap) / 3 = gap / 3 at the worst layer
    assert tuned_lens_gap(lens_frame(gaps)) == pytest.approx(-0.1)
    # the last state (both lenses are the output) never counts
    assert tuned_lens_gap(lens_frame(np.full(LAYERS + 1, 1.5))) == pytest.approx(0.5)
    assert middle_swaps(12) == [3, 4, 5, 6, 7]
    assert middle_swaps(30) == [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]
    assert middle_swaps(4) == [1]
    middle, first, both = swap_statistics(swaps_frame(0.8, 0.2))
    assert (middle, first, both) == pytest.approx((0.8, 0.2, 0.3))
    assert swap_statistics(swaps_frame(0.8, 0.65))[2] == pytest.approx(-0.15)
    assert swap_statistics(swaps_frame(0.55, 0.1))[2] == pytest.approx(0.05)


def _data(gap, middle, first, seeds=3, trained=True, noise=0.02, learned=True):
    rng = np.random.default_rng(0)
    data = RunData()
    if trained:
        members = [f"pre_ln_s{s}" for s in range(seeds)]
        data.lens_groups = {"pre_ln": members}
        for m in members:
            data.trained.add(m)
            data.val_loss[m], data.unigram[m] = (3.0, 5.0) if learned else (5.5, 5.0)
            data.scale[m] = "12 layers x 64"
            n = rng.normal(0, noise, 3)
            data.lens_swaps[m] = [
                (lens_frame(np.full(LAYERS, gap + n[0])), swaps_frame(middle + n[1], first + n[2]))
            ]
    else:
        data.lens_groups = {"smollm2": ["smollm2"]}
        data.pretrained_scale["smollm2"] = "smollm2 (pretrained, 12 layers)"
        data.lens_swaps["smollm2"] = []
        for _ in range(4):
            n = rng.normal(0, noise, 3)
            data.lens_swaps["smollm2"].append(
                (lens_frame(np.full(LAYERS, gap + n[0])), swaps_frame(middle + n[1], first + n[2]))
            )
    return data


def _rows(data):
    table = build_claims(data)
    return {r.claim_id.split(":")[0]: r for r in table.itertuples()}


@pytest.mark.parametrize("trained", [True, False])
@pytest.mark.parametrize(
    "gap, middle, first, lens_verdict, swap_verdict",
    [
        (1.0, 0.85, 0.2, REPRODUCED, REPRODUCED),
        (-0.5, 0.3, 0.2, NOT_REPRODUCED, NOT_REPRODUCED),
        (1.0, 0.85, 0.9, REPRODUCED, NOT_REPRODUCED),
        (0.01, 0.5, 0.5, NOT_TESTABLE, NOT_TESTABLE),
    ],
)
def test_each_verdict(trained, gap, middle, first, lens_verdict, swap_verdict):
    rows = _rows(_data(gap, middle, first, trained=trained))
    assert rows["belrose_tuned_lens"].verdict == lens_verdict
    assert rows["lad_layer_swaps"].verdict == swap_verdict
    assert rows["lad_layer_swaps"].seeds == (3 if trained else 1)
    assert (
        rows["belrose_tuned_lens"].paper_value == PAPER_VALUES["belrose_tuned_lens_kl"].describe()
    )
    if not trained:
        assert "document shards" in rows["belrose_tuned_lens"].interval


def test_size_against_the_papers_band():
    assert _rows(_data(1.0, 0.85, 0.2))["lad_layer_swaps"].size_verdict == "size reproduced"
    assert _rows(_data(1.0, 0.6, 0.2))["lad_layer_swaps"].size_verdict == "size not reproduced"


def test_one_seed_is_indicative_and_an_unlearned_model_not_testable():
    assert _rows(_data(1.0, 0.85, 0.2, seeds=1))["belrose_tuned_lens"].verdict == INDICATIVE
    rows = _rows(_data(1.0, 0.85, 0.2, learned=False))
    assert rows["belrose_tuned_lens"].verdict == NOT_TESTABLE
    assert "did not learn" in rows["belrose_tuned_lens"].reason


def test_lad_size_is_decided_while_the_direction_straddles():
    """The middle swaps keep 99.9% (wholly above the paper's 72-95%) while the first swap's
    accuracy varies so much over seeds that the margin straddles 0: the size verdict still
    decides (issue 43: lad_layer_swaps:pre_ln read "not testable" for both)."""
    data = RunData(lens_groups={"pre_ln": ["a", "b", "c"]})
    for m, first, middle in zip("abc", (0.2, 0.45, 0.7), (0.9985, 0.999, 0.9995)):
        data.trained.add(m)
        data.val_loss[m], data.unigram[m], data.scale[m] = 3.0, 5.0, "12 layers x 64"
        data.lens_swaps[m] = [(lens_frame(np.full(LAYERS, 0.5)), swaps_frame(middle, first))]
    row = build_claims(data).set_index("claim_id").loc["lad_layer_swaps:pre_ln"]
    assert row["verdict"] == NOT_TESTABLE and "too wide to decide" in row["reason"]
    assert row["size_verdict"] == "size not reproduced"
    assert row["size_low"] > 0.95


def test_lens_rows_of_models_trained_here_subtract_the_untrained_twin():
    from depthlab.claims.initial import InitialStatistics

    data = _data(0.5, 0.9, 0.1)
    twin_gap, twin_first = 0.2, 0.95  # an untrained model: the first swap keeps almost all
    for m in data.lens_groups["pre_ln"]:
        data.initial[m] = InitialStatistics(
            lens_swaps=[(lens_frame(np.full(LAYERS, twin_gap)), swaps_frame(0.99, twin_first))]
        )
    rows = _rows(data)
    trained_gap = np.mean(
        [tuned_lens_gap(data.lens_swaps[m][0][0]) for m in data.lens_groups["pre_ln"]]
    )
    twin_value = tuned_lens_gap(lens_frame(np.full(LAYERS, twin_gap)))
    # the row's value is the trained model's; trained - untrained beside it
    assert rows["belrose_tuned_lens"].measured == pytest.approx(trained_gap)
    assert rows["belrose_tuned_lens"].training_effect == pytest.approx(trained_gap - twin_value)
    assert "untrained twins beside" in rows["belrose_tuned_lens"].claim
    # margin: trained min(0.4, 0.4) = 0.4 vs untrained min(0.49, -0.45) = -0.45
    assert rows["lad_layer_swaps"].measured == pytest.approx(0.4, abs=0.05)
    assert rows["lad_layer_swaps"].training_effect == pytest.approx(0.4 + 0.45, abs=0.05)
    assert rows["lad_layer_swaps"].verdict == REPRODUCED
    # twins with the trained lens gain already: not testable
    for m in data.lens_groups["pre_ln"]:
        data.initial[m].lens_swaps = data.lens_swaps[m]
    assert _rows(data)["belrose_tuned_lens"].verdict == NOT_TESTABLE
