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
)
from depthlab.claims.rows import (
    Claim,
    claim_row,
    decide,
    has_single_windows,
    over_windows,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    Estimate,
    verdict_positive,
)
from depthlab.core import paper_values as pv
from depthlab.core.paper_values import COD, CSORDAS, PAPER_VALUES


def half_margin(contribution) -> float:
    """min(first-half mean - CSORDAS_FIRST_HALF_ABOVE, CSORDAS_SECOND_HALF_BELOW - second-half
    mean) of a per-layer relative contribution: > 0 when both of the paper's sizes hold."""
    first, second = halves(contribution)
    return min(
        float(np.mean(first)) - pv.CSORDAS_FIRST_HALF_ABOVE,
        pv.CSORDAS_SECOND_HALF_BELOW - float(np.mean(second)),
    )


def pretrained_claims(data: RunData) -> list[dict]:
    """The papers' statements about pretrained LMs, tested on each model not trained here: its
    hidden-state measures per document shard (intervals over shards carry the sampling variance
    of the documents) and, when pruned, its single-layer removal table."""
    rows = []
    for name, replicates in data.pretrained.items():
        scale = data.pretrained_scale.get(name, name)

        def positive(e, negligible):
            return decide(e, verdict_positive(e, [], negligible), False, [])

        frames = [frame for frame, _, _ in replicates]
        h_var = [f[f["measure"] == "h_var"].set_index("layer")["value"] for f in frames]
        growth = over_shards([log_variance_slope(v).value for v in h_var], "OLS slope each")
        rows.append(
            claim_row(
                f"cod_variance_growth:{name}",
                COD,
                f"{name}: ln Var(h_l) rises with depth l (slope > "
                f"{pv.COD_VARIANCE_SLOPE_NEGLIGIBLE:g} per layer), the Pre-LN growth the paper "
                f"describes in pretrained LLMs",
                "cod_variance_growth",
                growth,
                scale,
                positive(growth, pv.COD_VARIANCE_SLOPE_NEGLIGIBLE),
            )
        )
        tokens = sorted({t for _, _, t in replicates})
        closer = over_shards([half_gap(d) for _, d, _ in replicates], "half means each")
        rows.append(
            claim_row(
                f"cod_deep_identity:{name}",
                COD,
                f"{name}: deep layers are closer to identity: mean d(l, l+1) over the "
                f"shallower half - over the deeper half > {pv.COD_ANGULAR_NEGLIGIBLE:g} "
                f"({' / '.join(tokens)})",
                "cod_deep_identity",
                closer,
                scale,
                positive(closer, pv.COD_ANGULAR_NEGLIGIBLE),
            )
        )
        # layer 0 reads the embedding, whose small norm makes its ratio unbounded (17 in
        # SmolLM2-135M): one such layer would decide the comparison alone
        contribution = [
            f[(f["measure"] == "block_rel_norm") & (f["layer"] >= 1)].set_index("layer")["value"]
            for f in frames
        ]
        less = over_shards([half_gap(c) for c in contribution], "half means each")
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
                positive(less, pv.CSORDAS_HALF_CONTRIBUTION_NEGLIGIBLE),
                size=(
                    (0.0, math.inf),
                    f"first half > {pv.CSORDAS_FIRST_HALF_ABOVE:g} and second half < "
                    f"{pv.CSORDAS_SECOND_HALF_BELOW:g}: min(first - "
                    f"{pv.CSORDAS_FIRST_HALF_ABOVE:g}, {pv.CSORDAS_SECOND_HALF_BELOW:g} - "
                    f"second) > 0",
                    size,
                ),
            )
        )
        if name in data.single_layer:
            # the documents' sampling variance, paired window by window: the validation loss
            # increase of every single-layer removal (lm-eval's task scores, when the stage ran
            # it, carry no per-item replicates here); the layers of a half are no samples
            if has_single_windows(data, name):
                gap, what = over_windows(data, name, delta_p_half_gap), "val loss increase"
            else:
                drop, what = single_layer_drop(data.single_layer[name])
                gap = Estimate(
                    half_gap(drop),
                    method="no interval: needs the pruning stage's window_losses.csv (the "
                    "layers of each half are not independent samples)",
                )
            rows.append(
                claim_row(
                    f"cod_delta_p_depth:{name}",
                    COD,
                    f"{name}: removing one deep layer hurts less than removing a shallow one: "
                    f"mean {what} over the shallower half - over the deeper half > "
                    f"{pv.COD_DELTA_P_NEGLIGIBLE:g}",
                    "cod_delta_p_depth",
                    gap,
                    scale,
                    positive(gap, pv.COD_DELTA_P_NEGLIGIBLE),
                )
            )
    return rows


CLAIMS = (
    Claim(
        "cod_variance_growth:<LM>",
        PAPER_VALUES["cod_variance_growth"],
        "OLS slope of ln Var(h_l) over l ≥ 1",
        "document shards",
        f"> {pv.COD_VARIANCE_SLOPE_NEGLIGIBLE:g}",
        "published LMs: yes",
        pretrained_claims,
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
