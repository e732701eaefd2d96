"""Measurements of the claims table: pure functions of the stages' tables (per-layer series, window
losses, problem effects, map errors, fits) that return a value or an Estimate."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from depthlab.claims.verdicts import (
    CONFIDENCE,
    Estimate,
    difference,
    ols_slope,
    t_interval,
)

# ---------------------------------------------------------------------------------------------
# Measurements (pure functions of the stages' tables)


def unigram_entropy(tokens) -> float:
    """Entropy (nats) of the empirical token distribution: the loss of the best unigram model on
    these tokens, so a model at or above it has learned nothing beyond token frequencies."""
    counts = np.bincount(np.asarray(tokens, dtype=np.int64))
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def mean_task_score(frame: pd.DataFrame) -> Estimate:
    """Mean of lm-eval score rows (one per task, or per task and n) with its standard error from
    the rows' score_stderr: the items differ between rows, so the errors of the means combine as
    independent (se = sqrt(sum se_i^2) / rows; NaN without a score_stderr column)."""
    value = float(frame["score"].mean())
    if "score_stderr" not in frame:
        return Estimate(value, n=1)
    return Estimate(value, n=1, se=float(np.sqrt((frame["score_stderr"] ** 2).sum()) / len(frame)))


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
    # the model's deeper half, also when one layer is left out (layer_check)
    deep = [l for l in layers if l in deep_layers(int(max(layers)) + 1)]
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


def healed_ns(sweep: pd.DataFrame, strategy: str = "angular") -> tuple[int, ...]:
    """The n at which a strategy's block was healed."""
    flags = sweep["healed"].astype(str)
    rows = sweep[(sweep["strategy"] == strategy) & (flags == "True") & (sweep["n"] > 0)]
    return tuple(sorted(int(n) for n in rows["n"].unique()))


def sweep_layers(sweep: pd.DataFrame) -> int | None:
    """The model's layer count from a sweep.csv (n / fraction of a removal row), None without
    one."""
    rows = sweep[(sweep["n"] > 0) & (sweep.get("fraction", pd.Series(dtype=float)) > 0)]
    if "fraction" not in sweep or rows.empty:
        return None
    return int(round(float(rows["n"].iloc[0]) / float(rows["fraction"].iloc[0])))


def block_range(num_layers: int | None, max_fraction: float) -> int | None:
    """The largest block size n of the paper's range: about `max_fraction` of the layers."""
    return None if num_layers is None else max(1, int(num_layers * max_fraction))


def removal_damage(sweep: pd.DataFrame, strategy: str, max_n: int | None = None) -> float:
    """Mean over 1 <= n <= max_n of val_loss(strategy, n) - val_loss(intact), unhealed: how much
    the removals cost at all (two rankings cannot differ by more than their sets' damage)."""
    unhealed = sweep[sweep["healed"].astype(str) == "False"]
    intact = unhealed[unhealed["n"] == 0]["val_loss"]
    losses = _unhealed(sweep, strategy)
    ns = [n for n in losses.index if n >= 1 and (max_n is None or n <= max_n)]
    if intact.empty or not ns:
        return math.nan
    return float(np.mean([losses[n] for n in ns]) - intact.iloc[0])


def no_room(damages: list[float], threshold: float, what: str) -> list[str]:
    """[reason] when removing layers is not shown to cost the threshold at all (`damages`: per
    model, the loss a removal adds): two choices of layers could then not differ by it, and a
    fail would be forced, not measured; [] otherwise. Over >= 3 models (seeds) the gate decides
    on the t-interval of their mean, whose lower end must reach the threshold (an interval, so
    that another CPU's rounding cannot flip it); over fewer (an indicative row anyway) on the
    mean."""
    finite = [d for d in damages if math.isfinite(d)]
    if not finite:
        return []
    e = t_interval(finite, "models")
    seeds = len(finite) >= 3 and e.has_interval
    if (e.low if seeds else e.value) >= threshold:
        return []
    spread = f" [{e.low:.3g}, {e.high:.3g}] over {len(finite)} seeds" if seeds else ""
    return [
        f"removing layers here costs {e.value:.3g} nats{spread} ({what}), not shown to reach "
        f"the threshold {threshold:.3g}: two choices cannot be shown to differ by it"
    ]


def block_choice_gap(sweep: pd.DataFrame, max_n: int | None = None) -> Estimate:
    """Mean over the removed-layer counts 1 <= n <= max_n (None: every n) of val_loss(deepest)
    - val_loss(angular), unhealed (> 0: the angular block choice is better), t-interval over n."""
    angular, deepest = _unhealed(sweep, "angular"), _unhealed(sweep, "deepest")
    ns = sorted(
        n
        for n in set(angular.index) & set(deepest.index)
        if n >= 1 and (max_n is None or n <= max_n)
    )
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


