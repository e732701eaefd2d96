"""Rows about published pretrained LMs (not trained here): each paper's statement tested on the
model's own document shards and validation windows."""

from __future__ import annotations

import math

import numpy as np

from depthlab.claims.measures import (
    delta_p_half_gap,
    half_gap,
    halves,
    log_variance_slope,
    over_shards,
    single_layer_drop,
    states_without_layer,
    without_layer,
)
from depthlab.claims.rows import (
    ARCHITECTURE,
    Claim,
    claim_row,
    decide,
    has_single_windows,
    layer_check,
    over_windows,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    Estimate,
    verdict_positive,
)
from depthlab.core import paper_values as pv
from depthlab.core.model_types import NORM_PLACEMENTS
from depthlab.core.paper_values import COD, CSORDAS, PAPER_VALUES


def half_margin(contribution) -> float:
    """min(first-half mean - CSORDAS_FIRST_HALF_ABOVE, CSORDAS_SECOND_HALF_BELOW - second-half
    mean) of a per-layer relative contribution: > 0 when both of the paper's sizes hold."""
    first, second = halves(contribution)
    return min(
        float(np.mean(first)) - pv.CSORDAS_FIRST_HALF_ABOVE,
        pv.CSORDAS_SECOND_HALF_BELOW - float(np.mean(second)),
    )


def _checked(e_of, layers, threshold):
    """(Estimate on every layer, verdict, layer_check words) of a published LM's row decided on
    a per-layer profile: `e_of(k)` the row's Estimate without layer k (None: every layer); a
    layer whose removal flips the verdict makes the row not decided (rows.layer_check)."""

    def rule(e, blockers=()):
        return decide(e, verdict_positive(e, list(blockers), threshold), False, list(blockers))

    e = e_of(None)
    check = layer_check(e_of, layers, rule, threshold)
    return e, rule(e, check.blockers), check.text


def pretrained_claims(data: RunData) -> list[dict]:
    """The papers' statements about pretrained LMs, tested on each model not trained here: its
    hidden-state measures per document shard (intervals over shards carry the sampling variance
    of the documents) and, when pruned, its single-layer removal table. Each row decided on a
    per-layer profile is recomputed with every layer left out in turn: one layer may not decide
    it (a massive activation's single step, an embedding-reading first layer)."""
    rows = []
    for name, replicates in data.pretrained.items():
        scale = data.pretrained_scale.get(name, name)
        other = _other_architecture(data, name)
        frames = [frame for frame, _, _ in replicates]
        h_var = [f[f["measure"] == "h_var"].set_index("layer")["value"] for f in frames]
        num_layers = int(max(v.index.max() for v in h_var))
        threshold = pv.COD_VARIANCE_SLOPE_NEGLIGIBLE
        growth, verdict, check = _checked(
            lambda k, h_var=h_var: over_shards(
                [log_variance_slope(states_without_layer(v, k)).value for v in h_var],
                "OLS slope each",
            ),
            range(num_layers),
            threshold,
        )
        rows.append(
            claim_row(
                f"cod_variance_growth:{name}",
                COD,
                f"{name}: ln Var(h_l) rises with depth l (slope > {threshold:g} per layer), "
                f"the Pre-LN growth the paper describes in pretrained LLMs; no single layer's "
                f"step may decide it{other}",
                "cod_variance_growth",
                growth,
                scale,
                verdict,
                layer_check=check,
            )
        )
        tokens = sorted({t for _, _, t in replicates})
        distances = [d for _, d, _ in replicates]
        closer, verdict, check = _checked(
            lambda k, distances=distances: over_shards(
                [half_gap(without_layer(d, k)) for d in distances], "half means each"
            ),
            sorted(distances[0].index),
            pv.COD_ANGULAR_NEGLIGIBLE,
        )
        rows.append(
            claim_row(
                f"cod_deep_identity:{name}",
                COD,
                f"{name}: deep layers are closer to identity: mean d(l, l+1) over the "
                f"shallower half - over the deeper half > {pv.COD_ANGULAR_NEGLIGIBLE:g} "
                f"({' / '.join(tokens)}){other}",
                "cod_deep_identity",
                closer,
                scale,
                verdict,
                layer_check=check,
            )
        )
        # layer 0 reads the embedding, whose small norm makes its ratio unbounded (17 in
        # SmolLM2-135M): the ratio is no measure of that layer's contribution
        contribution = [
            f[(f["measure"] == "block_rel_norm") & (f["layer"] >= 1)].set_index("layer")["value"]
            for f in frames
        ]
        less, verdict, check = _checked(
            lambda k, contribution=contribution: over_shards(
                [half_gap(without_layer(c, k)) for c in contribution], "half means each"
            ),
            sorted(contribution[0].index),
            pv.CSORDAS_HALF_CONTRIBUTION_NEGLIGIBLE,
        )
        size = over_shards([half_margin(c) for c in contribution], "half means each")
        rows.append(
            claim_row(
                f"csordas_second_half:{name}",
                CSORDAS,
                f"{name}: the second half contributes less: mean ||h_(l+1) - h_l|| / ||h_l|| "
                f"over layers 1.. of the first half - over the second half > "
                f"{pv.CSORDAS_HALF_CONTRIBUTION_NEGLIGIBLE:g}",
                "csordas_second_half",
                less,
                scale,
                verdict,
                size=(
                    (0.0, math.inf),
                    f"first half > {pv.CSORDAS_FIRST_HALF_ABOVE:g} and second half < "
                    f"{pv.CSORDAS_SECOND_HALF_BELOW:g}: min(first - "
                    f"{pv.CSORDAS_FIRST_HALF_ABOVE:g}, {pv.CSORDAS_SECOND_HALF_BELOW:g} - "
                    f"second) > 0",
                    size,
                ),
                layer_check=check,
            )
        )
        if name in data.single_layer:
            rows.append(_delta_p_depth_row(data, name, scale, other))
    return rows


