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
    sweep_layers,
    without_layer,
)
from depthlab.claims.rows import (
    ARCHITECTURE,
    Claim,
    claim_row,
    decide,
    has_single_windows,
    over_windows,
    positive_without_each_layer,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    NOT_TESTABLE,
    Estimate,
    difference,
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
        growth, verdict, check = positive_without_each_layer(
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
        closer, verdict, check = positive_without_each_layer(
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
        less, verdict, check = positive_without_each_layer(
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
        gap, verdict, check = positive_without_each_layer(
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


def removable_share(means: dict, num_layers: int, tolerance: float) -> float:
    """The largest share n / L of the layers whose angular block costs at most `tolerance` nats
    of validation loss over the intact model (window_means keys "angular:<n>", "full"), scanned
    from the smallest n: a block past the first that costs more ends the scan (0 when the
    smallest already does)."""
    ns = sorted(int(k.split(":", 1)[1]) for k in means if k.startswith("angular:"))
    share = 0.0
    for n in ns:
        if n < 1:
            continue
        if means[f"angular:{n}"] - means["full"] > tolerance:
            break
        share = n / num_layers
    return share


def _removable_share(data: RunData, name: str, tolerance: float) -> Estimate:
    """removable_share of a pruned model, bootstrapped over its validation windows."""
    layers = sweep_layers(data.sweeps[name])
    return over_windows(data, name, lambda means: removable_share(means, layers, tolerance))


def _layer_params(sweep) -> float:
    """Non-embedding parameters of a pruned model's decoder layers, from its sweep's
    removed_params (the parameters of n removed layers) scaled to all of them."""
    if "removed_params" not in sweep:
        return math.nan
    rows = sweep[(sweep["n"] >= 1) & (sweep["removed_params"] > 0)]
    if rows.empty:
        return math.nan
    per_layer = float((rows["removed_params"] / rows["n"]).median())
    return per_layer * sweep_layers(sweep)


def removable_rows(data: RunData) -> list[dict]:
    """cod_removable_grows: for each pair of pruned published LMs in order of their decoder
    parameters, the larger's removable share of layers (removable_share at COD_REMOVABLE_LOSS)
    - the smaller's, each bootstrapped over its own validation windows (independent documents
    per model: a normal interval from the two bootstrap errors). One row saying why when one
    published LM was pruned with window losses; none when none was."""
    tolerance, negligible = pv.COD_REMOVABLE_LOSS, pv.COD_REMOVABLE_SHARE_NEGLIGIBLE
    pruned = [
        name
        for name in data.pruning_groups
        if name not in data.trained and has_single_windows(data, name) and name in data.sweeps
    ]
    # by size (a model whose sweep records no removed parameters cannot be placed: left out)
    sizes = {name: _layer_params(data.sweeps[name]) for name in pruned}
    pruned = sorted((n for n in pruned if math.isfinite(sizes[n])), key=sizes.get)
    claim = (
        f"the larger published LM can lose a larger share of its layers at a fixed loss: "
        f"largest n / L whose angular block costs <= {tolerance:g} nats, larger model - smaller "
        f"> {negligible:g}"
    )
    if not pruned:
        return []
    if len(pruned) < 2:
        return [
            claim_row(
                "cod_removable_grows:published",
                COD,
                claim,
                "cod_removable_grows",
                Estimate(math.nan),
                ", ".join(pruned) or "no published LM pruned",
                (
                    NOT_TESTABLE,
                    f"needs pruned published LMs of two sizes (pruned: {', '.join(pruned) or 'none'}"
                    f"; pruning.models; config/real_lms.yaml prunes SmolLM2 and Gemma-3)",
                ),
            )
        ]
    rows = []
    for small, large in zip(pruned, pruned[1:]):
        shares = [_removable_share(data, name, tolerance) for name in (small, large)]
        gap = difference(shares[1], shares[0])
        params = [_layer_params(data.sweeps[name]) / 1e6 for name in (small, large)]
        sizes = f"{params[0]:.0f}M vs {params[1]:.0f}M decoder parameters"
        rows.append(
            claim_row(
                f"cod_removable_grows:{small}-vs-{large}",
                COD,
                f"{large} vs {small}: {claim} (shares {shares[1].value:.3g} vs "
                f"{shares[0].value:.3g})",
                "cod_removable_grows",
                gap,
                f"{small} and {large} ({sizes})",
                decide(gap, verdict_positive(gap, [], negligible), False, []),
            )
        )
    return rows


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
        f"> {pv.COD_ANGULAR_NEGLIGIBLE:g}, no single layer deciding",
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
        f"> {pv.CSORDAS_HALF_CONTRIBUTION_NEGLIGIBLE:g}, no single layer deciding; size > 0",
        "published LMs: yes",
        pretrained_claims,
    ),
    Claim(
        "cod_delta_p_depth:<LM>",
        PAPER_VALUES["cod_delta_p_depth"],
        "shallower-half - deeper-half mean single-layer loss increase",
        "validation windows (paired bootstrap)",
        f"> {pv.COD_DELTA_P_NEGLIGIBLE:g} nats, no single layer deciding",
        "published LMs: yes",
        pretrained_claims,
    ),
    Claim(
        "cod_removable_grows:<smaller>-vs-<larger>",
        PAPER_VALUES["cod_removable_grows"],
        f"largest share n / L of layers whose angular block costs ≤ {pv.COD_REMOVABLE_LOSS:g} "
        "nats, larger - smaller published LM (by decoder parameters)",
        "validation windows (bootstrap per model)",
        f"> {pv.COD_REMOVABLE_SHARE_NEGLIGIBLE:g}",
        "default: no (one published LM pruned); real_lms: SmolLM2 and Gemma-3; paper: yes",
        removable_rows,
    ),
)