def halves(values: pd.Series) -> tuple[list[float], list[float]]:
    """A per-layer series split into the model's shallower and deeper half (deep_layers of a
    model with max(layer) + 1 layers; a series that omits early layers keeps the model's
    halves)."""
    deep = set(deep_layers(int(max(values.index)) + 1))
    layers = sorted(values.index)
    return [values[l] for l in layers if l not in deep], [values[l] for l in layers if l in deep]


def half_gap(values: pd.Series) -> float:
    """Mean over the shallower half of the layers minus mean over the deeper half of a per-layer
    series (> 0: the deeper half is smaller)."""
    shallow, deep = halves(values)
    return float(np.mean(shallow) - np.mean(deep))


def _window_table(windows: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """window_losses.csv as a (windows x removal sets) loss matrix and the sets' keys: "full",
    "single:<layer>", "<strategy>:<n>" and, for healed variants, "healed:<strategy>:<n>" (with
    several healing methods, column `method`: the first method's; another method's
    "healed[<method>]:<strategy>:<n>", healed_prefix)."""
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
        prefix = pd.Series("healed:", index=windows.index)
        methods = healing_methods(windows)
        if methods:
            method = windows["method"].astype(str)
            prefix = prefix.where(method == methods[0], "healed[" + method + "]:")
        keys = keys.where(~healed, prefix + keys)
    table = windows.assign(key=keys).pivot_table(index="window", columns="key", values="loss")
    return table.to_numpy(dtype=np.float64), list(table.columns)


def healing_methods(windows: pd.DataFrame) -> list[str]:
    """The healing methods of window_losses.csv's healed rows, the first method (the gathering
    job writes its rows first) first; [] without a `method` column or healed rows."""
    if "method" not in windows or "healed" not in windows:
        return []
    healed = windows["healed"].astype(str).str.lower() == "true"
    return list(dict.fromkeys(windows.loc[healed, "method"].astype(str)))


def healed_prefix(methods: list[str], method: str) -> str:
    """The key prefix of one healing method's healed sets in _window_table's keys."""
    return "healed:" if method == methods[0] else f"healed[{method}]:"


def healed_sets(means: dict, prefix: str) -> dict:
    """{(strategy, n): mean loss} of the healed sets whose keys start with `prefix`."""
    sets = {}
    for key, loss in means.items():
        if key.startswith(prefix):
            strategy, n = key.removeprefix(prefix).rsplit(":", 1)
            sets[(strategy, int(n))] = loss
    return sets


def method_gap_of_means(means: dict, worse: str, better: str) -> tuple[float, int | None]:
    """(gap, n): at the largest n some strategy was healed at by both methods (key prefixes
    `worse` and `better`), the mean over those strategies of loss(worse) - loss(better)
    (> 0: `better` heals more); (NaN, None) when no set was healed by both."""
    a, b = healed_sets(means, worse), healed_sets(means, better)
    both = set(a) & set(b)
    if not both:
        return math.nan, None
    n = max(n for _, n in both)
    return float(np.mean([a[key] - b[key] for key in sorted(both) if key[1] == n])), n


def window_means(windows: pd.DataFrame) -> dict:
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


def delta_p_half_gap(means: dict, without: int | None = None) -> float:
    """half_gap of the single-layer loss increase (per layer: loss without it - full loss);
    `without`: that layer left out of the comparison (layer_check). Plain Python, not a pandas
    Series: it runs once per bootstrap resample and left-out layer (tens of thousands of
    times), and gives half_gap's numbers exactly (the same values, order and means)."""
    full = means["full"]
    singles = sorted(
        (int(key.split(":", 1)[1]), loss - full)
        for key, loss in means.items()
        if key.startswith("single:")
    )
    if without is not None:
        singles = [(layer, value) for layer, value in singles if layer != without]
    deep = set(deep_layers(max(layer for layer, _ in singles) + 1))
    shallow = [value for layer, value in singles if layer not in deep]
    deeper = [value for layer, value in singles if layer in deep]
    return float(np.mean(shallow) - np.mean(deeper))


def without_layer(values: pd.Series, layer: int | None) -> pd.Series:
    """A per-layer series (indexed by layer) with one layer left out (None: all layers); the
    others keep their index, so the halves stay the model's."""
    return values if layer is None else values.drop(index=layer, errors="ignore")


def states_without_layer(h_var: pd.Series, layer: int | None) -> pd.Series:
    """A per-state profile (h_l, l = 0..L, layer l maps state l to l + 1) as if layer `layer`
    were an identity: the states after it lose its step (a factor Var(h_l) / Var(h_(l+1))) and
    move up one index. Leaving out a layer's step, not its state, is what catches a profile
    whose growth is one step: dropping one state of a staircase keeps the step."""
    if layer is None:
        return h_var
    states = h_var.sort_index()
    if layer + 1 not in states.index or layer not in states.index:
        return states
    step = float(states[layer + 1] / states[layer])
    before = states[states.index <= layer]
    after = states[states.index > layer + 1] / step
    after.index = after.index - 1
    return pd.concat([before, after])


def block_gap_of_means(means: dict, max_n: int | None = None) -> float:
    """Mean over 1 <= n <= max_n (None: every n) of loss(deepest:n) - loss(angular:n):
    block_choice_gap on set means (NaN when no n is in range)."""
    ns = [
        key.split(":", 1)[1]
        for key in means
        if key.startswith("angular:") and f"deepest:{key.split(':', 1)[1]}" in means
    ]
    ns = [n for n in ns if int(n) >= 1 and (max_n is None or int(n) <= max_n)]
    if not ns:
        return math.nan
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
    from depthlab.stages.depth_use.depth_score import depth_score

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


def binomial_interval(correct: int, trials: int, confidence: float = CONFIDENCE) -> tuple:
    """The Clopper-Pearson (exact) interval of a binomial proportion, correct of trials: it never
    covers less than `confidence`, so a gate on its lower bound is as strict as the level says
    (the normal and Wilson intervals cover less near 0, where chance accuracies lie)."""
    from scipy import stats

    if trials <= 0:
        return math.nan, math.nan
    ci = stats.binomtest(int(correct), int(trials)).proportion_ci(confidence, method="exact")
    return float(ci.low), float(ci.high)


def hardest_level_accuracy(accuracies, family: str, confidence: float = CONFIDENCE):
    """(Estimate of the hardest level's accuracy, its chance, its level) over the models of one
    row (accuracy.csv frames, one per seed; a single frame for one model), None without rows of
    `family`. One model (or two: too few seeds for an interval over them): its accuracy with the
    Clopper-Pearson interval over its answers. MIN_SEEDS seeds or more: their mean with a
    t-interval over seeds widened by the problems' binomial standard error (the same problems
    for every seed, verdicts.over_seeds), so one seed's accuracy cannot decide."""
    from depthlab.claims.verdicts import MIN_SEEDS, over_seeds

    frames = [accuracies] if isinstance(accuracies, pd.DataFrame) else list(accuracies)
    hardest = []
    for frame in frames:
        rows = frame[frame["family"] == family].sort_values("level")
        if rows.empty:
            return None
        hardest.append(rows.iloc[-1])
    level, chance = hardest[0]["level"], float(hardest[0]["chance"])
    if len(hardest) < MIN_SEEDS:
        trials = sum(int(h["problems"]) for h in hardest)
        correct = sum(int(round(float(h["accuracy"]) * int(h["problems"]))) for h in hardest)
        low, high = binomial_interval(correct, trials, confidence)
        pooled = f", pooled over {len(hardest)} models" if len(hardest) > 1 else ""
        e = Estimate(
            correct / trials if trials else math.nan,
            low,
            high,
            f"{confidence:.0%} Clopper-Pearson interval over {trials} answers{pooled}",
        )
        return e, chance, level
    values = [float(h["accuracy"]) for h in hardest]
    se = [math.sqrt(v * (1 - v) / max(int(h["problems"]), 1)) for v, h in zip(values, hardest)]
    return over_seeds([Estimate(v) for v in values], confidence, sample_se=se), chance, level


def hardest_level_solved(accuracies, family: str) -> str | None:
    """None when the hardest level's accuracy lies above chance on an interval (the whole
    interval of hardest_level_accuracy above the level's chance); otherwise the reason the depth
    score there says nothing about using depth. Decided on an interval, not the point accuracy:
    the gate opens only for an accuracy clearly above chance, so a few answers more (another
    CPU's rounding) or one lucky seed cannot open it; an accuracy at chance blocks, and so does
    one just above chance whose interval reaches it."""
    found = hardest_level_accuracy(accuracies, family)
    if found is None:
        return f"no accuracy for family {family}"
    e, chance, level = found
    shown = f"level {level} accuracy {e.value:.2f}"
    if not e.has_interval:
        return f"{shown} has no interval ({e.method}): cannot tell it from chance {chance:.2f}"
    interval = f"[{e.low:.3g}, {e.high:.3g}] ({e.method})"
    if e.low > chance:
        return None
    where = "reaches" if e.high > chance else "lies at or below"
    return f"{shown} {interval} {where} chance {chance:.2f}: not above chance"


def kl_drop_layer(kl: pd.Series) -> int | None:
    """The layer l whose step h_l -> h_(l+1) lowers the logit-lens KL(p_l || p_L) most (nats),
    over l = 0 .. L-2 (kl indexed by state 0..L). The last layer's step is left out: KL(p_L ||
    p_L) is 0 by construction, so that step measures the readout's own layer, not a transition
    inside the network. None with fewer than 3 states or a non-finite KL."""
    states = kl.sort_index()
    values = states.to_numpy(dtype=np.float64)
    if values.size < 3 or not np.all(np.isfinite(values)):
        return None
    drops = values[:-2] - values[1:-1]
    return int(states.index[int(np.argmax(drops))])


def sign_flip_layer(cos: pd.Series) -> int | None:
    """The layer k at which a per-layer cosine changes sign: the step function (one sign before k,
    the other from k on) that agrees with the most layers' signs, the earliest k among equals; a
    layer at exactly 0 agrees with neither. None when no step beats a constant sign (the cosine
    does not change sign) or with fewer than 2 layers."""
    series = cos.sort_index()
    signs = np.sign(series.to_numpy(dtype=np.float64))
    if signs.size < 2 or not np.all(np.isfinite(signs)):
        return None
    constant = max(int((signs > 0).sum()), int((signs < 0).sum()))
    best, best_k = constant, None
    for k in range(1, signs.size):
        for first in (1.0, -1.0):
            agree = int((signs[:k] == first).sum() + (signs[k:] == -first).sum())
            if agree > best:
                best, best_k = agree, k
    return None if best_k is None else int(series.index[best_k])


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


def toy_fit_df(fit: dict) -> int | None:
    """Degrees of freedom of one replicate's exponent fit: its student depths minus the form's
    parameters (power: c, a; power_offset: c, a, L0); None when fit.json lists no losses."""
    losses = fit.get("losses") or []
    if not losses:
        return None
    depths = len({r["student_depth"] for r in losses})
    return depths - (3 if fit.get("form") == "power_offset" else 2)


def toy_exponent_gaps(fit: dict, bounds=None) -> dict:
    """Per temperature, over the toy's replicates (teacher seed i of both kinds, each with its
    own students: the toy's seeds), paired by replicate: ([a_tied - a_indep per replicate,
    each with the t interval (toy_fit_df degrees of freedom: 2 for 4 depths) of its two fit
    standard errors], [a_tied / a_indep per replicate], reasons it cannot be judged (an
    exponent at its bound))."""
    result = {}
    df = toy_fit_df(fit)
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
            difference(
                Estimate(tied[r][0], se=tied[r][1]), Estimate(indep[r][0], se=indep[r][1]), df=df
            )
            for r in paired
        ]
        ratios = [
            Estimate(tied[r][0] / indep[r][0] if indep[r][0] > 0 else math.nan) for r in paired
        ]
        result[temperature] = (gaps, ratios, blockers)
    return result


