"""Curse of Depth rows (Sun et al.): Pre-LN vs LNS trained here, over pretraining seeds, and the
supervised fine-tuning gain."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from depthlab.claims.measures import (
    deep_layer_gap,
    half_gap,
    log_variance_slope,
    mean_task_score,
    no_room,
    over_shards,
    single_layer_drop,
    states_without_layer,
    without_layer,
)
from depthlab.claims.rows import (
    ARCHITECTURE,
    AgainstInit,
    Claim,
    against_initialisation,
    claim_row,
    decide,
    learned_threshold,
    not_learned,
    positive_without_each_layer,
    scale_of,
    seed_pairs,
    twin,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    MIN_SEEDS,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    REPRODUCED,
    TOO_WIDE,
    Estimate,
    band_text,
    difference,
    over_seeds,
    t_interval,
    verdict_positive,
    with_seeds,
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

    def positive(self, e, threshold: float, extra=()) -> tuple[str, str]:
        blockers = self.blockers + list(extra)
        rule = verdict_positive(e, blockers, threshold)
        return decide(e, rule, self.trained, blockers)

    def checked(self, e_of, layers, threshold: float, extra=()) -> tuple[Estimate, tuple, str]:
        """(the row's Estimate over seeds, its verdict, layer_check words): `e_of(k)` the
        Estimate with layer k left out of every seed's profile (None: every layer); a layer
        whose removal flips the verdict makes the row not decided."""
        return positive_without_each_layer(
            e_of, layers, threshold, self.blockers + list(extra), self.trained
        )

    def measured_in(self, table: dict) -> bool:
        """Whether every seed of both groups has an entry in `table` (a RunData field)."""
        return all(m in table for m in self.members)

    def row(self, claim_id: str, claim: str, key: str, e, verdict, *more, **extra) -> dict:
        """One of the pair's rows (claim_row with the pair's claim-id suffix and scale)."""
        row_id = f"{claim_id}{self.suffix}"
        return claim_row(row_id, COD, claim, key, e, self.scale, verdict, *more, **extra)


def pair_claims(data: RunData) -> list[dict]:
    """The rows of every Pre-LN / LNS pair trained here (variance, loss, distance, ΔP)."""
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


def _twin_value(data: RunData, name: str, statistic):
    """statistic(untrained twin of `name`), or None without a twin or the tables it reads."""
    stats = twin(data, name)
    if stats is None:
        return None
    try:
        value = statistic(stats)
    except (TypeError, KeyError, AttributeError):
        return None
    return None if value is None else float(value)


def _twin_slope(stats) -> float:
    return log_variance_slope(stats.h_var).value


def _shown(claim: str, compared: AgainstInit) -> str:
    """The claim's words with the twins' side of it (values, where training moved it, notes)."""
    if compared.initial is None:
        return claim
    return "; ".join([claim, *compared.notes, f"untrained twins beside: {compared.text}"])


def _variance_rows(data: RunData, pair: _Pair) -> list[dict]:
    """cod_variance_growth (Pre-LN's own growth) and cod_lns_variance (LNS grows less), each
    against the untrained twins: trained - untrained over seeds."""
    base, treat, pairs = pair.base, pair.treat, pair.pairs
    threshold = pv.COD_VARIANCE_SLOPE_NEGLIGIBLE
    rows = []
    if not pair.measured_in(data.h_var):
        return rows
    layers = range(int(data.h_var[pairs[0][0]].index.max()))
    growth = against_initialisation(
        [log_variance_slope(data.h_var[b]) for b, _ in pairs],
        [_twin_value(data, b, _twin_slope) for b, _ in pairs],
        threshold,
        ARCHITECTURE,
    )
    value, verdict, check = pair.checked(
        lambda k: over_seeds(
            [log_variance_slope(states_without_layer(data.h_var[b], k)) for b, _ in pairs]
        ),
        layers,
        threshold,
        growth.blockers,
    )
    rows.append(
        pair.row(
            "cod_variance_growth",
            _shown(
                f"{base}: ln Var(h_l) rises with depth l: OLS slope over l >= 1 > "
                f"{threshold:g} per layer, trained; a precondition of the paper's argument, "
                f"which cod_lns_variance tests",
                growth,
            ),
            "cod_variance_growth",
            value,
            verdict,
            against=growth,
            layer_check=check,
        )
    )

    def gap(stats_b, stats_t):
        return _twin_slope(stats_b) - _twin_slope(stats_t)

    def slope_gaps(k):
        return [
            difference(
                log_variance_slope(states_without_layer(data.h_var[b], k)),
                log_variance_slope(states_without_layer(data.h_var[t], k)),
            )
            for b, t in pairs
        ]

    less = against_initialisation(
        slope_gaps(None),
        [
            None if twin(data, b) is None or twin(data, t) is None
            else gap(twin(data, b), twin(data, t))
            for b, t in pairs
        ],
        threshold,
        ARCHITECTURE,
    )  # fmt: skip
    value, verdict, check = pair.checked(
        lambda k: over_seeds(slope_gaps(k)), layers, threshold, less.blockers
    )
    rows.append(
        pair.row(
            "cod_lns_variance",
            _shown(
                f"{treat}'s variance grows less: slope({base}) - slope({treat}) > "
                f"{threshold:g}, trained",
                less,
            ),
            "cod_variance_growth",
            value,
            verdict,
            against=less,
            layer_check=check,
        )
    )
    return rows


def _val_loss_row(data: RunData, pair: _Pair) -> dict | None:
    """cod_val_loss against the untrained twins."""
    base, treat, pairs = pair.base, pair.treat, pair.pairs
    if not pair.measured_in(data.val_loss):
        return None
    band = pv.COD_LNS_GAIN_BAND
    threshold = pv.COD_LNS_GAIN_NEGLIGIBLE
    gain = against_initialisation(
        [Estimate(data.val_loss[b] - data.val_loss[t]) for b, t in pairs],
        [_twin_loss_gap(data, b, t) for b, t in pairs],
        threshold,
    )
    return pair.row(
        "cod_val_loss",
        _shown(
            f"{treat} reaches a lower validation loss after pretraining: loss({base}) - "
            f"loss({treat}) > {threshold:g} nats",
            gain,
        ),
        "cod_lns_gain",
        gain.trained,
        pair.positive(gain.trained, threshold, gain.blockers + _budget(data, pair.members)),
        f"gain {PAPER_VALUES['cod_lns_gain'].describe()} nats = ln of "
        f"perplexity Pre-LN {PAPER_VALUES['cod_ppl_pre_ln'].describe()} / "
        f"LNS {PAPER_VALUES['cod_ppl_lns'].describe()}",
        size=(band, band_text(band, " nats"), gain.trained),
        against=gain,
    )


def _angular_distance_row(data: RunData, pair: _Pair) -> dict | None:
    """cod_angular_distance (all tokens, Sec. 5.5) against the untrained twins."""
    base, treat, pairs = pair.base, pair.treat, pair.pairs
    if not pair.measured_in(data.distance):
        return None
    threshold = pv.COD_ANGULAR_NEGLIGIBLE
    tokens = sorted({data.distance_tokens.get(m, "last token") for m in pair.members})

    def gaps(k):
        return [
            deep_layer_gap(without_layer(data.distance[b], k), without_layer(data.distance[t], k))
            for b, t in pairs
        ]

    distance = against_initialisation(
        gaps(None),
        [
            None if twin(data, b) is None or twin(data, t) is None
            else deep_layer_gap(twin(data, b).distance, twin(data, t).distance).value
            for b, t in pairs
        ],
        threshold,
    )  # fmt: skip
    blockers = list(distance.blockers)
    if tokens != ["all tokens"]:
        blockers.append(
            "the analysis measured the distance on the last token only; the paper's Eq. 1 "
            "averages all tokens (analysis.all_token_distance: true)"
        )
    value, verdict, check = pair.checked(
        lambda k: over_seeds(gaps(k)), sorted(data.distance[pairs[0][0]].index), threshold,
        blockers,
    )  # fmt: skip
    return pair.row(
        "cod_angular_distance",
        _shown(
            f"deep {base} layers are closer to identity than {treat}'s: mean over the "
            f"deeper half of d(l, l+1)[{treat}] - d(l, l+1)[{base}] > {threshold:g} "
            f"({' / '.join(tokens)})",
            distance,
        ),
        "cod_angular_distance",
        value,
        verdict,
        against=distance,
        layer_check=check,
    )


def _delta_p_row(data: RunData, pair: _Pair) -> dict | None:
    """cod_delta_p against the untrained twins."""
    base, treat, pairs = pair.base, pair.treat, pair.pairs
    if not pair.measured_in(data.single_layer):
        return None
    drops = [
        (single_layer_drop(data.single_layer[b]), single_layer_drop(data.single_layer[t]))
        for b, t in pairs
    ]
    what = drops[0][0][1]
    threshold, threshold_text = learned_threshold(
        data, [b for b, _ in pairs], pv.COD_DELTA_P_NEGLIGIBLE
    )
    deep_cost = [
        max(float(d[0][d[0].index >= len(d[0]) // 2].mean()) for d in both) for both in drops
    ]
    room = no_room(deep_cost, threshold, "one deep layer, the costlier scheme's mean")

    def gaps(k):
        return [
            deep_layer_gap(without_layer(db[0], k), without_layer(dt[0], k)) for db, dt in drops
        ]

    removal = against_initialisation(
        gaps(None),
        [_twin_drop_gap(data, b, t) if what == "val loss increase" else None for b, t in pairs],
        threshold,
    )
    value, verdict, check = pair.checked(
        lambda k: over_seeds(gaps(k)), sorted(drops[0][0][0].index), threshold,
        removal.blockers + room,
    )  # fmt: skip
    return pair.row(
        "cod_delta_p",
        _shown(
            f"removing one deep {base} layer hurts less than one deep {treat} layer: "
            f"mean over the deeper half of {what}[{treat}] - {what}[{base}] > "
            f"{threshold_text}",
            removal,
        ),
        "cod_delta_p",
        value,
        verdict,
        against=removal,
        layer_check=check,
    )


def _loss_and_layer_rows(data: RunData, pair: _Pair) -> list[dict]:
    """cod_val_loss, cod_angular_distance and cod_delta_p, against the untrained twins."""
    rows = (_val_loss_row(data, pair), _angular_distance_row(data, pair), _delta_p_row(data, pair))
    return [row for row in rows if row is not None]


def _twin_loss_gap(data: RunData, base: str, treat: str):
    """Untrained twins' validation loss, base - treatment (None without both)."""
    b, t = twin(data, base), twin(data, treat)
    if b is None or t is None or "full" not in b.losses or "full" not in t.losses:
        return None
    return b.losses["full"] - t.losses["full"]


def _twin_drops(stats) -> pd.Series:
    singles = {
        int(k.split(":", 1)[1]): v - stats.losses["full"]
        for k, v in stats.losses.items()
        if k.startswith("single:")
    }
    return pd.Series(singles).sort_index()


def _twin_drop_gap(data: RunData, base: str, treat: str):
    b, t = twin(data, base), twin(data, treat)
    if b is None or t is None or "full" not in b.losses or "full" not in t.losses:
        return None
    return deep_layer_gap(_twin_drops(b), _twin_drops(t)).value


def _budget(data: RunData, members) -> list[str]:
    """Why a final-loss comparison says nothing about Table 1: too few training tokens per
    parameter (the paper's losses are after pretraining; this early they rank how fast each
    scheme starts)."""
    ratios = [data.tokens_per_param[m] for m in members if m in data.tokens_per_param]
    if not ratios or min(ratios) >= pv.COD_MIN_TOKENS_PER_PARAM:
        return []
    return [
        f"trained to {min(ratios):.2g} tokens per non-embedding parameter; Table 1's losses are "
        f"after pretraining (>= {pv.COD_MIN_TOKENS_PER_PARAM:g} per parameter): this early a "
        f"loss gap ranks how fast each scheme starts"
    ]


def lns_best_rows(data: RunData) -> list[dict]:
    """cod_lns_best: LNS below every other scheme trained at its shape. Per other scheme, loss
    (scheme) - loss(LNS) paired seed by seed (the shorter list of seeds), trained - untrained;
    the row shows the scheme closest to LNS. Reproduced when every scheme's interval lies above
    the threshold, not reproduced when one lies wholly below it; a scheme with fewer than
    MIN_SEEDS seeds makes it indicative."""
    lns = [(g, m) for g, m, scheme in data.schemes if scheme == "lns"]
    # the schemes the paper compared LNS with (Peri-LN as Table 2's Sandwich-LN)
    others = [(g, m) for g, m, scheme in data.schemes if scheme in pv.COD_COMPARED_SCHEMES]
    where = {g: pv.COD_COMPARED_SCHEMES[scheme] for g, _, scheme in data.schemes
             if scheme in pv.COD_COMPARED_SCHEMES}  # fmt: skip
    if not lns or not others:
        return []
    group, lns_members = lns[0]
    every = [m for _, ms, _ in data.schemes for m in ms]
    if not all(m in data.val_loss for m in every):
        return []
    threshold = pv.COD_LNS_BEST_NEGLIGIBLE
    gaps, blockers = {}, []
    for other, members in others:
        paired = list(zip(members, lns_members))
        compared = against_initialisation(
            [Estimate(data.val_loss[o] - data.val_loss[t]) for o, t in paired],
            [_twin_loss_gap(data, o, t) for o, t in paired],
            threshold,
        )
        gaps[other] = compared.trained
        blockers += compared.blockers
    blockers += not_learned(data, every) + _budget(data, every)
    closest = min(gaps, key=lambda k: gaps[k].value)
    e = gaps[closest]
    n = min(g.n for g in gaps.values())
    e = replace(e, n=n)
    above = [k for k, g in gaps.items() if g.has_interval and g.low > threshold]
    below = [k for k, g in gaps.items() if g.has_interval and g.high < threshold]
    shown = "; ".join(f"{k}: {g.value:.3g}" for k, g in gaps.items())
    if blockers:
        verdict = (NOT_TESTABLE, "; ".join(dict.fromkeys(blockers)))
    elif below:
        verdict = (NOT_REPRODUCED, f"{', '.join(below)} at or below LNS ({shown})")
    elif len(above) == len(gaps):
        verdict = (REPRODUCED, f"every scheme above LNS by > {threshold:g} ({shown})")
    else:
        verdict = (NOT_TESTABLE, f"an interval straddles {threshold:g}: {TOO_WIDE} ({shown})")
    return [
        claim_row(
            "cod_lns_best",
            COD,
            f"{group} reaches a lower validation loss than every scheme the paper compared it "
            f"with, trained at its shape ({', '.join(f'{g} ({where[g]})' for g in gaps)}): "
            f"loss(scheme) - loss({group}) > {threshold:g} nats for each, seeds paired; shown: "
            f"the closest scheme ({closest})",
            "cod_lns_best",
            e,
            scale_of(data, lns_members),
            with_seeds(e, verdict, True, blockers),
        )
    ]


def post_ln_rows(data: RunData) -> list[dict]:
    """cod_post_ln_reverse per Post-LN model: mean d(l, l+1) over the deeper half - over the
    shallower half > threshold (the Pre-LN trend reversed). Trained here: over seeds, against
    the untrained twins; a published encoder: over its document shards."""
    rows = []
    threshold = pv.COD_POST_LN_NEGLIGIBLE
    for group, entry in data.post_ln.items():
        members, trained = entry["members"], entry["trained"]
        tokens = sorted({t for m in members for _, _, t in entry["replicates"][m]})
        compared = None

        def reverse(k, m, entry=entry):
            return [-half_gap(without_layer(d, k)) for _, d, _ in entry["replicates"][m]]

        if trained:
            compared = against_initialisation(
                [Estimate(float(np.mean(reverse(None, m)))) for m in members],
                [_twin_value(data, m, lambda s: -half_gap(s.distance)) for m in members],
                threshold,
            )
            blockers = compared.blockers + not_learned(data, members)
            claim_extra = (
                f"; untrained twins beside: {compared.text}" if compared.initial is not None else ""
            )

            def e_of(k, members=members):
                return over_seeds([Estimate(float(np.mean(reverse(k, m)))) for m in members])
        else:
            blockers, claim_extra = [], ""

            def e_of(k, members=members):
                return over_shards(reverse(k, members[0]), "half means each")

        layers = sorted(entry["replicates"][members[0]][0][1].index)
        e, verdict, check = positive_without_each_layer(e_of, layers, threshold, blockers, trained)
        rows.append(
            claim_row(
                f"cod_post_ln_reverse:{group}",
                COD,
                f"{group} (Post-LN): the trend reverses, deep layers are farther from identity: "
                f"mean d(l, l+1) over the deeper half - over the shallower half > {threshold:g} "
                f"({' / '.join(tokens)}){claim_extra}",
                "cod_post_ln_reverse",
                e,
                data.scale.get(members[0], group),
                verdict,
                against=compared,
                layer_check=check,
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
                size=(pv.COD_SFT_GAIN_BAND, band_text(pv.COD_SFT_GAIN_BAND), gain),
            )
        )
    return rows


# The CoD rows of models trained here, in the table's order (the fine-tuning row comes after the
# depth-use and scaling rows: depthlab.claims.table lists the modules' declarations).
CLAIMS = (
    Claim(
        "cod_variance_growth",
        PAPER_VALUES["cod_variance_growth"],
        "OLS slope of ln Var(h_l) over l ≥ 1 (Pre-LN), trained; also with each layer's step left "
        "out; the untrained twins beside",
        "pretraining seeds",
        f"> {pv.COD_VARIANCE_SLOPE_NEGLIGIBLE:g}, no single layer deciding",
        "yes: a property of the architecture, decided on the trained models (the paper: "
        "'regardless of training progress'); the twins' larger slope is a note",
        pair_claims,
        ARCHITECTURE,
    ),
    Claim(
        "cod_lns_variance",
        PAPER_VALUES["cod_variance_growth"],
        "slope(Pre-LN) - slope(LNS), trained; the untrained twins beside",
        "seeds",
        f"> {pv.COD_VARIANCE_SLOPE_NEGLIGIBLE:g}, no single layer deciding",
        "yes: LNS's 1/sqrt(l) acts from initialisation on; decided on the trained models",
        pair_claims,
        ARCHITECTURE,
    ),
    Claim(
        "cod_val_loss",
        PAPER_VALUES["cod_lns_gain"],
        "loss(Pre-LN) - loss(LNS), trained; size against Table 1's gains",
        "seeds",
        f"> {pv.COD_LNS_GAIN_NEGLIGIBLE:g} nats; size in {band_text(pv.COD_LNS_GAIN_BAND)}; "
        f"needs ≥ {pv.COD_MIN_TOKENS_PER_PARAM:g} tokens per parameter",
        "no: the default trains far below the token budget; one_gpu: yes",
        pair_claims,
    ),
    Claim(
        "cod_angular_distance",
        PAPER_VALUES["cod_angular_distance"],
        "deeper-half mean d(l, l+1), LNS - Pre-LN, all tokens, trained",
        "seeds",
        f"> {pv.COD_ANGULAR_NEGLIGIBLE:g}, no single layer deciding",
        "yes: decided on the trained models; LNS's 1/sqrt(l) gives the untrained twins the "
        "opposite gap, so the trained - untrained column shows what training did",
        pair_claims,
    ),
    Claim(
        "cod_delta_p",
        PAPER_VALUES["cod_delta_p"],
        "deeper-half single-layer loss increase, LNS - Pre-LN, trained",
        "seeds",
        f"> {pv.LEARNED_SHARE_NEGLIGIBLE:.0%} of what Pre-LN learned, no single layer deciding",
        "no: one deep layer costs less than the threshold; one_gpu: yes",
        pair_claims,
    ),
    Claim(
        "cod_lns_best",
        PAPER_VALUES["cod_lns_best"],
        "loss(scheme) - loss(LNS) for every scheme the paper compared (Peri-LN as Table 2's "
        "Sandwich-LN), trained",
        "seeds, paired",
        f"every scheme > {pv.COD_LNS_BEST_NEGLIGIBLE:g} nats",
        "no (budget; one seed of four schemes); one_gpu: yes",
        lns_best_rows,
    ),
    Claim(
        "cod_post_ln_reverse:<model>",
        PAPER_VALUES["cod_post_ln_reverse"],
        "deeper-half - shallower-half mean d(l, l+1)",
        "seeds (trained Post-LN, twins beside); document shards (a published encoder)",
        f"> {pv.COD_POST_LN_NEGLIGIBLE:g}, no single layer deciding",
        "trained Post-LN: no (did not learn); MiniLM: yes",
        post_ln_rows,
        ARCHITECTURE,
    ),
)

FINETUNE_CLAIMS = (
    Claim(
        "cod_sft_gain",
        PAPER_VALUES["cod_sft_gain"],
        "fine-tuned LNS - fine-tuned Pre-LN mean task accuracy; size against Table 3's gains",
        "pretraining seeds (+ items)",
        f"> {pv.COD_SFT_GAIN_NEGLIGIBLE:g}; size in {band_text(pv.COD_SFT_GAIN_BAND)}",
        "no: toy accuracies near chance; no twin (it would need fine-tuning, i.e. training)",
        finetune_claims,
    ),
)
