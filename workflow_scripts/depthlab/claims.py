"""The claims table: each testable claim of the four papers, the paper's value, what this run
measured (with an interval) and a verdict.

Verdicts: `reproduced`, `not reproduced`, `not testable at this scale` (with the reason: a model
that did not learn beyond the unigram loss, a fit parameter at its bound, an interval too wide to
decide). The rules, per claim kind:

  effect > 0 ("LNS grows less", "angular beats deepest"): reproduced when the interval lies above
      0, not reproduced when it lies below 0, not testable when it includes 0 or there is none
  no rise ("the depth score does not rise with difficulty"): not reproduced when the interval
      lies above 0, reproduced otherwise (needs an interval)
  paper value ("a_l = 1.2 +- 0.3"): reproduced when the interval contains the paper's value, not
      reproduced otherwise; not testable when the estimate or interval touches a fit bound

Intervals (CONFIDENCE, two-sided): a claim measured on several seeds takes the mean over seeds
with a t-interval (n >= 3) or the min-max range (n = 2); one run uses the interval of its own
measurement (bootstrap, OLS, a t-interval over layers or n, as the row says).

`read_run_data(spec)` reads a run's outputs into `RunData`; `build_claims(data)` is pure, so the
tests plant tables directly.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .paper_values import COD, CSORDAS, GROMOV, LIU, PAPER_VALUES

CONFIDENCE = 0.95
REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_TESTABLE = "not testable at this scale"
COLUMNS = ("claim_id", "paper", "claim", "paper_value", "measured", "low", "high", "interval",
           "scale", "verdict", "reason")


# ---------------------------------------------------------------------------------------------
# Estimates and intervals


@dataclass(frozen=True)
class Estimate:
    """A measured value with an optional interval [low, high] and how it was made."""

    value: float
    low: float = math.nan
    high: float = math.nan
    method: str = ""
    n: int = 1            # seeds (or seed pairs) the value averages over
    se: float = math.nan  # standard error, where the method has one

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def _t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, df))


def _z_quantile(confidence: float = CONFIDENCE) -> float:
    from scipy import stats

    return float(stats.norm.ppf(0.5 + confidence / 2))


def t_interval(values, what: str, confidence: float = CONFIDENCE) -> Estimate:
    """Mean of `values` with a t-interval (no interval for fewer than 2 finite values)."""
    values = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    if values.size == 0:
        return Estimate(math.nan, method=f"no finite {what}")
    mean = float(values.mean())
    if values.size < 2:
        return Estimate(mean, method=f"one {what}: no interval")
    se = float(values.std(ddof=1) / math.sqrt(values.size))
    half = _t_quantile(values.size - 1, confidence) * se
    return Estimate(mean, mean - half, mean + half,
                    f"{confidence:.0%} t-interval over {values.size} {what}", values.size, se)


def over_seeds(estimates: list[Estimate], confidence: float = CONFIDENCE) -> Estimate:
    """One run: its own estimate. Several seeds: their mean with a t-interval (n >= 3) or the
    min-max range (n = 2)."""
    if len(estimates) == 1:
        return estimates[0]
    values = [e.value for e in estimates]
    if len(values) == 2:
        return Estimate(float(np.mean(values)), min(values), max(values),
                        "min-max over 2 seeds", 2)
    return t_interval(values, "seeds", confidence)


def ols_slope(x, y, confidence: float = CONFIDENCE) -> Estimate:
    """Least-squares slope of y on x with its t-interval (df = n - 2)."""
    from scipy import stats

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 3:
        return Estimate(math.nan, method="fewer than 3 points")
    fit = stats.linregress(x, y)
    half = _t_quantile(x.size - 2, confidence) * fit.stderr
    return Estimate(float(fit.slope), fit.slope - half, fit.slope + half,
                    f"{confidence:.0%} OLS interval over {x.size} layers", 1, float(fit.stderr))


def difference(a: Estimate, b: Estimate, confidence: float = CONFIDENCE) -> Estimate:
    """a - b; the interval combines the two standard errors (normal), when both have one."""
    value = a.value - b.value
    if not (math.isfinite(a.se) and math.isfinite(b.se)):
        return Estimate(value, method="no interval")
    se = math.hypot(a.se, b.se)
    half = _z_quantile(confidence) * se
    return Estimate(value, value - half, value + half,
                    f"{confidence:.0%} normal interval from the two standard errors", 1, se)


# ---------------------------------------------------------------------------------------------
# Verdicts


def _interval_text(e: Estimate) -> str:
    return f"[{e.low:.4g}, {e.high:.4g}]"


def verdict_positive(e: Estimate, blockers=()) -> tuple[str, str]:
    """The claim: the effect is > 0."""
    if blockers:
        return NOT_TESTABLE, "; ".join(blockers)
    if not math.isfinite(e.value):
        return NOT_TESTABLE, e.method or "no value"
    if not e.has_interval:
        return NOT_TESTABLE, f"{e.method or 'no interval'} (add seeds)"
    if e.low > 0:
        return REPRODUCED, f"interval {_interval_text(e)} above 0"
    if e.high < 0:
        return NOT_REPRODUCED, f"interval {_interval_text(e)} below 0"
    return NOT_TESTABLE, f"interval {_interval_text(e)} includes 0"


def verdict_no_rise(e: Estimate, blockers=()) -> tuple[str, str]:
    """The claim: the effect is not > 0 (e.g. no rise with difficulty)."""
    if blockers:
        return NOT_TESTABLE, "; ".join(blockers)
    if not e.has_interval:
        return NOT_TESTABLE, f"{e.method or 'no interval'} (add seeds)"
    if e.low > 0:
        return NOT_REPRODUCED, f"rises: interval {_interval_text(e)} above 0"
    return REPRODUCED, f"interval {_interval_text(e)} does not lie above 0"


def verdict_value(e: Estimate, paper_value: float, blockers=()) -> tuple[str, str]:
    """The claim: the parameter equals the paper's value (inside our interval)."""
    if blockers:
        return NOT_TESTABLE, "; ".join(blockers)
    if not e.has_interval:
        return NOT_TESTABLE, e.method or "no interval"
    if e.low <= paper_value <= e.high:
        return REPRODUCED, f"{paper_value:g} inside {_interval_text(e)}"
    return NOT_REPRODUCED, f"{paper_value:g} outside {_interval_text(e)}"


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
    change = [abs(before["deepest"][n] - before["angular"][n])
              - abs(healed["deepest"][n] - healed["angular"][n]) for n in ns]
    return t_interval(change, "healed n")


