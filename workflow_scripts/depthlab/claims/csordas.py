"""Csordás et al. rows: linear maps between models, the depth score against problem difficulty,
the effect of skips on future tokens and the mid-depth phase transition of published LMs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from depthlab.claims.measures import (
    bonferroni,
    depth_score_trend,
    hardest_level_solved,
    kl_drop_layer,
    map_error_advantage,
    over_shards,
    sign_flip_layer,
)
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
from depthlab.claims.verdicts import (
    CONFIDENCE,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    REPRODUCED,
    TOO_WIDE,
    Estimate,
    over_seeds,
    verdict_equivalent,
    verdict_positive,
)
from depthlab.core import paper_values as pv
from depthlab.core.paper_values import CSORDAS, PAPER_VALUES


def depth_score_row(data: RunData, group: str, members: list, family: str) -> dict:
    """One depth-score row: the from-scratch statement (Csordás et al.'s MoEUT section: trained
    on the task, more steps use more depth: slope > negligible) for models trained here on the
    problems, the pretrained-LLM statement (no rise: every level within the margin of the
    easiest) for every other model."""
    # the gate decides on the members together (an interval over seeds, or over the problems
    # of one model): one seed's accuracy, or a few answers on another CPU, cannot flip it
    gate = hardest_level_solved([data.accuracy[m] for m in members], family)
    blockers = not_learned(data, members) + ([gate] if gate else [])
    trained = any(m in data.trained for m in members)
    trends = [
        depth_score_trend(
            data.problem_effects[m], family, data.bootstrap["resamples"], data.bootstrap["seed"]
        )
        for m in members
    ]
    levels = trends[0]["levels"]
    scores = np.mean([t["scores"] for t in trends], axis=0) if trends[0]["scores"] else []
    shown = " / ".join(f"{s:.3g}" for s in scores)
    scale = f"{scale_of(data, members)}; normalised depth score by level {levels}: {shown}"
    if all(m in data.task_trained for m in members):
        negligible = pv.CSORDAS_DEPTH_SCORE_SLOPE_NEGLIGIBLE
        slope = over_seeds([t["slope"] for t in trends])
        return claim_row(
            f"csordas_depth_score:{group}:{family}",
            CSORDAS,
            f"tests the from-scratch statement (MoEUT section), not the pretrained-LLM "
            f"one: {group}, trained here on the problems, uses more depth on harder "
            f"{family} problems: slope of the normalised depth score over all levels "
            f"> {negligible:g} per level",
            "csordas_depth_score_scratch",
            slope,
            scale,
            decide(slope, verdict_positive(slope, blockers, negligible), trained, blockers),
        )
    margin = pv.CSORDAS_DEPTH_SCORE_MARGIN
    confidence = bonferroni(CONFIDENCE, max(len(levels) - 1, 1))
    diffs = {
        level: over_seeds([t["diffs"][level] for t in trends], confidence)
        for level in trends[0]["diffs"]
    }
    if not diffs:
        e, verdict = (
            Estimate(math.nan, method="fewer than 2 difficulty levels", n=len(members)),
            (NOT_TESTABLE, "fewer than 2 difficulty levels"),
        )
    else:
        # shown: the level whose difference from the easiest is largest in size
        e = max(diffs.values(), key=lambda d: abs(d.value) if math.isfinite(d.value) else -1)
        rule = verdict_equivalent({f"level {k}": d for k, d in diffs.items()}, margin, blockers)
        verdict = decide(e, rule, trained, blockers)
    return claim_row(
        f"csordas_depth_score:{group}:{family}",
        CSORDAS,
        f"tests the pretrained-LLM statement: {group} on {family}: the depth score does "
        f"not rise with difficulty: every level - the easiest (normalised) inside "
        f"±{margin:g}; shown: the largest difference",
        "csordas_depth_score",
        e,
        scale,
        verdict,
    )


def future_effects(effects: pd.DataFrame) -> pd.Series | None:
    """Per skipped layer s (s < L - 1), the largest relative change of a later layer's update at
    future tokens when s is skipped at the earlier ones: the maximum over the later layers of the
    skip stage's `max` column (variant layer_future of effects.csv: the maximum over every
    measured future position of every prompt), the paper's maximum; None without that variant."""
    rows = effects[(effects["variant"] == "layer_future") & (effects["measure"] == "update")]
    rows = rows[rows["layer"] > rows["skipped"]]
    if rows.empty:
        return None
    return rows.groupby("skipped")["max"].max().sort_index()


