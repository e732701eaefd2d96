"""Curse of Depth rows (Sun et al.): Pre-LN vs LNS trained here, over pretraining seeds, and the
supervised fine-tuning gain."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from depthlab.claims.measures import (
    deep_layer_gap,
    log_variance_slope,
    mean_task_score,
    single_layer_drop,
)
from depthlab.claims.rows import (
    claim_row,
    decide,
    not_learned,
    scale_of,
    seed_pairs,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    MIN_SEEDS,
    Estimate,
    band_text,
    difference,
    over_seeds,
    t_interval,
    verdict_positive,
)
from depthlab.core import paper_values as pv
from depthlab.core.paper_values import COD, PAPER_VALUES


@dataclass(frozen=True)
class _Pair:
    """One Pre-LN / LNS comparison: both groups' seeds paired seed by seed, and what every one
    of its rows shares (scale, claim-id suffix, blockers, the seed gate)."""

    base: str
    treat: str
    pairs: list
    members: list
    trained: bool
    blockers: list
    scale: str
    suffix: str

    def positive(self, e, threshold: float) -> tuple[str, str]:
        rule = verdict_positive(e, self.blockers, threshold)
        return decide(e, rule, self.trained, self.blockers)


def cod_claims(data: RunData) -> list[dict]:
    rows = []
    for base, base_members, treat, treat_members in data.cod_pairs:
        pairs = seed_pairs(base_members, treat_members)
        members = [m for pair in pairs for m in pair]
        pair = _Pair(
            base,
            treat,
            pairs,
            members,
            any(m in data.trained for m in members),
            not_learned(data, members),
            scale_of(data, base_members),
            f":{base}-vs-{treat}" if len(data.cod_pairs) > 1 else "",
        )
        rows += _variance_rows(data, pair) + _loss_and_layer_rows(data, pair)
    return rows


def _variance_rows(data: RunData, pair: _Pair) -> list[dict]:
    """cod_variance_growth (Pre-LN's own growth) and cod_lns_variance (LNS grows less)."""
    base, treat, pairs, members = pair.base, pair.treat, pair.pairs, pair.members
    suffix, scale, positive = pair.suffix, pair.scale, pair.positive
    rows = []
    if all(m in data.h_var for m in members):
        growth = over_seeds([log_variance_slope(data.h_var[b]) for b, _ in pairs])
        rows.append(
            claim_row(
                f"cod_variance_growth{suffix}",
                COD,
                f"{base}: ln Var(h_l) rises with depth l (slope > "
                f"{pv.COD_VARIANCE_SLOPE_NEGLIGIBLE:g}); a precondition of the "
                f"paper's argument, which cod_lns_variance tests",
                "cod_variance_growth",
                growth,
                scale,
                positive(growth, pv.COD_VARIANCE_SLOPE_NEGLIGIBLE),
            )
        )
        less = over_seeds(
            [
                difference(log_variance_slope(data.h_var[b]), log_variance_slope(data.h_var[t]))
                for b, t in pairs
            ]
        )
        rows.append(
            claim_row(
                f"cod_lns_variance{suffix}",
                COD,
                f"{treat}'s variance grows less: slope({base}) - slope({treat}) > "
                f"{pv.COD_VARIANCE_SLOPE_NEGLIGIBLE:g}",
                "cod_variance_growth",
                less,
                scale,
                positive(less, pv.COD_VARIANCE_SLOPE_NEGLIGIBLE),
            )
        )

    return rows


def _loss_and_layer_rows(data: RunData, pair: _Pair) -> list[dict]:
    """cod_val_loss, cod_angular_distance and cod_delta_p."""
    base, treat, pairs, members = pair.base, pair.treat, pair.pairs, pair.members
    suffix, scale, positive = pair.suffix, pair.scale, pair.positive
    rows = []
    if all(m in data.val_loss for m in members):
        gain = over_seeds([Estimate(data.val_loss[b] - data.val_loss[t]) for b, t in pairs])
        band = pv.COD_LNS_GAIN_BAND
        rows.append(
            claim_row(
                f"cod_val_loss{suffix}",
                COD,
                f"{treat} reaches a lower validation loss: loss({base}) - "
                f"loss({treat}) > {pv.COD_LNS_GAIN_NEGLIGIBLE:g} nats",
                "cod_lns_gain",
                gain,
                scale,
                positive(gain, pv.COD_LNS_GAIN_NEGLIGIBLE),
                f"gain {PAPER_VALUES['cod_lns_gain'].describe()} nats = ln of "
                f"perplexity Pre-LN {PAPER_VALUES['cod_ppl_pre_ln'].describe()} / "
                f"LNS {PAPER_VALUES['cod_ppl_lns'].describe()}",
                size=(band, band_text(band, " nats"), gain),
            )
        )
    if all(m in data.distance for m in members):
        gap = over_seeds([deep_layer_gap(data.distance[b], data.distance[t]) for b, t in pairs])
        tokens = sorted({data.distance_tokens.get(m, "last token") for m in members})
        rows.append(
            claim_row(
                f"cod_angular_distance{suffix}",
                COD,
                f"deep {base} layers are closer to identity: mean over the deeper "
                f"half of d(l, l+1)[{treat}] - d(l, l+1)[{base}] > "
                f"{pv.COD_ANGULAR_NEGLIGIBLE:g} ({' / '.join(tokens)}"
                f"{'' if tokens == ['all tokens'] else '; the paper: all tokens'})",
                "cod_angular_distance",
                gap,
                scale,
                positive(gap, pv.COD_ANGULAR_NEGLIGIBLE),
            )
        )
    if all(m in data.single_layer for m in members):
        drops = [
            (single_layer_drop(data.single_layer[b]), single_layer_drop(data.single_layer[t]))
            for b, t in pairs
        ]
        what = drops[0][0][1]
        gap = over_seeds([deep_layer_gap(db[0], dt[0]) for db, dt in drops])
        rows.append(
            claim_row(
                f"cod_delta_p{suffix}",
                COD,
                f"removing one deep {base} layer hurts less: mean over the deeper "
                f"half of {what}[{treat}] - {what}[{base}] > "
                f"{pv.COD_DELTA_P_NEGLIGIBLE:g}",
                "cod_delta_p",
                gap,
                scale,
                positive(gap, pv.COD_DELTA_P_NEGLIGIBLE),
            )
        )

    return rows


def sft_gains(base: pd.DataFrame, treat: pd.DataFrame) -> list[Estimate]:
    """Per fine-tuning seed both parents share: mean task score of the LNS parent's fine-tuned
    model - that of the Pre-LN parent's (evaluate_finetuned scores.csv frames), with the standard
    error of that difference from the items (mean_task_score of each model's task rows)."""
    from depthlab.stages.finetune.scores import FINETUNED

    def after(scores):
        tuned = scores[scores["stage"] == FINETUNED]
        return {seed: mean_task_score(rows) for seed, rows in tuned.groupby("seed", sort=False)}

    base_after, treat_after = after(base), after(treat)
    return [difference(treat_after[s], base_after[s]) for s in base_after if s in treat_after]


def finetune_claims(data: RunData) -> list[dict]:
    """cod_sft_gain, decided over pretraining seeds: the claim is about the pretraining norm
    scheme, so each Pre-LN / LNS parent pair (pretraining seed i with seed i) gives one gain, the
    mean over the fine-tuning seeds it was fine-tuned with; fine-tuning seeds of one parent pair
    only make that pair's gain more precise and are never counted as seeds. One parent per
    scheme: one seed, indicative (the row shows the interval over its fine-tuning runs)."""
    rows = []
    for base, base_members, treat, treat_members in data.finetune_pairs:
        pairs = seed_pairs(base_members, treat_members)
        per_parent = [
            gains
            for b, t in pairs
            if (gains := sft_gains(data.finetune_scores[b], data.finetune_scores[t]))
        ]
        if not per_parent:
            continue
        members = [m for pair in pairs for m in pair]
        blockers = not_learned(data, members)
        parent_gains = [
            replace(
                t_interval([g.value for g in gains], "fine-tuning runs of one parent pair"),
                n=1,
            )
            for gains in per_parent
        ]
        # every parent pair scored on the same items: their error is shared by the seeds
        item_errors = [math.sqrt(np.mean([g.se**2 for g in gains])) for gains in per_parent]
        gain = over_seeds(parent_gains, sample_se=item_errors)
        if len(parent_gains) >= MIN_SEEDS:
            gain = replace(gain, method=f"{gain.method} (pretraining seeds)")
        runs = sum(len(gains) for gains in per_parent)
        scale = (
            f"{scale_of(data, base_members)}; {runs} fine-tuning run{'s' if runs > 1 else ''} "
            f"of {len(per_parent)} pretrained parent{'s' if len(per_parent) > 1 else ''} per "
            f"scheme"
        )
        suffix = f":{base}-vs-{treat}" if len(data.finetune_pairs) > 1 else ""
        verdict = verdict_positive(gain, blockers, pv.COD_SFT_GAIN_NEGLIGIBLE)
        rows.append(
            claim_row(
                f"cod_sft_gain{suffix}",
                COD,
                f"after the same supervised fine-tuning {treat} stays ahead: mean task accuracy "
                f"of fine-tuned {treat} - fine-tuned {base} > {pv.COD_SFT_GAIN_NEGLIGIBLE:g}, "
                f"over pretraining seeds",
                "cod_sft_gain",
                gain,
                scale,
                decide(gain, verdict, True, blockers),
            )
        )
    return rows