def depth_score_rise(effects: pd.DataFrame, family: str, resamples: int, seed: int,
                     confidence: float = CONFIDENCE) -> Estimate:
    """Depth score of the hardest level minus that of the easiest (problem_effects.csv rows of
    one family), with a percentile bootstrap over problems within each level."""
    from .depth_score import depth_score

    rows = effects[effects["family"] == family]
    table = rows.pivot_table(index=["level", "problem"], columns="skipped",
                             values="output_effect").dropna()
    levels = sorted(table.index.get_level_values("level").unique())
    if len(levels) < 2:
        return Estimate(math.nan, method="fewer than 2 difficulty levels")
    easy, hard = (table.xs(level, level="level").to_numpy() for level in (levels[0], levels[-1]))
    value = depth_score(hard.mean(axis=0)) - depth_score(easy.mean(axis=0))
    rng = np.random.default_rng(seed)
    boot = [depth_score(hard[rng.integers(0, len(hard), len(hard))].mean(axis=0))
            - depth_score(easy[rng.integers(0, len(easy), len(easy))].mean(axis=0))
            for _ in range(resamples)]
    boot = np.asarray([b for b in boot if math.isfinite(b)])
    if boot.size == 0:
        return Estimate(value, method="bootstrap failed")
    low, high = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Estimate(float(value), float(low), float(high),
                    f"{confidence:.0%} bootstrap over problems ({resamples} resamples), "
                    f"level {levels[-1]} - level {levels[0]}")