def future_margin(per_layer: pd.Series, num_layers: int) -> float:
    """min(first-half mean - small, small - second-half mean) of future_effects (> 0: first-half
    skips change the future computation, second-half skips barely do)."""
    small = pv.CSORDAS_FUTURE_EFFECT_SMALL
    first = per_layer[per_layer.index < num_layers // 2]
    second = per_layer[per_layer.index >= num_layers // 2]
    if first.empty or second.empty:
        return math.nan
    return min(float(first.mean()) - small, small - float(second.mean()))


def future_effect_rows(data: RunData) -> list[dict]:
    """csordas_future_effect per depth-scored group with the layer_future variant, decided on the
    trained models over seeds (the paper's statement is about the trained model); their untrained
    twins fill the twin columns and block only a verdict the initialisation already gives
    (against_initialisation). A published LM scored on one document set has no interval."""
    rows = []
    small = pv.CSORDAS_FUTURE_EFFECT_SMALL
    for group, members in data.depth_groups.items():
        series = [future_effects(data.skip_effects[m]) if m in data.skip_effects else None
                  for m in members]  # fmt: skip
        if any(s is None for s in series):
            continue
        layers = [int(data.skip_effects[m]["skipped"].max()) + 1 for m in members]
        values = [future_margin(s, n) for s, n in zip(series, layers)]
        trained = any(m in data.trained for m in members)
        blockers = not_learned(data, members)
        extra, compared = "", None
        if trained:
            initial = []
            for m, n in zip(members, layers):
                stats = twin(data, m)
                twin_series = None if stats is None or stats.skip_effects is None else (
                    future_effects(stats.skip_effects))  # fmt: skip
                initial.append(None if twin_series is None else future_margin(twin_series, n))
            compared = against_initialisation([Estimate(v) for v in values], initial, 0.0)
            e = compared.trained
            blockers += compared.blockers
            extra = (
                f"; untrained twins beside: {compared.text}"
                if compared.initial is not None
                else f"; {compared.text}"
            )
        else:
            e = Estimate(
                values[0], method="one document set: no interval (the layers are no samples)"
            )
        rows.append(
            claim_row(
                f"csordas_future_effect:{group}",
                CSORDAS,
                f"{group}: skipping a second-half layer barely changes the later layers' "
                f"computation for future tokens, skipping a first-half one does: min(first-half "
                f"mean - {small:g}, {small:g} - second-half mean) > 0 of the largest relative "
                f"update change (maximum over the later layers and over every future position "
                f"of every prompt, layer_future)" + extra,
                "csordas_future_effect",
                e,
                scale_of(data, members),
                decide(e, verdict_positive(e, blockers, 0.0), trained, blockers),
                against=compared,
            )
        )
    return rows


def verdict_below(e: Estimate, tolerance: float, blockers=()) -> tuple[str, str]:
    """The claim: a distance lies within `tolerance`. Decided symmetrically about it: reproduced
    when the whole interval lies below it, not reproduced when the whole interval lies above it,
    not testable when the interval straddles it (too wide) or there is none."""
    if blockers:
        return NOT_TESTABLE, "; ".join(blockers)
    if not math.isfinite(e.value):
        return NOT_TESTABLE, e.method or "no value"
    if not e.has_interval:
        return NOT_TESTABLE, f"{e.method or 'no interval'} (add document shards)"
    shown = f"[{e.low:.4g}, {e.high:.4g}]"
    if e.high < tolerance:
        return REPRODUCED, f"interval {shown} within the tolerance {tolerance:g}"
    if e.low > tolerance:
        return NOT_REPRODUCED, f"interval {shown} beyond the tolerance {tolerance:g}"
    return NOT_TESTABLE, f"interval {shown} straddles the tolerance {tolerance:g}: {TOO_WIDE}"


PHASE_COSINE = "cos_mlp_residual"


def phase_layers(frame: pd.DataFrame) -> tuple:
    """(layer of the largest logit-lens KL drop, layer where the MLP's cosine with the residual
    changes sign, layers L) of one analysis measures.csv frame; None for what it lacks. Layer 0
    is left out of both: it reads the embedding, whose lens and cosine are the token's own (in
    SmolLM2-135M its KL step, 13.0 -> 8.5 nats, and its cosine, the only negative one before
    layer 10, would pair at the front by themselves)."""
    kl = frame[(frame["measure"] == "logit_lens_kl") & (frame["layer"] >= 1)]
    cos = frame[(frame["measure"] == PHASE_COSINE) & (frame["layer"] >= 1)]
    kl, cos = kl.set_index("layer")["value"], cos.set_index("layer")["value"]
    num_layers = int(cos.index.max()) + 1 if not cos.empty else None
    drop = kl_drop_layer(kl) if not kl.empty else None
    flip = sign_flip_layer(cos) if not cos.empty else None
    return drop, flip, num_layers


def phase_transition_rows(data: RunData) -> list[dict]:
    """csordas_phase_transition per published LM: per document shard, |layer of the largest KL
    drop - layer of the cosine's sign change| / L (relative depth), over the shards with a
    t-interval (the documents' sampling variance); within CSORDAS_PHASE_TOLERANCE: the same depth."""
    rows = []
    tolerance = pv.CSORDAS_PHASE_TOLERANCE
    for name, replicates in data.pretrained.items():
        found = [phase_layers(frame) for frame, _, _ in replicates]
        blockers = []
        if any(drop is None for drop, _, _ in found):
            blockers.append(
                "a document shard without a logit lens (logit_lens_kl in its measures.csv: the "
                "analysis text set drew no lens)"
            )
        if any(flip is None for _, flip, _ in found):
            blockers.append(f"a document shard whose {PHASE_COSINE} does not change sign")
        distances = [
            abs(drop - flip) / layers
            for drop, flip, layers in found
            if drop is not None and flip is not None
        ]
        e = (
            over_shards(distances, "|KL-drop layer - sign-change layer| / L each")
            if distances and not blockers
            else Estimate(math.nan, method="no shard with both", n=1)
        )
        shown = " / ".join(
            f"{'?' if d is None else d}-{'?' if f is None else f}" for d, f, _ in found
        )
        layers = next((n for _, _, n in found if n), None)
        scale = (
            f"{data.pretrained_scale.get(name, name)}; per shard, KL-drop layer - sign-change "
            f"layer: {shown}" + (f" (of {layers} layers)" if layers else "")
        )
        rows.append(
            claim_row(
                f"csordas_phase_transition:{name}",
                CSORDAS,
                f"{name}: the mid-depth phase transition: the logit lens' KL(p_l || p_L) drops "
                f"most (largest drop between successive states; layer 0 and the last layer's "
                f"step left out) at the layer where {PHASE_COSINE} (the MLP output's cosine "
                f"with the residual; layer 0 left out) changes sign (the best one-step fit of "
                f"its signs): |the two layers' difference| / L < {tolerance:g}",
                "csordas_phase_transition",
                e,
                scale,
                decide(e, verdict_below(e, tolerance, blockers), False, blockers),
            )
        )
    return rows


def csordas_claims(data: RunData) -> list[dict]:
    """csordas_linear_maps per mapped pair and csordas_depth_score per group and family."""
    rows = []
    negligible = pv.CSORDAS_MAP_ERROR_NEGLIGIBLE
    for key, pairs in data.map_groups.items():
        if not all(p in data.map_errors for p in pairs):
            continue
        ends = [data.map_ends[p] for p in pairs]
        models = [m for s, t, _ in ends for m in (s, t)]
        blockers = not_learned(data, models)
        trained = any(m in data.trained for m in models)
        gain = over_seeds([map_error_advantage(data.map_errors[p]) for p in pairs])
        source, target, _ = ends[0]
        scale = f"{data.scale.get(source, source)} -> {data.scale.get(target, target)}"
        rows.append(
            claim_row(
                f"csordas_linear_maps:{key}",
                CSORDAS,
                f"{key}: mapping each source layer to the target layer at its relative "
                f"depth beats the best depth-blind map (one target layer for all): "
                f"mean over source layers of err(s, c*) - err(s, equal depth) > "
                f"{negligible:g} (relative error)",
                "csordas_linear_maps",
                gain,
                scale,
                decide(gain, verdict_positive(gain, blockers, negligible), trained, blockers),
            )
        )
    for group, members in data.depth_groups.items():
        if not all(m in data.problem_effects for m in members):
            continue
        for family in sorted(set(data.problem_effects[members[0]]["family"])):
            rows.append(depth_score_row(data, group, members, family))
    return rows


CLAIMS = (
    Claim(
        "csordas_linear_maps:<pair>",
        PAPER_VALUES["csordas_linear_maps"],
        "err(s, best depth-blind target) - err(s, equal depth), mean over source layers",
        "seeds",
        f"> {pv.CSORDAS_MAP_ERROR_NEGLIGIBLE:g}",
        "no: the sweep models did not learn; not yet against the twin",
        csordas_claims,
    ),
    Claim(
        "csordas_depth_score:<LM>:<family>",
        PAPER_VALUES["csordas_depth_score"],
        "normalised depth score of each difficulty level - the easiest level's",
        "problems (bootstrap, Bonferroni over the levels)",
        f"equivalence: every level inside ±{pv.CSORDAS_DEPTH_SCORE_MARGIN:g}",
        "needs the hardest level above chance",
        csordas_claims,
    ),
    Claim(
        "csordas_depth_score:<trained on the problems>:<family>",
        PAPER_VALUES["csordas_depth_score_scratch"],
        "OLS slope of the normalised depth score over the difficulty levels",
        "seeds",
        f"> {pv.CSORDAS_DEPTH_SCORE_SLOPE_NEGLIGIBLE:g} per level",
        "needs the hardest level above chance; not yet against the twin",
        csordas_claims,
    ),
    Claim(
        "csordas_future_effect:<group>",
        PAPER_VALUES["csordas_future_effect"],
        f"min(first-half mean - {pv.CSORDAS_FUTURE_EFFECT_SMALL:g}, "
        f"{pv.CSORDAS_FUTURE_EFFECT_SMALL:g} - second-half mean) of the largest later-layer "
        "update change (the maximum over later layers, future positions and prompts: "
        "layer_future's max), of the trained models",
        "seeds; one document set (published: no interval)",
        "> 0, decided on the trained models; the untrained twins block only a verdict they "
        "already give and training did not move",
        "partly: the default suite's depth_problems models have 4 layers (one second-half "
        "skip with a later layer). A random 4-layer network does not spare its later layer (its "
        "twins' skip effects lie far above the threshold), so a pass would be training's; a "
        "fail that training did not move is the initialisation's: not testable",
        future_effect_rows,
    ),
    Claim(
        "csordas_phase_transition:<LM>",
        PAPER_VALUES["csordas_phase_transition"],
        f"|layer of the largest logit-lens KL drop - layer where {PHASE_COSINE} changes sign| "
        "/ L (relative depth)",
        "document shards (t-interval)",
        f"< {pv.CSORDAS_PHASE_TOLERANCE:g} of the depth: reproduced inside, not reproduced "
        "wholly outside, not testable otherwise (or without a lens or a sign change)",
        "published LMs: yes, on every document shard with a logit lens (the default: SmolLM2 "
        "and Gemma-3 over their shards)",
        phase_transition_rows,
    ),
)
