"""The claims table: each testable claim of the four papers, the paper's value, what this run
measured (with an interval), a verdict on the paper's statement and a verdict on its size.

Verdicts: `reproduced`, `not reproduced`, `not testable at this scale` (with the reason: a model
that did not learn beyond the unigram loss, a fit parameter at its bound, an interval too wide to
decide) and `one seed: indicative` (a claim about a model trained here, measured on fewer than
MIN_SEEDS seeds: the row shows what the within-model interval says, and never decides). The
rules, per claim kind (margins and bands are named constants in paper_values.py):

  effect > x ("LNS grows less", "angular beats deepest"; x the claim's threshold, named in
      paper_values.py and in each row's claim and reason): reproduced when the interval lies
      above x, not reproduced when it lies below x, not testable when it straddles x: decided
      symmetrically, so "not reproduced" is as reachable as "reproduced"
  no rise ("pretrained LLMs: the depth score does not rise with difficulty"), an equivalence
      test over every level: each level-k - easiest-level difference (normalised depth score,
      Bonferroni-adjusted intervals) must lie wholly inside [-margin, margin] to reproduce; one
      lying wholly outside is not reproduced; otherwise not testable (too wide)
  paper value ("a_l = 1.2 +- 0.3"), an equivalence test: reproduced when the whole interval
      lies inside the paper's band (its stated uncertainty, or a tolerance stated in
      paper_values.py where it gives none), not reproduced when it lies wholly outside, not
      testable when it crosses a band edge (too wide) or the estimate or interval touches a
      fit bound; an interval merely containing the paper's value decides nothing
  size (`size_verdict`, where the paper states a size: LNS gain per Table 1 in nats, the toy's
      tied / independent exponent ratio ≈ 3, Liu's a_l and a_m): size reproduced when the
      interval lies inside the paper's band, size not reproduced when it lies wholly outside,
      not testable otherwise; "no size stated" where the paper gives none

Seeds: a claim about a model trained here is decided over >= MIN_SEEDS seeds, on the mean of the
per-seed values with a t-interval over seeds (n - 1 df), which carries the seed-to-seed variance.
With one seed the row shows that model's own interval (bootstrap, OLS, over layers or n) and with
two the mean; both are `one seed: indicative`. The same gate holds for every claim about models
trained here: a scaling fit of the project's own sweep counts the sweep's seeds, a fine-tuning
claim its pretrained parents (one fine-tuning per pretraining seed; fine-tuning seeds of one
parent are not pretraining seeds). Models not trained here (published checkpoints, published
data points) are decided on their own interval, which must carry the sampling variance of the
documents, windows or items it was measured on (never layers as samples). The toy's replicates
(one teacher seed and fresh students each) are its seeds.

`read_run_data(spec)` reads a run's outputs into `RunData`; `build_claims(data)` is pure, so the
tests plant tables directly. `compare_claims(a, b)` lists what changed between two tables.

Size: each claim's measurement and its rule sit side by side, so a reviewer reads one claim's
test in one place; the number-only estimate and verdict rules live in depthlab.verdicts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from . import paper_values as pv
from .paper_values import COD, CSORDAS, GROMOV, LIU, PAPER_VALUES
from .verdicts import (
    CONFIDENCE,
    MIN_SEEDS,
    NOT_TESTABLE,
    Estimate,
    _band_text,
    difference,
    ols_slope,
    over_seeds,
    t_interval,
    verdict_equivalent,
    verdict_positive,
    verdict_size,
    verdict_within,
    with_seeds,
)

COLUMNS = (
    "claim_id",
    "paper",
    "claim",
    "paper_value",
    "measured",
    "low",
    "high",
    "interval",
    "seeds",
    "scale",
    "verdict",
    "reason",
    "size_band",
    "size_measured",
    "size_low",
    "size_high",
    "size_verdict",
)


# ---------------------------------------------------------------------------------------------
# Measurements (pure functions of the stages' tables)


def unigram_entropy(tokens) -> float:
    """Entropy (nats) of the empirical token distribution: the loss of the best unigram model on
    these tokens, so a model at or above it has learned nothing beyond token frequencies."""
    counts = np.bincount(np.asarray(tokens, dtype=np.int64))
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def final_val_loss(log: pd.DataFrame) -> float:
    """Validation loss at the largest token count of a train_log.csv frame."""
    val = log[log["split"] == "val"]
    if val.empty:
        return math.nan
    return float(val.sort_values("tokens", kind="stable")["loss"].iloc[-1])


def log_variance_slope(h_var: pd.Series) -> Estimate:
    """Slope of ln Var(h_l) against l over the residual states l >= 1 (h_0, the embedding
    output, sits orders of magnitude below and would dominate the fit)."""
    states = h_var[h_var.index >= 1].sort_index()
    return ols_slope(states.index.to_numpy(), np.log(states.to_numpy()))


def deep_layers(num_layers: int) -> list[int]:
    """The deeper half of the layers: l >= L // 2."""
    return list(range(num_layers // 2, num_layers))


def deep_layer_gap(base: pd.Series, treat: pd.Series) -> Estimate:
    """Mean over the deeper half of the layers of treat[l] - base[l] (per-layer series indexed
    by layer), with a t-interval over those layers."""
    layers = sorted(set(base.index) & set(treat.index))
    deep = [l for l in layers if l in deep_layers(len(layers))]
    return t_interval([float(treat[l] - base[l]) for l in deep], "deep layers")


def next_layer_distance(matrix: pd.DataFrame) -> pd.Series:
    """d(l, l+1) by layer l from an analysis-stage (L+1) x (L+1) angular-distance matrix
    (angular_distance_all.csv / angular_distance_last.csv: a `layer` column, columns 0..L)."""
    frame = matrix.set_index("layer") if "layer" in matrix else matrix
    values = frame.to_numpy(dtype=np.float64)
    return pd.Series(
        [values[l, l + 1] for l in range(values.shape[0] - 1)], index=range(values.shape[0] - 1)
    )


def single_layer_drop(single: pd.DataFrame) -> tuple[pd.Series, str]:
    """Per layer, how much removing it alone hurts: the task-score drop (-delta_score, mean over
    tasks) when lm-eval scored it, else the validation-loss increase."""
    if "delta_score" in single and single["delta_score"].notna().any():
        return -single.groupby("layer")["delta_score"].mean(), "task score drop"
    return single.groupby("layer")["delta_loss"].first(), "val loss increase"


def _unhealed(sweep: pd.DataFrame, strategy: str, healed: bool = False) -> pd.Series:
    rows = sweep[(sweep["strategy"] == strategy) & (sweep["healed"].astype(str) == str(healed))]
    return rows.groupby("n")["val_loss"].first()


def block_choice_gap(sweep: pd.DataFrame) -> Estimate:
    """Mean over the removed-layer counts n >= 1 of val_loss(deepest) - val_loss(angular),
    unhealed (> 0: the angular block choice is better), t-interval over n."""
    angular, deepest = _unhealed(sweep, "angular"), _unhealed(sweep, "deepest")
    ns = sorted(n for n in set(angular.index) & set(deepest.index) if n >= 1)
    return t_interval([deepest[n] - angular[n] for n in ns], "removal counts n")


def healing_gap_change(sweep: pd.DataFrame) -> Estimate | None:
    """Mean over the healed n of |gap unhealed| - |gap healed|, gap = val_loss(deepest) -
    val_loss(angular) (> 0: healing shrinks the gap), t-interval over n; None when deepest or
    angular was not healed."""
    healed = {s: _unhealed(sweep, s, healed=True) for s in ("angular", "deepest")}
    ns = sorted(set(healed["angular"].index) & set(healed["deepest"].index))
    if not ns:
        return None
    before = {s: _unhealed(sweep, s) for s in ("angular", "deepest")}
    change = [
        abs(before["deepest"][n] - before["angular"][n])
        - abs(healed["deepest"][n] - healed["angular"][n])
        for n in ns
    ]
    return t_interval(change, "healed n")


def _halves(values: pd.Series) -> tuple[list[float], list[float]]:
    """A per-layer series split into the model's shallower and deeper half (deep_layers of a
    model with max(layer) + 1 layers; a series that omits early layers keeps the model's
    halves)."""
    deep = set(deep_layers(int(max(values.index)) + 1))
    layers = sorted(values.index)
    return [values[l] for l in layers if l not in deep], [values[l] for l in layers if l in deep]


def half_gap(values: pd.Series) -> float:
    """Mean over the shallower half of the layers minus mean over the deeper half of a per-layer
    series (> 0: the deeper half is smaller)."""
    shallow, deep = _halves(values)
    return float(np.mean(shallow) - np.mean(deep))


def _window_table(windows: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """window_losses.csv as a (windows x removal sets) loss matrix and the sets' keys: "full",
    "single:<layer>", "<strategy>:<n>" and, for healed variants, "healed:<strategy>:<n>"."""
    keys = pd.Series(
        np.where(
            windows["strategy"] == "full",
            "full",
            np.where(
                windows["strategy"] == "single",
                "single:" + windows["removed"].astype(str),
                windows["strategy"] + ":" + windows["n"].astype(str),
            ),
        ),
        index=windows.index,
    )
    if "healed" in windows:
        healed = windows["healed"].astype(str).str.lower() == "true"
        keys = keys.where(~healed, "healed:" + keys)
    table = windows.assign(key=keys).pivot_table(index="window", columns="key", values="loss")
    return table.to_numpy(dtype=np.float64), list(table.columns)


def _window_means(windows: pd.DataFrame) -> dict:
    losses, columns = _window_table(windows)
    return dict(zip(columns, losses.mean(0)))


def window_bootstrap(
    windows: pd.DataFrame, statistic, resamples: int, seed: int, confidence: float = CONFIDENCE
) -> Estimate:
    """statistic(mean loss per removal set, keyed as _window_table says) with a percentile
    bootstrap over the validation windows (window_losses.csv of the pruning stage): each
    resample draws windows with replacement and every set's mean is taken over the same draw,
    so the sets stay paired window by window."""
    losses, columns = _window_table(windows)

    def value(rows) -> float:
        return float(statistic(dict(zip(columns, losses[rows].mean(0)))))

    count = losses.shape[0]
    point = value(np.arange(count))
    rng = np.random.default_rng(seed)
    draws = np.array([value(rng.integers(0, count, count)) for _ in range(resamples)])
    alpha = (1 - confidence) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    return Estimate(
        point,
        float(low),
        float(high),
        f"{confidence:.0%} percentile bootstrap over {count} validation windows "
        f"({resamples} resamples)",
        1,
        float(draws.std(ddof=1)),
    )


def delta_p_half_gap(means: dict) -> float:
    """half_gap of the single-layer loss increase (per layer: loss without it - full loss)."""
    singles = {
        int(key.split(":", 1)[1]): loss - means["full"]
        for key, loss in means.items()
        if key.startswith("single:")
    }
    return half_gap(pd.Series(singles))


def block_gap_of_means(means: dict) -> float:
    """Mean over n of loss(deepest:n) - loss(angular:n): block_choice_gap on set means."""
    ns = [
        key.split(":", 1)[1]
        for key in means
        if key.startswith("angular:") and f"deepest:{key.split(':', 1)[1]}" in means
    ]
    ns = [n for n in ns if int(n) >= 1]
    return float(np.mean([means[f"deepest:{n}"] - means[f"angular:{n}"] for n in ns]))


def healing_gap_of_means(means: dict) -> float:
    """healing_gap_change on set means: mean over the n healed for both angular and deepest of
    |gap before| - |gap after| (NaN when no n was healed for both)."""
    ns = [
        key.rsplit(":", 1)[1]
        for key in means
        if key.startswith("healed:angular:") and f"healed:deepest:{key.rsplit(':', 1)[1]}" in means
    ]
    if not ns:
        return math.nan
    return float(
        np.mean(
            [
                abs(means[f"deepest:{n}"] - means[f"angular:{n}"])
                - abs(means[f"healed:deepest:{n}"] - means[f"healed:angular:{n}"])
                for n in ns
            ]
        )
    )


def over_shards(values: list[float], what: str) -> Estimate:
    """A pretrained model's measure over its document shards: mean with a t-interval over the
    shards (the sampling variance of the documents); one shard: no interval."""
    return t_interval(values, f"document shards ({what})")


def bonferroni(confidence: float, comparisons: int) -> float:
    """Per-interval confidence so that `comparisons` intervals hold together at `confidence`."""
    return 1 - (1 - confidence) / max(comparisons, 1)


def depth_score_trend(
    effects: pd.DataFrame, family: str, resamples: int, seed: int, confidence: float = CONFIDENCE
) -> dict:
    """The depth score (normalised: / (L - 1)) of every difficulty level of one family of
    problem_effects.csv, as differences from the easiest level and as the OLS slope over all
    levels, each with a percentile bootstrap over problems within each level. The differences'
    intervals are Bonferroni-adjusted (they are judged together). Returns {"levels": [levels],
    "scores": [normalised scores], "diffs": {level: Estimate}, "slope": Estimate}; empty "diffs"
    with fewer than 2 levels."""
    from .depth_score import depth_score

    rows = effects[effects["family"] == family]
    table = rows.pivot_table(
        index=["level", "problem"], columns="skipped", values="output_effect"
    ).dropna()
    levels = sorted(table.index.get_level_values("level").unique())
    result = {
        "levels": levels,
        "scores": [],
        "diffs": {},
        "slope": Estimate(math.nan, method="fewer than 2 difficulty levels"),
    }
    if len(levels) < 2:
        return result
    arrays = [table.xs(level, level="level").to_numpy() for level in levels]
    norm = max(table.shape[1] - 1, 1)
    x = np.asarray(levels, dtype=np.float64)

    def stats_of(samples):
        scores = np.asarray([depth_score(a.mean(axis=0)) / norm for a in samples])
        slope = float(np.polyfit(x, scores, 1)[0]) if np.all(np.isfinite(scores)) else math.nan
        return scores, scores[1:] - scores[0], slope

    scores, diffs, slope = stats_of(arrays)
    rng = np.random.default_rng(seed)
    boot_diffs, boot_slopes = [], []
    for _ in range(resamples):
        _, d, s = stats_of([a[rng.integers(0, len(a), len(a))] for a in arrays])
        if np.all(np.isfinite(d)) and math.isfinite(s):
            boot_diffs.append(d)
            boot_slopes.append(s)
    result["scores"] = [float(s) for s in scores]
    if not boot_diffs:
        result["diffs"] = {
            lv: Estimate(float(d), method="bootstrap failed") for lv, d in zip(levels[1:], diffs)
        }
        result["slope"] = Estimate(slope, method="bootstrap failed")
        return result
    boot_diffs = np.asarray(boot_diffs)
    adjusted = bonferroni(confidence, len(levels) - 1)
    for i, level in enumerate(levels[1:]):
        low, high = np.quantile(boot_diffs[:, i], [(1 - adjusted) / 2, (1 + adjusted) / 2])
        result["diffs"][level] = Estimate(
            float(diffs[i]),
            float(low),
            float(high),
            f"{adjusted:.3g} bootstrap over problems ({resamples} resamples; {confidence:.0%} "
            f"jointly over {len(levels) - 1} differences), level {level} - level {levels[0]}",
        )
    low, high = np.quantile(boot_slopes, [(1 - confidence) / 2, (1 + confidence) / 2])
    result["slope"] = Estimate(
        slope,
        float(low),
        float(high),
        f"{confidence:.0%} bootstrap over problems ({resamples} "
        f"resamples), OLS slope over levels {levels}",
    )
    return result


def hardest_level_solved(accuracy: pd.DataFrame, family: str) -> str | None:
    """None when the hardest level's accuracy is above chance (one-sided binomial test at 5%);
    otherwise the reason the depth score there says nothing about using depth."""
    from scipy import stats

    rows = accuracy[accuracy["family"] == family].sort_values("level")
    if rows.empty:
        return f"no accuracy for family {family}"
    hard = rows.iloc[-1]
    correct = int(round(hard["accuracy"] * hard["problems"]))
    test = stats.binomtest(
        correct, int(hard["problems"]), float(hard["chance"]), alternative="greater"
    )
    if test.pvalue < 0.05:
        return None
    return (
        f"level {hard['level']} accuracy {hard['accuracy']:.2f} is not above chance "
        f"{hard['chance']:.2f}"
    )


def map_error_advantage(errors: pd.DataFrame) -> Estimate:
    """How much better the equal-relative-depth map is than the best depth-blind map, from the
    linear-maps stage's relative_error.csv (one row per source layer s and target layer t):
    per source layer, err(s, c*) - err(s, eq(s)), where c* is the one target layer that is best
    for all source layers together (lowest mean error: a map that ignores the source's depth,
    chosen in hindsight, so the baseline is favoured) and eq(s) the target layer nearest the
    source's relative depth; mean with a t-interval over source layers (> 0: depth matters)."""
    grid = errors.pivot_table(index="source_layer", columns="target_layer", values="relative_error")
    source_depth = errors.groupby("source_layer")["source_depth"].first()
    target_depth = errors.groupby("target_layer")["target_depth"].first()
    constant = int(grid.mean(axis=0).idxmin())
    gains = []
    for s in grid.index:
        equal = int((target_depth - source_depth[s]).abs().idxmin())
        gains.append(float(grid.loc[s, constant] - grid.loc[s, equal]))
    e = t_interval(gains, "source layers")
    return replace(e, method=f"{e.method}; best depth-blind target layer {constant}")


def fit_parameter(fit: dict, name: str, bounds, tolerance: float = 1e-6) -> tuple[Estimate, bool]:
    """A fitted parameter with its bootstrap interval, and whether the estimate or the interval
    touches the exponent bounds (or the fit reports it at a bound)."""
    interval = fit.get("intervals", {}).get(name, {})
    confidence = fit.get("bootstrap", {}).get("confidence", CONFIDENCE)
    e = Estimate(
        float(fit["estimates"][name]),
        float(interval.get("low", math.nan)),
        float(interval.get("high", math.nan)),
        f"{confidence:.0%} bootstrap ({fit.get('bootstrap', {}).get('resamples')} "
        f"resamples, {fit.get('bootstrap', {}).get('unit', 'points')})",
    )
    lo, hi = bounds
    slack = tolerance * (hi - lo)
    touches = [
        v
        for v in (e.value, e.low, e.high)
        if math.isfinite(v) and (v <= lo + slack or v >= hi - slack)
    ]
    return e, bool(touches) or name in fit.get("parameters_at_bounds", [])


def _replicates(fit_row: dict) -> dict:
    """{replicate: (a, a_se)} of one toy fit row (fit.json `fits` entry): its per-replicate fits
    (`replicates`), or the row itself as replicate 0 when it has none."""
    reps = fit_row.get("replicates") or [
        {"replicate": 0, "a": fit_row["a"], "a_se": fit_row.get("a_se", math.nan)}
    ]
    return {
        int(r.get("replicate", i)): (float(r["a"]), float(r.get("a_se") or math.nan))
        for i, r in enumerate(reps)
    }


def toy_exponent_gaps(fit: dict, bounds=None) -> dict:
    """Per temperature, over the toy's replicates (teacher seed i of both kinds, each with its
    own students: the toy's seeds), paired by replicate: ([a_tied - a_indep per replicate,
    each with the normal interval of its two fit standard errors], [a_tied / a_indep per
    replicate], reasons it cannot be judged (an exponent at its bound))."""
    result = {}
    rows = fit.get("fits", [])
    for temperature in sorted({float(r["temperature"]) for r in rows}):
        kinds = {
            r["teacher_kind"]: _replicates(r)
            for r in rows
            if float(r["temperature"]) == temperature
        }
        if not {"tied", "independent"} <= set(kinds):
            continue
        tied, indep = kinds["tied"], kinds["independent"]
        paired = sorted(set(tied) & set(indep))
        blockers = []
        if bounds is not None and fit.get("form") == "power_offset":
            lo, hi = bounds
            for kind, reps in kinds.items():
                if any(a <= lo + 1e-6 or a >= hi - 1e-6 for a, _ in reps.values()):
                    blockers.append(f"{kind} exponent at its bound {[lo, hi]}")
        gaps = [
            difference(Estimate(tied[r][0], se=tied[r][1]), Estimate(indep[r][0], se=indep[r][1]))
            for r in paired
        ]
        ratios = [
            Estimate(tied[r][0] / indep[r][0] if indep[r][0] > 0 else math.nan) for r in paired
        ]
        result[temperature] = (gaps, ratios, blockers)
    return result


# ---------------------------------------------------------------------------------------------
# The run's data and the claims


@dataclass
class RunData:
    """What the claims read from a run, keyed by (expanded) model name.

    cod_pairs: (baseline group, its members, treatment group, its members) of Pre-LN vs LNS
    models of the same architecture and training; groups: {base name: members} for every stage
    below (members: `<name>_s<seed>` when the config seeds the model, else [name])."""

    cod_pairs: list = field(default_factory=list)
    trained: set = field(default_factory=set)  # models trained here (seeds matter)
    task_trained: set = field(default_factory=set)  # trained here on the depth problems
    val_loss: dict = field(default_factory=dict)  # final validation loss
    unigram: dict = field(default_factory=dict)  # unigram entropy of the model's val split
    scale: dict = field(default_factory=dict)  # "12 layers x 128, 262k tokens"
    h_var: dict = field(default_factory=dict)  # Series by state l
    distance: dict = field(default_factory=dict)  # d(l, l+1) Series by layer l
    distance_tokens: dict = field(default_factory=dict)  # "all tokens" | "last token"
    single_layer: dict = field(default_factory=dict)  # single_layer.csv frames
    pruning_groups: dict = field(default_factory=dict)  # {group: members} of pruned models
    sweeps: dict = field(default_factory=dict)  # pruning sweep.csv frames
    depth_groups: dict = field(default_factory=dict)  # {group: members} of scored models
    problem_effects: dict = field(default_factory=dict)
    accuracy: dict = field(default_factory=dict)
    bootstrap: dict = field(default_factory=lambda: {"resamples": 1000, "seed": 0})
    map_groups: dict = field(default_factory=dict)  # {config pair: [expanded pairs]}
    map_errors: dict = field(default_factory=dict)  # relative_error.csv frames by pair
    map_ends: dict = field(default_factory=dict)  # pair -> (source, target, target layers)
    fits: dict = field(default_factory=dict)  # name -> (fit.json dict, bounds)
    # fits of the project's own sweep (models trained here) -> the sweep's seeds per point;
    # a fit not named here is of published points
    fit_seeds: dict = field(default_factory=dict)
    toy_fit: dict | None = None
    toy_bounds: tuple | None = None
    # pretrained LMs (not trained here): per model, its analysis replicates (one per document
    # shard) as (measures.csv frame, d(l, l+1) Series, "all tokens" | "last token")
    pretrained: dict = field(default_factory=dict)
    pretrained_scale: dict = field(default_factory=dict)
    window_losses: dict = field(default_factory=dict)  # pruning window_losses.csv frames
    # supervised fine-tuning: (base group, members, treatment group, members) of Pre-LN vs LNS
    # parents, and each parent's evaluate_finetuned scores.csv frame
    finetune_pairs: list = field(default_factory=list)
    finetune_scores: dict = field(default_factory=dict)


def _over_windows(data: RunData, name: str, statistic) -> Estimate:
    """statistic on a pruned model's window losses, bootstrapped over its validation windows
    (the run's bootstrap resamples and seed)."""
    return window_bootstrap(
        data.window_losses[name],
        statistic,
        data.bootstrap["resamples"],
        data.bootstrap["seed"],
    )


def _has_single_windows(data: RunData, name: str) -> bool:
    """Whether a pruned model's window losses hold its single-layer removals."""
    windows = data.window_losses.get(name)
    return windows is not None and bool((windows["strategy"] == "single").any())


def _not_learned(data: RunData, members) -> list[str]:
    """Reasons a model's measurements say nothing about the paper: no better than unigram."""
    reasons = []
    for name in members:
        loss, unigram = data.val_loss.get(name), data.unigram.get(name)
        if loss is not None and unigram is not None and not loss < unigram:
            reasons.append(
                f"{name} val loss {loss:.3f} is not below the unigram loss "
                f"{unigram:.3f} (did not learn)"
            )
    return reasons


def _scale(data: RunData, members) -> str:
    return data.scale.get(members[0]) or data.pretrained_scale.get(members[0], members[0])


def _seed_pairs(base: list, treat: list) -> list[tuple[str, str]]:
    """Baseline and treatment members paired in order (seed i with seed i)."""
    return list(zip(base, treat))


def _row(
    claim_id,
    paper,
    claim,
    paper_key,
    e: Estimate,
    scale,
    verdict,
    paper_value: str | None = None,
    size: tuple | None = None,
) -> dict:
    """One table row. size: (band, band text, size Estimate or None) where the paper states a
    size; the size verdict follows the main verdict's seeds and blockers."""
    band, band_text, size_e = size or (None, "", None)
    size_e = size_e if size_e is not None else Estimate(math.nan)
    return {
        "claim_id": claim_id,
        "paper": paper,
        "claim": claim,
        "paper_value": paper_value or PAPER_VALUES[paper_key].describe(),
        "measured": e.value,
        "low": e.low,
        "high": e.high,
        "interval": e.method,
        "seeds": e.n,
        "scale": scale,
        "verdict": verdict[0],
        "reason": verdict[1],
        "size_band": band_text,
        "size_measured": size_e.value,
        "size_low": size_e.low,
        "size_high": size_e.high,
        "size_verdict": verdict_size(size_e, band, verdict[0]),
    }


def _decide(e: Estimate, rule: tuple[str, str], trained_here: bool, blockers) -> tuple[str, str]:
    return with_seeds(e, rule, trained_here, blockers)


def _cod_claims(data: RunData) -> list[dict]:
    rows = []
    for base, base_members, treat, treat_members in data.cod_pairs:
        pairs = _seed_pairs(base_members, treat_members)
        members = [m for pair in pairs for m in pair]
        trained = any(m in data.trained for m in members)
        blockers = _not_learned(data, members)
        scale = _scale(data, base_members)
        suffix = f":{base}-vs-{treat}" if len(data.cod_pairs) > 1 else ""

        def positive(e, negligible, blockers=blockers, trained=trained):
            return _decide(e, verdict_positive(e, blockers, negligible), trained, blockers)

        if all(m in data.h_var for m in members):
            growth = over_seeds([log_variance_slope(data.h_var[b]) for b, _ in pairs])
            rows.append(
                _row(
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
                _row(
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
        if all(m in data.val_loss for m in members):
            gain = over_seeds([Estimate(data.val_loss[b] - data.val_loss[t]) for b, t in pairs])
            band = pv.COD_LNS_GAIN_BAND
            rows.append(
                _row(
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
                    size=(band, _band_text(band, " nats"), gain),
                )
            )
        if all(m in data.distance for m in members):
            gap = over_seeds([deep_layer_gap(data.distance[b], data.distance[t]) for b, t in pairs])
            tokens = sorted({data.distance_tokens.get(m, "last token") for m in members})
            rows.append(
                _row(
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
                _row(
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
    model - that of the Pre-LN parent's (evaluate_finetuned scores.csv frames)."""
    from .finetune_scores import FINETUNED, model_scores

    def after(scores):
        means = model_scores(scores)
        return means[means["stage"] == FINETUNED].set_index("seed")["score"]

    base_after, treat_after = after(base), after(treat)
    seeds = [s for s in base_after.index if s in treat_after.index]
    return [Estimate(float(treat_after[s] - base_after[s])) for s in seeds]


def _finetune_claims(data: RunData) -> list[dict]:
    """cod_sft_gain, decided over pretraining seeds: the claim is about the pretraining norm
    scheme, so each Pre-LN / LNS parent pair (pretraining seed i with seed i) gives one gain, the
    mean over the fine-tuning seeds it was fine-tuned with; fine-tuning seeds of one parent pair
    only make that pair's gain more precise and are never counted as seeds. One parent per
    scheme: one seed, indicative (the row shows the interval over its fine-tuning runs)."""
    rows = []
    for base, base_members, treat, treat_members in data.finetune_pairs:
        pairs = _seed_pairs(base_members, treat_members)
        per_parent = [
            gains
            for b, t in pairs
            if (gains := sft_gains(data.finetune_scores[b], data.finetune_scores[t]))
        ]
        if not per_parent:
            continue
        members = [m for pair in pairs for m in pair]
        blockers = _not_learned(data, members)
        parent_gains = [
            replace(
                t_interval([g.value for g in gains], "fine-tuning runs of one parent pair"),
                n=1,
            )
            for gains in per_parent
        ]
        gain = over_seeds(parent_gains)
        if len(parent_gains) >= MIN_SEEDS:
            gain = replace(gain, method=f"{gain.method} (pretraining seeds)")
        runs = sum(len(gains) for gains in per_parent)
        scale = (
            f"{_scale(data, base_members)}; {runs} fine-tuning run{'s' if runs > 1 else ''} "
            f"of {len(per_parent)} pretrained parent{'s' if len(per_parent) > 1 else ''} per "
            f"scheme"
        )
        suffix = f":{base}-vs-{treat}" if len(data.finetune_pairs) > 1 else ""
        verdict = verdict_positive(gain, blockers, pv.COD_SFT_GAIN_NEGLIGIBLE)
        rows.append(
            _row(
                f"cod_sft_gain{suffix}",
                COD,
                f"after the same supervised fine-tuning {treat} stays ahead: mean task accuracy "
                f"of fine-tuned {treat} - fine-tuned {base} > {pv.COD_SFT_GAIN_NEGLIGIBLE:g}, "
                f"over pretraining seeds",
                "cod_sft_gain",
                gain,
                scale,
                _decide(gain, verdict, True, blockers),
            )
        )
    return rows


def _gromov_claims(data: RunData) -> list[dict]:
    rows = []
    negligible = pv.GROMOV_GAP_NEGLIGIBLE
    for group, members in data.pruning_groups.items():
        if not all(m in data.sweeps for m in members):
            continue
        blockers = _not_learned(data, members)
        trained = any(m in data.trained for m in members)
        scale = _scale(data, members)
        if not trained and all(m in data.window_losses for m in members):
            # published checkpoints: the documents' sampling variance, over validation windows
            before = over_seeds([_over_windows(data, m, block_gap_of_means) for m in members])
        else:
            before = over_seeds([block_choice_gap(data.sweeps[m]) for m in members])
        rows.append(
            _row(
                f"gromov_block_choice:{group}",
                GROMOV,
                f"{group}: the angular block beats dropping the deepest layers before "
                f"healing: mean over n of val_loss(deepest) - val_loss(angular) > "
                f"{negligible:g}",
                "gromov_block_vs_baseline",
                before,
                scale,
                _decide(before, verdict_positive(before, blockers, negligible), trained, blockers),
            )
        )
        if not trained and all(
            m in data.window_losses
            and math.isfinite(healing_gap_of_means(_window_means(data.window_losses[m])))
            for m in members
        ):
            changes = [_over_windows(data, m, healing_gap_of_means) for m in members]
        else:
            changes = [healing_gap_change(data.sweeps[m]) for m in members]
        claim = (
            f"{group}: healing shrinks the gap: mean over healed n of |gap before| - "
            f"|gap after| > {negligible:g}"
        )
        if any(c is None for c in changes):
            rows.append(
                _row(
                    f"gromov_healing_gap:{group}",
                    GROMOV,
                    claim,
                    "gromov_block_vs_baseline",
                    Estimate(math.nan, n=len(members)),
                    scale,
                    (
                        NOT_TESTABLE,
                        ("needs healed angular and deepest variants (pruning.healing.strategies)"),
                    ),
                )
            )
        else:
            after = over_seeds(changes)
            rows.append(
                _row(
                    f"gromov_healing_gap:{group}",
                    GROMOV,
                    claim,
                    "gromov_block_vs_baseline",
                    after,
                    scale,
                    _decide(
                        after, verdict_positive(after, blockers, negligible), trained, blockers
                    ),
                )
            )
    return rows


def _depth_score_rows(data: RunData, group: str, members: list, family: str) -> dict:
    """One depth-score row: the from-scratch statement (Csordás et al.'s MoEUT section: trained
    on the task, more steps use more depth: slope > negligible) for models trained here on the
    problems, the pretrained-LLM statement (no rise: every level within the margin of the
    easiest) for every other model."""
    blockers = _not_learned(data, members) + [
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
    scale = f"{_scale(data, members)}; normalised depth score by level {levels}: {shown}"
    if all(m in data.task_trained for m in members):
        negligible = pv.CSORDAS_DEPTH_SCORE_SLOPE_NEGLIGIBLE
        slope = over_seeds([t["slope"] for t in trends])
        return _row(
            f"csordas_depth_score:{group}:{family}",
            CSORDAS,
            f"tests the from-scratch statement (MoEUT section), not the pretrained-LLM "
            f"one: {group}, trained here on the problems, uses more depth on harder "
            f"{family} problems: slope of the normalised depth score over all levels "
            f"> {negligible:g} per level",
            "csordas_depth_score_scratch",
            slope,
            scale,
            _decide(slope, verdict_positive(slope, blockers, negligible), trained, blockers),
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
        verdict = _decide(e, rule, trained, blockers)
    return _row(
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


def _csordas_claims(data: RunData) -> list[dict]:
    rows = []
    negligible = pv.CSORDAS_MAP_ERROR_NEGLIGIBLE
    for key, pairs in data.map_groups.items():
        if not all(p in data.map_errors for p in pairs):
            continue
        ends = [data.map_ends[p] for p in pairs]
        models = [m for s, t, _ in ends for m in (s, t)]
        blockers = _not_learned(data, models)
        trained = any(m in data.trained for m in models)
        gain = over_seeds([map_error_advantage(data.map_errors[p]) for p in pairs])
        source, target, _ = ends[0]
        scale = f"{data.scale.get(source, source)} -> {data.scale.get(target, target)}"
        rows.append(
            _row(
                f"csordas_linear_maps:{key}",
                CSORDAS,
                f"{key}: mapping each source layer to the target layer at its relative "
                f"depth beats the best depth-blind map (one target layer for all): "
                f"mean over source layers of err(s, c*) - err(s, equal depth) > "
                f"{negligible:g} (relative error)",
                "csordas_linear_maps",
                gain,
                scale,
                _decide(gain, verdict_positive(gain, blockers, negligible), trained, blockers),
            )
        )
    for group, members in data.depth_groups.items():
        if not all(m in data.problem_effects for m in members):
            continue
        for family in sorted(set(data.problem_effects[members[0]]["family"])):
            rows.append(_depth_score_rows(data, group, members, family))
    return rows


def _pretrained_claims(data: RunData) -> list[dict]:
    """The papers' statements about pretrained LMs, tested on each model not trained here: its
    hidden-state measures per document shard (intervals over shards carry the sampling variance
    of the documents) and, when pruned, its single-layer removal table."""
    rows = []
    for name, replicates in data.pretrained.items():
        scale = data.pretrained_scale.get(name, name)

        def positive(e, negligible):
            return _decide(e, verdict_positive(e, [], negligible), False, [])

        frames = [frame for frame, _, _ in replicates]
        h_var = [f[f["measure"] == "h_var"].set_index("layer")["value"] for f in frames]
        growth = over_shards([log_variance_slope(v).value for v in h_var], "OLS slope each")
        rows.append(
            _row(
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
            _row(
                f"cod_deep_identity:{name}",
                COD,
                f"{name}: deep layers are closer to identity: mean d(l, l+1) over the "
                f"shallower half - over the deeper half > {pv.COD_ANGULAR_NEGLIGIBLE:g} "
                f"({' / '.join(tokens)})",
                "cod_angular_distance",
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
        rows.append(
            _row(
                f"csordas_second_half:{name}",
                CSORDAS,
                f"{name}: the second half contributes less: mean ||h_(l+1) - h_l|| / ||h_l|| "
                f"over layers 1.. of the first half - over the second half > "
                f"{pv.CSORDAS_HALF_CONTRIBUTION_NEGLIGIBLE:g}",
                "csordas_second_half",
                less,
                scale,
                positive(less, pv.CSORDAS_HALF_CONTRIBUTION_NEGLIGIBLE),
            )
        )
        if name in data.single_layer:
            # the documents' sampling variance, paired window by window: the validation loss
            # increase of every single-layer removal (lm-eval's task scores, when the stage ran
            # it, carry no per-item replicates here); the layers of a half are no samples
            if _has_single_windows(data, name):
                gap, what = _over_windows(data, name, delta_p_half_gap), "val loss increase"
            else:
                drop, what = single_layer_drop(data.single_layer[name])
                gap = Estimate(
                    half_gap(drop),
                    method="no interval: needs the pruning stage's window_losses.csv (the "
                    "layers of each half are not independent samples)",
                )
            rows.append(
                _row(
                    f"cod_delta_p_depth:{name}",
                    COD,
                    f"{name}: removing one deep layer hurts less than removing a shallow one: "
                    f"mean {what} over the shallower half - over the deeper half > "
                    f"{pv.COD_DELTA_P_NEGLIGIBLE:g}",
                    "cod_delta_p",
                    gap,
                    scale,
                    positive(gap, pv.COD_DELTA_P_NEGLIGIBLE),
                )
            )
    return rows


VALUE_BANDS = {
    "liu_a_l": (pv.LIU_A_L_BAND, pv.LIU_A_L_BAND_SOURCE),
    "liu_a_m": (pv.LIU_A_M_BAND, pv.LIU_A_M_BAND_SOURCE),
    "besiroglu_alpha": (pv.BESIROGLU_ALPHA_BAND, pv.BESIROGLU_ALPHA_BAND_SOURCE),
}
# the bands that are sizes the paper states (Besiroglu's is a tolerance of ours: no size row)
SIZE_BANDS = {"liu_a_l": pv.LIU_A_L_BAND, "liu_a_m": pv.LIU_A_M_BAND}


def _fit_seed_blockers(fit: dict, seeds: int) -> list[str]:
    """Why a fit of the project's own sweep cannot decide even over enough seeds: a bootstrap
    over points treats the points of one training curve (strongly correlated) and the seeds of
    one architecture as independent, so its interval does not carry the seed-to-seed
    variance; resampling architectures (each with all its seeds and points) does."""
    unit = fit.get("bootstrap", {}).get("unit", "points")
    if seeds >= MIN_SEEDS and unit != "architectures":
        return [
            f"a sweep fit over {seeds} seeds needs a bootstrap over architectures (each with "
            f"its seeds), not over {unit}: set scaling.fits.<name>.bootstrap.unit: architectures"
        ]
    return []


def _liu_claims(data: RunData) -> list[dict]:
    rows = []
    for name, (fit, bounds) in data.fits.items():
        # the project's own sweep is trained here: seeds gate it; published points are not
        trained = name in data.fit_seeds
        seeds = data.fit_seeds.get(name, 1)
        scale = f"{fit.get('n_points_used', '?')} points ({name})" + (
            f"; sweep trained here, {seeds} seed{'s' if seeds > 1 else ''}" if trained else ""
        )
        checks = (
            [("a_l", "liu_a_l"), ("a_m", "liu_a_m")]
            if fit.get("law") == "decomposed"
            else [("alpha", "besiroglu_alpha")]
        )
        for parameter, key in checks:
            if parameter not in fit.get("estimates", {}):
                continue
            e, at_bound = fit_parameter(fit, parameter, bounds)
            e = replace(e, n=seeds)
            blockers = (
                [f"{parameter} at bound: estimate or interval touches {list(bounds)}"]
                if at_bound
                else []
            )
            # another parameter at its bound means the fitted law degenerated
            others = [p for p in fit.get("parameters_at_bounds", []) if p != parameter]
            if others:
                blockers.append(f"the fit is degenerate: {', '.join(others)} at a bound")
            if trained:
                blockers += _fit_seed_blockers(fit, seeds)
            paper = PAPER_VALUES[key]
            band, band_source = VALUE_BANDS[key]
            size_band = SIZE_BANDS.get(key)
            rows.append(
                _row(
                    f"{key}:{name}",
                    paper.paper,
                    f"fitted {parameter} matches the paper's {paper.value:g}: the whole "
                    f"interval inside {_band_text(band)} ({band_source})",
                    key,
                    e,
                    scale,
                    _decide(e, verdict_within(e, band, blockers, band_source), trained, blockers),
                    size=(size_band, _band_text(size_band), e),
                )
            )
    if data.toy_fit is not None:
        depths = sorted({r["student_depth"] for r in data.toy_fit.get("losses", [])})
        negligible, band = pv.LIU_TOY_GAP_NEGLIGIBLE, pv.LIU_TOY_RATIO_BAND
        for temperature, (gaps, ratios, blockers) in toy_exponent_gaps(
            data.toy_fit, data.toy_bounds
        ).items():
            gap = over_seeds(gaps)
            ratio = over_seeds(ratios) if all(math.isfinite(r.value) for r in ratios) else None
            rows.append(
                _row(
                    f"liu_toy_tied_exceeds:T={temperature:g}",
                    LIU,
                    f"toy students at T={temperature:g}: the tied-teacher depth exponent "
                    f"exceeds the independent one (a_tied - a_indep > {negligible:g}); "
                    f"size: a_tied / a_indep",
                    "liu_toy_tied",
                    gap,
                    f"student depths {depths}",
                    _decide(gap, verdict_positive(gap, blockers, negligible), True, blockers),
                    f"a_l ≈ {PAPER_VALUES['liu_toy_tied'].value:g} tied vs ≈ "
                    f"{PAPER_VALUES['liu_toy_independent'].describe()} independent "
                    f"(ratio ≈ 3)",
                    size=(band, _band_text(band, " (ratio)"), ratio),
                )
            )
    return rows


def build_claims(data: RunData) -> pd.DataFrame:
    """Every claim the run's data can test, one row each (COLUMNS)."""
    rows = (
        _cod_claims(data)
        + _pretrained_claims(data)
        + _gromov_claims(data)
        + _csordas_claims(data)
        + _liu_claims(data)
        + _finetune_claims(data)
    )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def render_markdown(claims: pd.DataFrame, title: str) -> str:
    """The claims table as Markdown: measured value with its interval, verdict with reason,
    size verdict with the paper's band."""

    def measured(row):
        if not math.isfinite(row.measured):
            return "-"
        text = f"{row.measured:.4g}"
        if math.isfinite(row.low) and math.isfinite(row.high):
            text += f" [{row.low:.4g}, {row.high:.4g}]"
        return text + (f" ({row.interval})" if row.interval else "")

    def size(row):
        if not row.size_band:
            return row.size_verdict
        value = (
            "-"
            if not math.isfinite(row.size_measured)
            else f"{row.size_measured:.4g}"
            + (
                f" [{row.size_low:.4g}, {row.size_high:.4g}]"
                if math.isfinite(row.size_low) and math.isfinite(row.size_high)
                else ""
            )
        )
        return f"**{row.size_verdict}**: {value} vs band {row.size_band}"

    table = pd.DataFrame(
        {
            "claim": [f"`{r.claim_id}` {r.claim}" for r in claims.itertuples()],
            "paper": claims["paper"],
            "paper's value": claims["paper_value"],
            "measured [interval]": [measured(r) for r in claims.itertuples()],
            "seeds": claims["seeds"],
            "scale": claims["scale"],
            "verdict": [f"**{r.verdict}**: {r.reason}" for r in claims.itertuples()],
            "size": [size(r) for r in claims.itertuples()],
        }
    )
    # a bare | would end the cell (claims such as |gap before| - |gap after|)
    table = table.map(lambda cell: cell.replace("|", "\\|") if isinstance(cell, str) else cell)
    return f"# {title}\n\n" + table.to_markdown(index=False) + "\n"


# ---------------------------------------------------------------------------------------------
# Comparing two runs' tables


def _inside(value, low, high) -> bool:
    return math.isfinite(low) and math.isfinite(high) and low <= value <= high


def compare_claims(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """What differs between two claims tables (two machines, seeds or commits), one row per
    finding: claim_id, kind ("verdict changed", "size verdict changed", "value moved", "only in
    A", "only in B"), A and B (what each says). A value moved when either run's value lies
    outside the other's interval (rows with an interval on that side)."""
    a, b = a.set_index("claim_id"), b.set_index("claim_id")
    found = []
    for claim in [c for c in a.index if c not in b.index]:
        found.append((claim, "only in A", a.loc[claim, "verdict"], ""))
    for claim in [c for c in b.index if c not in a.index]:
        found.append((claim, "only in B", "", b.loc[claim, "verdict"]))
    for claim in [c for c in a.index if c in b.index]:
        ra, rb = a.loc[claim], b.loc[claim]
        if ra["verdict"] != rb["verdict"]:
            found.append((claim, "verdict changed", ra["verdict"], rb["verdict"]))
        sa, sb = ra.get("size_verdict", ""), rb.get("size_verdict", "")
        if isinstance(sa, str) and isinstance(sb, str) and sa != sb:
            found.append((claim, "size verdict changed", sa, sb))
        va, vb = float(ra["measured"]), float(rb["measured"])
        la, ha, lb, hb = (float(ra["low"]), float(ra["high"]), float(rb["low"]), float(rb["high"]))
        outside = (math.isfinite(la) and math.isfinite(vb) and not _inside(vb, la, ha)) or (
            math.isfinite(lb) and math.isfinite(va) and not _inside(va, lb, hb)
        )
        if outside:
            found.append(
                (
                    claim,
                    "value moved",
                    f"{va:.4g} [{la:.4g}, {ha:.4g}]",
                    f"{vb:.4g} [{lb:.4g}, {hb:.4g}]",
                )
            )
    return pd.DataFrame(found, columns=["claim_id", "kind", "A", "B"])


def verdicts_changed(findings: pd.DataFrame) -> bool:
    """Whether a comparison found a changed verdict (or size verdict)."""
    return bool(findings["kind"].isin(["verdict changed", "size verdict changed"]).any())


def render_comparison(findings: pd.DataFrame, a: str, b: str) -> str:
    """The comparison as plain text, one finding a line, and a summary line."""
    lines = [f"A: {a}", f"B: {b}"]
    for row in findings.itertuples():
        lines.append(f"{row.kind:<21} {row.claim_id}: {row.A or '-'} -> {row.B or '-'}")
    changed = int(findings["kind"].isin(["verdict changed", "size verdict changed"]).sum())
    moved = int((findings["kind"] == "value moved").sum())
    lines.append(
        f"{changed} verdict(s) changed, {moved} value(s) moved outside the other's "
        f"interval, {len(findings) - changed - moved} claim(s) in one table only"
    )
    return "\n".join(lines) + "\n"


def claims_table_path(path: str | Path) -> Path:
    """A claims.csv file, or the result folder holding one."""
    path = Path(path)
    return path / "claims.csv" if path.is_dir() else path


# ---------------------------------------------------------------------------------------------
# Reading a run


def input_files(spec: dict) -> list[str]:
    """Every file `read_run_data(spec)` reads (for provenance)."""
    files = []
    for model in spec["models"].values():
        files += [f"{model['dir']}/train_log.csv", f"{model['dir']}/config.json"]
    files += [f"{d}/{f}" for d in spec["data"] for f in ("meta.json", "val.bin")]
    analysis_folders = list(spec["analysis"].values()) + [
        d for model in spec.get("pretrained", {}).values() for d in model["analysis"]
    ]
    for d in analysis_folders:
        files.append(f"{d}/measures.csv")
        if Path(f"{d}/angular_distance_all.csv").exists():
            files.append(f"{d}/angular_distance_all.csv")
    for folder in spec["pruning"].values():
        files += [f"{folder}/sweep.csv", f"{folder}/single_layer.csv"]
        if Path(f"{folder}/window_losses.csv").exists():
            files.append(f"{folder}/window_losses.csv")
    for folder in spec["depth_score"].values():
        files += [f"{folder}/problem_effects.csv", f"{folder}/accuracy.csv"]
    for folder in spec["linear_maps"].values():
        files += [f"{folder}/relative_error.csv", f"{folder}/summary.json"]
    files += [
        f"{folder}/scores.csv" for folder in spec.get("finetune", {}).get("scores", {}).values()
    ]
    files += [fit["fit"] for fit in spec["fits"].values()]
    if spec.get("toy"):
        files.append(spec["toy"]["fit"])
    return files


def _scale_text(run) -> str:
    tokens = int(run.log["tokens"].max())
    shown = f"{tokens / 1e6:.3g}M" if tokens >= 1e6 else f"{tokens / 1e3:.3g}k"
    return f"{run.depth} layers x {run.width}, {shown} tokens"


def _read_analysis(folder) -> tuple[pd.DataFrame, pd.Series, str]:
    """An analysis folder's measures.csv, its d(l, l+1) and which tokens that distance is over
    (all tokens, the paper's Eq. 1, when the folder has that matrix; else the last token)."""
    measures = pd.read_csv(f"{folder}/measures.csv")
    all_tokens = Path(folder, "angular_distance_all.csv")
    if all_tokens.exists():
        return measures, next_layer_distance(pd.read_csv(all_tokens)), "all tokens"
    distance = measures[(measures["measure"] == "angular_distance_last") & (measures["n"] == 1)]
    return measures, distance.set_index("layer")["value"], "last token"


def read_run_data(spec: dict) -> RunData:
    """Read every table the claims need (the `make_claims` spec names the files). Every model in
    spec["models"] was trained here; one whose data folder holds the depth problems
    (problems.jsonl) was trained on the task."""
    from .data import load_tokens
    from .pretrain_runs import read_run

    data = RunData(
        cod_pairs=[tuple(p) for p in spec["cod_pairs"]],
        pruning_groups=spec["pruning_groups"],
        depth_groups=spec["depth_groups"],
        map_groups=spec["map_groups"],
        bootstrap=spec["bootstrap"],
    )
    unigram = {folder: unigram_entropy(load_tokens(folder, "val")) for folder in spec["data"]}
    for name, model in spec["models"].items():
        run = read_run(model["dir"])
        data.trained.add(name)
        if Path(model["data"], "problems.jsonl").exists():
            data.task_trained.add(name)
        data.val_loss[name] = final_val_loss(run.log)
        data.unigram[name] = unigram[model["data"]]
        data.scale[name] = _scale_text(run)
    for name, folder in spec["analysis"].items():
        measures, distance, tokens = _read_analysis(folder)
        data.h_var[name] = measures[measures["measure"] == "h_var"].set_index("layer")["value"]
        data.distance[name], data.distance_tokens[name] = distance, tokens
    for name, model in spec.get("pretrained", {}).items():
        data.pretrained[name] = [_read_analysis(folder) for folder in model["analysis"]]
        data.pretrained_scale[name] = model["scale"]
    for name, folder in spec["pruning"].items():
        data.sweeps[name] = pd.read_csv(f"{folder}/sweep.csv")
        data.single_layer[name] = pd.read_csv(f"{folder}/single_layer.csv")
        windows = Path(folder, "window_losses.csv")
        if windows.exists():
            data.window_losses[name] = pd.read_csv(windows, keep_default_na=False)
    for name, folder in spec["depth_score"].items():
        data.problem_effects[name] = pd.read_csv(f"{folder}/problem_effects.csv")
        data.accuracy[name] = pd.read_csv(f"{folder}/accuracy.csv")
    for pair, folder in spec["linear_maps"].items():
        data.map_errors[pair] = pd.read_csv(f"{folder}/relative_error.csv")
        summary = json.loads(Path(f"{folder}/summary.json").read_text())
        data.map_ends[pair] = (summary["source"], summary["target"], summary["target_layers"])
    for name, fit in spec["fits"].items():
        data.fits[name] = (json.loads(Path(fit["fit"]).read_text()), fit["exponent_bounds"])
        if fit.get("trained_here"):
            data.fit_seeds[name] = int(fit["seeds"])
    finetune = spec.get("finetune") or {}
    data.finetune_pairs = [tuple(p) for p in finetune.get("pairs", [])]
    for name, folder in finetune.get("scores", {}).items():
        data.finetune_scores[name] = pd.read_csv(f"{folder}/scores.csv")
    if spec.get("toy"):
        data.toy_fit = json.loads(Path(spec["toy"]["fit"]).read_text())
        data.toy_bounds = tuple(spec["toy"]["exponent_bounds"])
    return data