def hardest_level_solved(accuracy: pd.DataFrame, family: str) -> str | None:
    """None when the hardest level's accuracy is above chance (one-sided binomial test at 5%);
    otherwise the reason the depth score there says nothing about using depth."""
    from scipy import stats

    rows = accuracy[accuracy["family"] == family].sort_values("level")
    if rows.empty:
        return f"no accuracy for family {family}"
    hard = rows.iloc[-1]
    correct = int(round(hard["accuracy"] * hard["problems"]))
    test = stats.binomtest(correct, int(hard["problems"]), float(hard["chance"]),
                           alternative="greater")
    if test.pvalue < 0.05:
        return None
    return (f"level {hard['level']} accuracy {hard['accuracy']:.2f} is not above chance "
            f"{hard['chance']:.2f}")


def linear_map_advantage(best: pd.DataFrame, target_layers: int) -> Estimate:
    """How much closer to equal relative depth the best target layer is than a target chosen
    without regard to depth: per source layer, mean_t |t/L - s| - |best/L - s| (relative
    depths s, t of source and target states), averaged with a t-interval over source layers."""
    targets = np.arange(target_layers + 1) / target_layers
    gains = [float(np.abs(targets - row.source_depth).mean()
                   - abs(row.best_target_depth - row.source_depth))
             for row in best.itertuples()]
    return t_interval(gains, "source layers")


def fit_parameter(fit: dict, name: str, bounds, tolerance: float = 1e-6) -> tuple[Estimate, bool]:
    """A fitted parameter with its bootstrap interval, and whether the estimate or the interval
    touches the exponent bounds (or the fit reports it at a bound)."""
    interval = fit.get("intervals", {}).get(name, {})
    confidence = fit.get("bootstrap", {}).get("confidence", CONFIDENCE)
    e = Estimate(float(fit["estimates"][name]), float(interval.get("low", math.nan)),
                 float(interval.get("high", math.nan)),
                 f"{confidence:.0%} bootstrap ({fit.get('bootstrap', {}).get('resamples')} "
                 f"resamples, {fit.get('bootstrap', {}).get('unit', 'points')})")
    lo, hi = bounds
    slack = tolerance * (hi - lo)
    touches = [v for v in (e.value, e.low, e.high)
               if math.isfinite(v) and (v <= lo + slack or v >= hi - slack)]
    return e, bool(touches) or name in fit.get("parameters_at_bounds", [])


def toy_exponent_gaps(fit: dict, bounds=None) -> dict[float, tuple[Estimate, list[str]]]:
    """Per temperature: a_tied - a_independent, over replicate fits (rows with the same kind and
    temperature) or, for one fit each, with a normal interval from the fits' standard errors;
    with the reasons it cannot be judged (an exponent at its bound)."""
    fits = pd.DataFrame(fit["fits"])
    if "seed" in fits:  # replicate fits pair tied and independent by seed
        fits = fits.sort_values("seed", kind="stable")
    result = {}
    for temperature, rows in fits.groupby("temperature"):
        kinds = {k: r for k, r in rows.groupby("teacher_kind")}
        if not {"tied", "independent"} <= set(kinds):
            continue
        blockers = []
        if bounds is not None and fit.get("form") == "power_offset":
            lo, hi = bounds
            for kind, r in kinds.items():
                if ((r["a"] <= lo + 1e-6) | (r["a"] >= hi - 1e-6)).any():
                    blockers.append(f"{kind} exponent at its bound {[lo, hi]}")
        tied, indep = kinds["tied"], kinds["independent"]
        if len(tied) > 1 and len(tied) == len(indep):
            gap = over_seeds([Estimate(float(a - b)) for a, b in
                              zip(tied["a"], indep["a"])])
        else:
            gap = difference(Estimate(float(tied["a"].mean()), se=float(tied["a_se"].iloc[0])),
                             Estimate(float(indep["a"].mean()), se=float(indep["a_se"].iloc[0])))
        result[float(temperature)] = (gap, blockers)
    return result


# ---------------------------------------------------------------------------------------------
# The run's data and the claims


