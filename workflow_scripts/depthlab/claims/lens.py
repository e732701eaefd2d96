"""Belrose et al. (tuned lens) and Lad et al. (layer swaps) rows, from the `lens_swaps` jobs: each
model's lens.csv and swaps.csv per text set. A model trained here is decided over its seeds (each
seed's value the mean over its text sets); a published LM over its document shards (one value
per shard), so the interval carries the documents' sampling variance, never layers as samples."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from depthlab.claims.measures import over_shards
from depthlab.claims.rows import (
    Claim,
    against_initialisation,
    claim_row,
    decide,
    not_learned,
    scale_of,
    twin,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import Estimate, band_text, over_seeds, verdict_positive
from depthlab.core import paper_values_lens as pv
from depthlab.core.paper_values_lens import BELROSE, LAD, PAPER_VALUES


def tuned_lens_gap(lens: pd.DataFrame) -> float:
    """min over states l < L of 1 - KL(tuned lens) / KL(logit lens), the tuned lens' relative
    reduction of the KL to the final distribution: positive when it is closer at every layer but
    the last. Relative, since the logit lens' KL spans orders of magnitude over depth (a 12 x 64
    model: 1.8 nats at the embedding, 0.004 before the last layer) and an absolute margin would
    be unreachable near the output whatever the lens."""
    kl = lens[lens["measure"] == "kl"].pivot(index="layer", columns="lens", values="value")
    kl = kl[kl.index < kl.index.max()]
    return float((1 - kl["tuned"] / kl["logit"]).min()) if len(kl) else math.nan


def middle_swaps(num_layers: int) -> list[int]:
    """Swap positions l with both swapped layers in the middle half: L/4 <= l, l + 1 < L - L/4."""
    quarter = num_layers // 4
    return [l for l in range(quarter, num_layers - 1) if l + 1 < num_layers - quarter]


def swap_statistics(swaps: pd.DataFrame) -> tuple[float, float, float]:
    """(middle: mean kept accuracy over the middle swaps, first: kept accuracy of the swap of
    layers 0 and 1, both: min(middle - LAD_MOST, LAD_MOST - first), positive when the middle
    swaps keep most of the intact accuracy and the first swap does not)."""
    swap = swaps[swaps["kind"] == "swap"].set_index("layer")["kept_accuracy"]
    num_layers = int(swap.index.max()) + 2 if len(swap) else 0
    middle_layers = [l for l in middle_swaps(num_layers) if l in swap.index]
    if not middle_layers or 0 not in swap.index:
        return math.nan, math.nan, math.nan
    middle, first = float(swap[middle_layers].mean()), float(swap[0])
    return middle, first, min(middle - pv.LAD_MOST, pv.LAD_MOST - first)


def _estimate(data: RunData, members: list, statistic, what: str) -> Estimate:
    """Over seeds (trained here: each member's mean over its text sets) or over the shards of
    one published model."""
    if any(m in data.trained for m in members):
        return over_seeds(
            [
                Estimate(float(np.mean([statistic(r) for r in data.lens_swaps[m]])), n=1)
                for m in members
            ]
        )
    return over_shards([statistic(r) for r in data.lens_swaps[members[0]]], what)


def _against_twins(data: RunData, members: list, statistic, threshold: float):
    """(row value, extra blockers, words, the twins' comparison) of a lens / swap statistic of
    models trained here: the trained value over seeds (each seed the mean over its text sets),
    the untrained twins beside it (against_initialisation); the trained value alone, said so,
    without twins."""
    trained = [
        Estimate(float(np.mean([statistic(r) for r in data.lens_swaps[m]])), n=1) for m in members
    ]
    initial = [
        None
        if (stats := twin(data, m)) is None or not stats.lens_swaps
        else float(np.mean([statistic(r) for r in stats.lens_swaps]))
        for m in members
    ]
    compared = against_initialisation(trained, initial, threshold)
    words = f"; untrained twins beside: {compared.text}" if compared.initial is not None else ""
    if compared.initial is None and all(
        (stats := twin(data, m)) is not None and stats.lens_swaps for m in members
    ):
        # a random network's top-1 accuracy is 0: kept accuracy (accuracy / intact) is 0 / 0
        words = (
            "; the untrained twins predict no next token right (top-1 accuracy 0), so their "
            "kept accuracy is undefined: the trained value alone"
        )
    return compared.trained, compared.blockers, words, compared


def lens_swaps_claims(data: RunData) -> list[dict]:
    rows = []
    for group, members in data.lens_groups.items():
        if not all(m in data.lens_swaps for m in members):
            continue
        trained = any(m in data.trained for m in members)
        blockers = not_learned(data, members) if trained else []
        scale = scale_of(data, members)
        negligible = pv.BELROSE_KL_GAP_NEGLIGIBLE
        gap, lens_words, lens_blockers, lens_twins = (
            _estimate(data, members, lambda r: tuned_lens_gap(r[0]), "min KL reduction each"),
            "",
            [],
            None,
        )
        if trained:
            gap, lens_blockers, lens_words, lens_twins = _against_twins(
                data, members, lambda r: tuned_lens_gap(r[0]), negligible
            )
        rows.append(
            claim_row(
                f"belrose_tuned_lens:{group}",
                BELROSE,
                f"{group}: the tuned lens is closer to the final distribution than the logit "
                f"lens at every layer but the last: min over states l < L of 1 - KL(p_L || "
                f"tuned lens) / KL(p_L || logit lens) > {negligible:g} (held-out documents; "
                f"translators trained on the train split)" + lens_words,
                "belrose_tuned_lens_kl",
                gap,
                scale,
                decide(
                    gap,
                    verdict_positive(gap, blockers + lens_blockers, negligible),
                    trained,
                    blockers + lens_blockers,
                ),
                paper_value=PAPER_VALUES["belrose_tuned_lens_kl"].describe(),
                against=lens_twins,
            )
        )
        both = _estimate(data, members, lambda r: swap_statistics(r[1])[2], "min margin each")
        swap_words, swap_blockers, swap_twins = "", [], None
        if trained:
            both, swap_blockers, swap_words, swap_twins = _against_twins(
                data, members, lambda r: swap_statistics(r[1])[2], 0.0
            )
        middle = _estimate(data, members, lambda r: swap_statistics(r[1])[0], "middle mean each")
        first = _estimate(data, members, lambda r: swap_statistics(r[1])[1], "first swap each")
        rows.append(
            claim_row(
                f"lad_layer_swaps:{group}",
                LAD,
                f"{group}: swapping adjacent middle layers keeps most of the intact model's "
                f"next-token top-1 accuracy while swapping layers 0 and 1 does not: "
                f"min(mean kept accuracy over the middle swaps - {pv.LAD_MOST:g}, "
                f"{pv.LAD_MOST:g} - kept accuracy of the first swap) > 0; middle mean "
                f"{middle.value:.3g}, first swap {first.value:.3g}" + swap_words,
                "lad_swap_kept_accuracy",
                both,
                scale,
                decide(
                    both,
                    verdict_positive(both, blockers + swap_blockers, 0.0),
                    trained,
                    blockers + swap_blockers,
                ),
                paper_value=PAPER_VALUES["lad_swap_kept_accuracy"].describe(),
                size=(pv.LAD_SWAP_BAND, band_text(pv.LAD_SWAP_BAND), middle),
                against=swap_twins,
            )
        )
    return rows


CLAIMS = (
    Claim(
        "belrose_tuned_lens:<model>",
        PAPER_VALUES["belrose_tuned_lens_kl"],
        "min over states l < L of 1 - KL(tuned lens) / KL(logit lens), trained; the untrained "
        "twins beside (their lens trained the same way)",
        "seeds; document shards",
        f"> {pv.BELROSE_KL_GAP_NEGLIGIBLE:g}",
        "toys: yes, decided on the trained models, their twins beside",
        lens_swaps_claims,
    ),
    Claim(
        "lad_layer_swaps:<model>",
        PAPER_VALUES["lad_swap_kept_accuracy"],
        f"min(middle swaps' kept accuracy - {pv.LAD_MOST:g}, {pv.LAD_MOST:g} - first swap's), "
        "trained; size: the middle swaps' kept accuracy",
        "seeds; document shards",
        f"> 0, size in {band_text(pv.LAD_SWAP_BAND)}",
        "toys: decided on the trained models (a twin's kept accuracy is 0 / 0); the size is "
        "decided whenever decidable",
        lens_swaps_claims,
    ),
)
