"""Csordás et al. rows: linear maps between models and the depth score against problem difficulty."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from depthlab.claims.measures import (
    bonferroni,
    depth_score_trend,
    hardest_level_solved,
    map_error_advantage,
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
    NOT_TESTABLE,
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
    blockers = not_learned(data, members) + [
        r for m in members if (r := hardest_level_solved(data.accuracy[m], family))
    ]
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
    """Per skipped layer s (s < L - 1), the largest mean relative change of a later layer's
    update at future tokens when s is skipped at the earlier ones (variant layer_future of the
    skip stage's effects.csv); None without that variant."""
    rows = effects[(effects["variant"] == "layer_future") & (effects["measure"] == "update")]
    rows = rows[rows["layer"] > rows["skipped"]]
    if rows.empty:
        return None
    return rows.groupby("skipped")["mean"].max().sort_index()


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
    """csordas_future_effect per depth-scored group with the layer_future variant: over seeds
    for models trained here, trained - untrained twin (a random network's skips may already
    spare its later layers); a published LM scored on one document set has no interval."""
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
        extra = ""
        if trained:
            initial = []
            for m, n in zip(members, layers):
                stats = twin(data, m)
                twin_series = None if stats is None or stats.skip_effects is None else (
                    future_effects(stats.skip_effects))  # fmt: skip
                initial.append(None if twin_series is None else future_margin(twin_series, n))
            compared = against_initialisation([Estimate(v) for v in values], initial, 0.0)
            e = compared.delta
            blockers += compared.blockers
            if compared.initial is None:
                blockers.append(
                    "a model trained here without an untrained twin's skip effects: the row "
                    "cannot say what training did"
                )
            else:
                extra = f"; shown: {compared.text}"
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
                f"update change over later layers (layer_future)"
                + (", trained - untrained" if trained else "")
                + extra,
                "csordas_future_effect",
                e,
                scale_of(data, members),
                decide(e, verdict_positive(e, blockers, 0.0), trained, blockers),
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
        "update change (layer_future), trained - untrained",
        "seeds; one document set (published: no interval)",
        "> 0",
        "no: a random 4-layer network already spares its later layers",
        future_effect_rows,
    ),
)