@dataclass
class RunData:
    """What the claims read from a run, keyed by (expanded) model name.

    cod_pairs: (baseline group, its members, treatment group, its members) of Pre-LN vs LNS
    models of the same architecture and training; groups: {base name: members} for every stage
    below."""

    cod_pairs: list = field(default_factory=list)
    val_loss: dict = field(default_factory=dict)        # final validation loss
    unigram: dict = field(default_factory=dict)         # unigram entropy of the model's val split
    scale: dict = field(default_factory=dict)           # "12 layers x 128, 262k tokens"
    h_var: dict = field(default_factory=dict)           # Series by state l
    distance: dict = field(default_factory=dict)        # d(l, l+1) Series by layer l
    single_layer: dict = field(default_factory=dict)    # single_layer.csv frames
    pruning_groups: dict = field(default_factory=dict)  # {group: members} of pruned models
    sweeps: dict = field(default_factory=dict)          # pruning sweep.csv frames
    depth_groups: dict = field(default_factory=dict)    # {group: members} of scored models
    problem_effects: dict = field(default_factory=dict)
    accuracy: dict = field(default_factory=dict)
    bootstrap: dict = field(default_factory=lambda: {"resamples": 1000, "seed": 0})
    map_groups: dict = field(default_factory=dict)      # {config pair: [expanded pairs]}
    best_target: dict = field(default_factory=dict)     # best_target.csv frames by pair
    map_ends: dict = field(default_factory=dict)        # pair -> (source, target, target layers)
    fits: dict = field(default_factory=dict)            # name -> (fit.json dict, bounds)
    toy_fit: dict | None = None
    toy_bounds: tuple | None = None


def _not_learned(data: RunData, members) -> list[str]:
    """Reasons a model's measurements say nothing about the paper: no better than unigram."""
    reasons = []
    for name in members:
        loss, unigram = data.val_loss.get(name), data.unigram.get(name)
        if loss is not None and unigram is not None and not loss < unigram:
            reasons.append(f"{name} val loss {loss:.3f} is not below the unigram loss "
                           f"{unigram:.3f} (did not learn)")
    return reasons


def _scale(data: RunData, members) -> str:
    first = data.scale.get(members[0], members[0])
    return first + (f", {len(members)} seeds" if len(members) > 1 else "")


def _seed_pairs(base: list, treat: list) -> list[tuple[str, str]]:
    """Baseline and treatment members paired in order (seed i with seed i)."""
    return list(zip(base, treat))


def _row(claim_id, paper, claim, paper_key, e: Estimate, scale, verdict,
         paper_value: str | None = None) -> dict:
    return {"claim_id": claim_id, "paper": paper, "claim": claim,
            "paper_value": paper_value or PAPER_VALUES[paper_key].describe(),
            "measured": e.value, "low": e.low, "high": e.high, "interval": e.method,
            "scale": scale, "verdict": verdict[0], "reason": verdict[1]}