# ---------------------------------------------------------------------------------------------
# Gromov et al.: the n a block row covers, task scores against chance, a curve's steepness


def block_ns(sweep: pd.DataFrame, max_n: int | None = None) -> list[int]:
    """The removed-layer counts 1 <= n <= max_n at which both the angular and the deepest block
    were measured unhealed: the n block_choice_gap averages over (the row names these, never the
    range it asked for: a sweep may hold only a few n)."""
    angular, deepest = _unhealed(sweep, "angular"), _unhealed(sweep, "deepest")
    return sorted(
        int(n)
        for n in set(angular.index) & set(deepest.index)
        if n >= 1 and (max_n is None or n <= max_n)
    )


def block_ns_of_means(means: dict, max_n: int | None = None) -> list[int]:
    """block_ns on window-set means: the n block_gap_of_means averages over."""
    ns = {int(k.split(":", 1)[1]) for k in means if k.startswith("angular:")}
    return sorted(
        n for n in ns if f"deepest:{n}" in means and n >= 1 and (max_n is None or n <= max_n)
    )


def n_text(ns) -> str:
    """The n a row used, in words: "n = 1..6" when they run without a gap, else "n in {2, 4,
    8}"; "no n" when empty."""
    ns = sorted(int(n) for n in ns)
    if not ns:
        return "no n"
    if len(ns) > 2 and ns == list(range(ns[0], ns[-1] + 1)):
        return f"n = {ns[0]}..{ns[-1]}"
    return f"n in {{{', '.join(str(n) for n in ns)}}}" if len(ns) > 1 else f"n = {ns[0]}"