def _other_architecture(data: RunData, name: str) -> str:
    """Words for a Curse-of-Depth row (a Pre-LN statement) decided on a published LM whose norms
    sit elsewhere: it tests another architecture, and says so."""
    placement = data.pretrained_placement.get(name)
    if placement in (None, "pre"):
        return ""
    return (
        f"; {name} is not Pre-LN ({NORM_PLACEMENTS[placement]}): the paper's Pre-LN statement "
        f"tested on another architecture"
    )


def _delta_p_depth_row(data: RunData, name: str, scale: str, other: str = "") -> dict:
    """cod_delta_p_depth of a pruned published LM: the documents' sampling variance, paired
    window by window (the validation loss increase of every single-layer removal; lm-eval's task
    scores, when the stage ran it, carry no per-item replicates here); the layers of a half are
    no samples. Checked with each layer left out."""
    threshold = pv.COD_DELTA_P_NEGLIGIBLE
    layers = sorted(single_layer_drop(data.single_layer[name])[0].index)
    if has_single_windows(data, name):
        what = "val loss increase"
        gap, verdict, check = _checked(
            lambda k: over_windows(data, name, lambda means: delta_p_half_gap(means, k)),
            layers,
            threshold,
        )
    else:
        drop, what = single_layer_drop(data.single_layer[name])
        gap = Estimate(
            half_gap(drop),
            method="no interval: needs the pruning stage's window_losses.csv (the layers of "
            "each half are not independent samples)",
        )
        verdict, check = decide(gap, verdict_positive(gap, [], threshold), False, []), ""
    return claim_row(
        f"cod_delta_p_depth:{name}",
        COD,
        f"{name}: removing one deep layer hurts less than removing a shallow one: mean {what} "
        f"over the shallower half - over the deeper half > {threshold:g}{other}",
        "cod_delta_p_depth",
        gap,
        scale,
        verdict,
        layer_check=check,
    )


CLAIMS = (
    Claim(
        "cod_variance_growth:<LM>",
        PAPER_VALUES["cod_variance_growth"],
        "OLS slope of ln Var(h_l) over l ≥ 1; also with each layer's step left out",
        "document shards",
        f"> {pv.COD_VARIANCE_SLOPE_NEGLIGIBLE:g}, and no single layer's step decides it",
        "published LMs: yes",
        pretrained_claims,
        ARCHITECTURE,
    ),
    Claim(
        "cod_deep_identity:<LM>",
        PAPER_VALUES["cod_deep_identity"],
        "shallower-half - deeper-half mean d(l, l+1)",
        "document shards",
        f"> {pv.COD_ANGULAR_NEGLIGIBLE:g}",
        "published LMs: yes",
        pretrained_claims,
    ),
    Claim(
        "csordas_second_half:<LM>",
        PAPER_VALUES["csordas_second_half"],
        "first-half - second-half mean relative contribution ||h_(l+1) - h_l|| / ||h_l|| over "
        f"l ≥ 1; size min(first - {pv.CSORDAS_FIRST_HALF_ABOVE:g}, "
        f"{pv.CSORDAS_SECOND_HALF_BELOW:g} - second)",
        "document shards",
        f"> {pv.CSORDAS_HALF_CONTRIBUTION_NEGLIGIBLE:g}; size > 0",
        "published LMs: yes",
        pretrained_claims,
    ),
    Claim(
        "cod_delta_p_depth:<LM>",
        PAPER_VALUES["cod_delta_p_depth"],
        "shallower-half - deeper-half mean single-layer loss increase",
        "validation windows (paired bootstrap)",
        f"> {pv.COD_DELTA_P_NEGLIGIBLE:g} nats",
        "published LMs: yes",
        pretrained_claims,
    ),
)