def _cod_claims(data: RunData) -> list[dict]:
    rows = []
    for base, base_members, treat, treat_members in data.cod_pairs:
        pairs = _seed_pairs(base_members, treat_members)
        members = [m for pair in pairs for m in pair]
        blockers = _not_learned(data, members)
        scale = _scale(data, base_members)
        suffix = f":{base}-vs-{treat}" if len(data.cod_pairs) > 1 else ""
        if all(m in data.h_var for m in members):
            growth = over_seeds([log_variance_slope(data.h_var[b]) for b, _ in pairs])
            rows.append(_row(f"cod_variance_growth{suffix}", COD,
                             f"{base}: ln Var(h_l) rises with depth l (slope > 0)",
                             "cod_variance_growth", growth, scale,
                             verdict_positive(growth, blockers)))
            less = over_seeds([difference(log_variance_slope(data.h_var[b]),
                                          log_variance_slope(data.h_var[t])) for b, t in pairs])
            rows.append(_row(f"cod_lns_variance{suffix}", COD,
                             f"{treat}'s variance grows less: slope({base}) - slope({treat}) > 0",
                             "cod_variance_growth", less, scale, verdict_positive(less, blockers)))
        if all(m in data.val_loss for m in members):
            gain = over_seeds([Estimate(data.val_loss[b] - data.val_loss[t]) for b, t in pairs])
            if len(pairs) == 1:
                gain = Estimate(gain.value, method="one run per scheme: no interval")
            rows.append(_row(f"cod_val_loss{suffix}", COD,
                             f"{treat} reaches a lower validation loss: loss({base}) - "
                             f"loss({treat}) > 0", "cod_ppl_lns", gain, scale,
                             verdict_positive(gain, blockers),
                             f"perplexity Pre-LN {PAPER_VALUES['cod_ppl_pre_ln'].describe()}, "
                             f"LNS {PAPER_VALUES['cod_ppl_lns'].describe()}"))
        if all(m in data.distance for m in members):
            gap = over_seeds([deep_layer_gap(data.distance[b], data.distance[t])
                              for b, t in pairs])
            rows.append(_row(f"cod_angular_distance{suffix}", COD,
                             f"deep {base} layers are closer to identity: mean over the deeper "
                             f"half of d(l, l+1)[{treat}] - d(l, l+1)[{base}] > 0",
                             "cod_angular_distance", gap, scale, verdict_positive(gap, blockers)))
        if all(m in data.single_layer for m in members):
            drops = [(single_layer_drop(data.single_layer[b]),
                      single_layer_drop(data.single_layer[t])) for b, t in pairs]
            what = drops[0][0][1]
            gap = over_seeds([deep_layer_gap(db[0], dt[0]) for db, dt in drops])
            rows.append(_row(f"cod_delta_p{suffix}", COD,
                             f"removing one deep {base} layer hurts less: mean over the deeper "
                             f"half of {what}[{treat}] - {what}[{base}] > 0",
                             "cod_delta_p", gap, scale, verdict_positive(gap, blockers)))
    return rows


def _gromov_claims(data: RunData) -> list[dict]:
    rows = []
    for group, members in data.pruning_groups.items():
        if not all(m in data.sweeps for m in members):
            continue
        blockers = _not_learned(data, members)
        scale = _scale(data, members)
        before = over_seeds([block_choice_gap(data.sweeps[m]) for m in members])
        rows.append(_row(f"gromov_block_choice:{group}", GROMOV,
                         f"{group}: the angular block beats dropping the deepest layers before "
                         f"healing: mean over n of val_loss(deepest) - val_loss(angular) > 0",
                         "gromov_block_vs_baseline", before, scale,
                         verdict_positive(before, blockers)))
        changes = [healing_gap_change(data.sweeps[m]) for m in members]
        claim = (f"{group}: healing shrinks the gap: mean over healed n of |gap before| - "
                 f"|gap after| > 0")
        if any(c is None for c in changes):
            rows.append(_row(f"gromov_healing_gap:{group}", GROMOV, claim,
                             "gromov_block_vs_baseline", Estimate(math.nan), scale,
                             (NOT_TESTABLE, "needs healed angular and deepest variants "
                                            "(pruning.healing.strategies)")))
        else:
            after = over_seeds(changes)
            rows.append(_row(f"gromov_healing_gap:{group}", GROMOV, claim,
                             "gromov_block_vs_baseline", after, scale,
                             verdict_positive(after, blockers)))
    return rows


def _csordas_claims(data: RunData) -> list[dict]:
    rows = []
    for key, pairs in data.map_groups.items():
        if not all(p in data.best_target for p in pairs):
            continue
        ends = [data.map_ends[p] for p in pairs]
        blockers = _not_learned(data, [m for s, t, _ in ends for m in (s, t)])
        gain = over_seeds([linear_map_advantage(data.best_target[p], data.map_ends[p][2])
                           for p in pairs])
        source, target, _ = ends[0]
        scale = f"{data.scale.get(source, source)} -> {data.scale.get(target, target)}"
        rows.append(_row(f"csordas_linear_maps:{key}", CSORDAS,
                         f"{key}: the best target layer is nearer equal relative depth than a "
                         f"depth-blind choice: mean over source layers of E_t|t - s| - "
                         f"|best - s| > 0", "csordas_linear_maps", gain,
                         scale + (f", {len(pairs)} seeds" if len(pairs) > 1 else ""),
                         verdict_positive(gain, blockers)))
    for group, members in data.depth_groups.items():
        if not all(m in data.problem_effects for m in members):
            continue
        families = sorted(set(data.problem_effects[members[0]]["family"]))
        for family in families:
            blockers = _not_learned(data, members) + [
                r for m in members if (r := hardest_level_solved(data.accuracy[m], family))]
            rise = over_seeds([depth_score_rise(data.problem_effects[m], family,
                                                data.bootstrap["resamples"],
                                                data.bootstrap["seed"]) for m in members])
            rows.append(_row(f"csordas_depth_score:{group}:{family}", CSORDAS,
                             f"{group} on {family}: the depth score does not rise with difficulty "
                             f"(hardest - easiest level is not > 0)", "csordas_depth_score",
                             rise, _scale(data, members), verdict_no_rise(rise, blockers)))
    return rows


def _liu_claims(data: RunData) -> list[dict]:
    rows = []
    for name, (fit, bounds) in data.fits.items():
        scale = f"{fit.get('n_points_used', '?')} points ({name})"
        checks = ([("a_l", "liu_a_l"), ("a_m", "liu_a_m"), ("a_D", "liu_a_D")]
                  if fit.get("law") == "decomposed" else [("alpha", "besiroglu_alpha")])
        for parameter, key in checks:
            if parameter not in fit.get("estimates", {}):
                continue
            e, at_bound = fit_parameter(fit, parameter, bounds)
            blockers = [f"{parameter} at bound: estimate or interval touches {list(bounds)}"
                        ] if at_bound else []
            # another parameter at its bound means the fitted law degenerated
            others = [p for p in fit.get("parameters_at_bounds", []) if p != parameter]
            if others:
                blockers.append(f"the fit is degenerate: {', '.join(others)} at a bound")
            paper = PAPER_VALUES[key]
            rows.append(_row(f"{key}:{name}", paper.paper,
                             f"fitted {parameter} matches the paper's {paper.value:g}", key, e,
                             scale, verdict_value(e, paper.value, blockers)))
    if data.toy_fit is not None:
        for temperature, (gap, blockers) in toy_exponent_gaps(data.toy_fit,
                                                              data.toy_bounds).items():
            depths = sorted({r["student_depth"] for r in data.toy_fit.get("losses", [])})
            rows.append(_row(f"liu_toy_tied_exceeds:T={temperature:g}", LIU,
                             f"toy students at T={temperature:g}: the tied-teacher depth exponent "
                             f"exceeds the independent one (a_tied - a_indep > 0)",
                             "liu_toy_tied", gap, f"student depths {depths}",
                             verdict_positive(gap, blockers),
                             f"a_l ≈ {PAPER_VALUES['liu_toy_tied'].value:g} tied vs ≈ "
                             f"{PAPER_VALUES['liu_toy_independent'].describe()} independent"))
    return rows


def build_claims(data: RunData) -> pd.DataFrame:
    """Every claim the run's data can test, one row each (COLUMNS)."""
    rows = _cod_claims(data) + _gromov_claims(data) + _csordas_claims(data) + _liu_claims(data)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def render_markdown(claims: pd.DataFrame, title: str) -> str:
    """The claims table as Markdown: measured value with its interval, verdict with reason."""
    def measured(row):
        if not math.isfinite(row.measured):
            return "-"
        text = f"{row.measured:.4g}"
        if math.isfinite(row.low) and math.isfinite(row.high):
            text += f" [{row.low:.4g}, {row.high:.4g}]"
        return text + (f" ({row.interval})" if row.interval else "")

    table = pd.DataFrame({
        "claim": [f"`{r.claim_id}` {r.claim}" for r in claims.itertuples()],
        "paper": claims["paper"], "paper's value": claims["paper_value"],
        "measured [interval]": [measured(r) for r in claims.itertuples()],
        "scale": claims["scale"],
        "verdict": [f"**{r.verdict}**: {r.reason}" for r in claims.itertuples()]})
    # a bare | would end the cell (claims such as |gap before| - |gap after|)
    table = table.map(lambda cell: cell.replace("|", "\\|") if isinstance(cell, str) else cell)
    return f"# {title}\n\n" + table.to_markdown(index=False) + "\n"


# ---------------------------------------------------------------------------------------------
# Reading a run


def input_files(spec: dict) -> list[str]:
    """Every file `read_run_data(spec)` reads (for provenance)."""
    files = []
    for name, model in spec["models"].items():
        files += [f"{model['dir']}/train_log.csv", f"{model['dir']}/config.json"]
    files += [f"{d}/{f}" for d in spec["data"] for f in ("meta.json", "val.bin")]
    files += [f"{d}/measures.csv" for d in spec["analysis"].values()]
    for folder in spec["pruning"].values():
        files += [f"{folder}/sweep.csv", f"{folder}/single_layer.csv"]
    for folder in spec["depth_score"].values():
        files += [f"{folder}/problem_effects.csv", f"{folder}/accuracy.csv"]
    for folder in spec["linear_maps"].values():
        files += [f"{folder}/best_target.csv", f"{folder}/summary.json"]
    files += [fit["fit"] for fit in spec["fits"].values()]
    if spec.get("toy"):
        files.append(spec["toy"]["fit"])
    return files


def _scale_text(run) -> str:
    tokens = int(run.log["tokens"].max())
    shown = f"{tokens / 1e6:.3g}M" if tokens >= 1e6 else f"{tokens / 1e3:.3g}k"
    return f"{run.depth} layers x {run.width}, {shown} tokens"


def read_run_data(spec: dict) -> RunData:
    """Read every table the claims need (the `make_claims` spec names the files)."""
    from .data import load_tokens
    from .runs import read_run

    data = RunData(cod_pairs=[tuple(p) for p in spec["cod_pairs"]],
                   pruning_groups=spec["pruning_groups"], depth_groups=spec["depth_groups"],
                   map_groups=spec["map_groups"], bootstrap=spec["bootstrap"])
    unigram = {folder: unigram_entropy(load_tokens(folder, "val")) for folder in spec["data"]}
    for name, model in spec["models"].items():
        run = read_run(model["dir"])
        data.val_loss[name] = final_val_loss(run.log)
        data.unigram[name] = unigram[model["data"]]
        data.scale[name] = _scale_text(run)
    for name, folder in spec["analysis"].items():
        measures = pd.read_csv(f"{folder}/measures.csv")
        data.h_var[name] = measures[measures["measure"] == "h_var"].set_index("layer")["value"]
        distance = measures[(measures["measure"] == "angular_distance_last")
                            & (measures["n"] == 1)]
        data.distance[name] = distance.set_index("layer")["value"]
    for name, folder in spec["pruning"].items():
        data.sweeps[name] = pd.read_csv(f"{folder}/sweep.csv")
        data.single_layer[name] = pd.read_csv(f"{folder}/single_layer.csv")
    for name, folder in spec["depth_score"].items():
        data.problem_effects[name] = pd.read_csv(f"{folder}/problem_effects.csv")
        data.accuracy[name] = pd.read_csv(f"{folder}/accuracy.csv")
    for pair, folder in spec["linear_maps"].items():
        data.best_target[pair] = pd.read_csv(f"{folder}/best_target.csv")
        summary = json.loads(Path(f"{folder}/summary.json").read_text())
        data.map_ends[pair] = (summary["source"], summary["target"], summary["target_layers"])
    for name, fit in spec["fits"].items():
        data.fits[name] = (json.loads(Path(fit["fit"]).read_text()), fit["exponent_bounds"])
    if spec.get("toy"):
        data.toy_fit = json.loads(Path(spec["toy"]["fit"]).read_text())
        data.toy_bounds = tuple(spec["toy"]["exponent_bounds"])
    return data
