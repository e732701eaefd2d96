"""Gromov et al.'s task rows: QA holds while HellaSwag and math degrade early (each task's drop
against its margin above chance), QA holds to a model-dependent fraction of layers and then
collapses, and after healing the LM loss degrades smoothly while QA collapses."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from depthlab.claims.gromov import RANGE_TEXT, healing_gate
from depthlab.claims.measures import (
    block_range,
    bonferroni,
    healed_ns,
    n_text,
    sweep_layers,
    window_bootstrap,
)
from depthlab.claims.rows import (
    Claim,
    claim_row,
    decide,
    not_learned,
    scale_of,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    CONFIDENCE,
    INDICATIVE,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    REPRODUCED,
    TOO_WIDE,
    Estimate,
    difference,
    over_seeds,
    verdict_positive,
)
from depthlab.core import paper_values as pv
from depthlab.core.paper_values import GROMOV, PAPER_VALUES


def task_chance(task: str, chances: dict) -> float | None:
    """A task's chance accuracy from `chances` ({lm-eval name: chance}), matched by its name or
    an lm-eval subtask `<name>_...`; None when unknown (never guessed)."""
    name = str(task).lower()
    for key, chance in chances.items():
        if name == key or name.startswith(f"{key}_"):
            return float(chance)
    return None


def normalised_score(intact: Estimate, pruned: Estimate, chance: float) -> Estimate:
    """(pruned - chance) / (intact - chance): 1 at the intact model's score, 0 at chance, so
    tasks far above and near chance are on one scale; the standard error by the delta method
    from the two scores' standard errors, taken as independent (items scored at two removals
    correlate positively: the error is not understated)."""
    margin, above = intact.value - chance, pruned.value - chance
    value = above / margin if margin != 0 else math.nan
    se = math.nan
    if margin != 0 and math.isfinite(intact.se) and math.isfinite(pruned.se):
        se = math.sqrt(pruned.se**2 / margin**2 + above**2 * intact.se**2 / margin**4)
    return Estimate(value, se=se)


def steepness(ns, values) -> float:
    """How sharply a degrading curve changes, over points sorted by n: the largest step's share
    of the whole change (first to last point) divided by that step's share of the n span (1: a
    straight line; a drop at one gap of k equal gaps: k); NaN with fewer than three points or
    no change in the degrading direction (the whole change must be positive: pass a loss as it
    is and a score negated)."""
    order = np.argsort(np.asarray(ns, dtype=np.float64))
    x = np.asarray(ns, dtype=np.float64)[order]
    y = np.asarray(values, dtype=np.float64)[order]
    total, span = y[-1] - y[0], x[-1] - x[0]
    if len(x) < 3 or not total > 0 or not span > 0:
        return math.nan
    return float(np.max((np.diff(y) / total) / (np.diff(x) / span)))


def _task_group(task: str) -> str | None:
    """The paper's group of an lm-eval task: "qa" (holds, then collapses), "early" (degrades
    from the first layers removed) or None (neither)."""
    name = str(task).lower()
    for group, tasks in (("qa", pv.GROMOV_QA_HOLD_TASKS), ("early", pv.GROMOV_EARLY_DROP_TASKS)):
        if any(name == t or name.startswith(f"{t}_") for t in tasks):
            return group
    return None


def _z(confidence: float = CONFIDENCE) -> float:
    from scipy import stats

    return float(stats.norm.ppf(0.5 + confidence / 2))


def task_scores(sweep: pd.DataFrame, healed: bool = False) -> pd.DataFrame:
    """The angular block's lm-eval rows of the paper's two task groups (column `group`), healed
    or not, plus the intact model's (n = 0, unhealed) either way."""
    if "score" not in sweep or "task" not in sweep:
        return pd.DataFrame(columns=["task", "n", "score", "score_stderr", "group"])
    flags = sweep["healed"].astype(str)
    rows = sweep[
        (sweep["strategy"] == "angular")
        & sweep["score"].notna()
        & (((flags == str(healed)) & (sweep["n"] > 0)) | ((flags == "False") & (sweep["n"] == 0)))
    ].copy()
    if "score_stderr" not in rows:
        rows["score_stderr"] = math.nan
    rows["group"] = rows["task"].astype(str).map(_task_group)
    return rows[rows["group"].notna()].drop_duplicates(["task", "n"])


def score_problems(rows: pd.DataFrame) -> list[str]:
    """Why the scored tasks' normalised scores cannot be read: a task whose chance is unknown
    (GROMOV_TASK_CHANCE), or whose intact score does not lie above chance by its interval (a
    margin that may be 0 cannot scale a drop)."""
    problems, z = [], _z()
    for task, one in rows.groupby("task"):
        chance = task_chance(task, pv.GROMOV_TASK_CHANCE)
        if chance is None:
            problems.append(
                f"task {task}: chance unknown (not in GROMOV_TASK_CHANCE): its drop cannot be "
                "put against its margin above chance"
            )
            continue
        intact = one[one["n"] == 0]
        if intact.empty:
            problems.append(f"task {task}: not scored on the intact model (n = 0)")
            continue
        score, se = float(intact["score"].iloc[0]), float(intact["score_stderr"].iloc[0])
        if not math.isfinite(se):
            problems.append(f"task {task}: no standard error of the intact score")
        elif not score - z * se > chance:
            problems.append(
                f"task {task}: the intact model's {score:.3g} [{score - z * se:.3g}, "
                f"{score + z * se:.3g}] does not lie above chance {chance:g}"
            )
    return problems


def group_score(rows: pd.DataFrame, group: str, n: int) -> Estimate | None:
    """Mean over a group's tasks of the normalised score at n, (score - chance) / (intact -
    chance); the tasks' items differ, so their errors combine as independent. None unless every
    task of the group scored at n = 0 was also scored at n."""
    tasks = rows[(rows["group"] == group) & (rows["n"] == 0)]
    if tasks.empty:
        return None
    parts = []
    for _, intact in tasks.iterrows():
        pruned = rows[(rows["task"] == intact["task"]) & (rows["n"] == n)]
        if pruned.empty:
            return None
        if task_chance(intact["task"], pv.GROMOV_TASK_CHANCE) is None:
            parts.append(Estimate(math.nan))  # score_problems names the task
            continue
        parts.append(
            normalised_score(
                Estimate(float(intact["score"]), se=float(intact["score_stderr"])),
                Estimate(float(pruned["score"].iloc[0]), se=float(pruned["score_stderr"].iloc[0])),
                task_chance(intact["task"], pv.GROMOV_TASK_CHANCE),
            )
        )
    value = float(np.mean([e.value for e in parts]))
    return Estimate(value, se=float(np.sqrt(sum(e.se**2 for e in parts)) / len(parts)))


def _scored_ns(rows: pd.DataFrame, groups, max_n: int | None = None) -> list[int]:
    return [
        int(n)
        for n in sorted(rows["n"].unique())
        if n >= 1
        and (max_n is None or n <= max_n)
        and all(group_score(rows, g, n) is not None for g in groups)
    ]


def qa_math_drop(sweep: pd.DataFrame, max_n: int | None) -> tuple[Estimate | None, list[int]]:
    """(estimate, the n it used): mean over the angular blocks 1 <= n <= max_n scored for both
    groups of [the early-degrading tasks' normalised drop] - [the QA tasks'], a drop being
    (intact - pruned) / (intact - chance), unhealed, with a normal interval from the scores'
    standard errors; (None, []) unless both groups were scored at n = 0 and at some n in range."""
    rows = task_scores(sweep)
    ns = _scored_ns(rows, ("qa", "early"), max_n)
    if not ns:
        return None, []
    # drop(early) - drop(qa) = score(qa) - score(early), both normalised
    diffs = [difference(group_score(rows, "qa", n), group_score(rows, "early", n)) for n in ns]
    value = float(np.mean([d.value for d in diffs]))
    se = float(np.sqrt(np.mean([d.se**2 for d in diffs])))  # the n share items: no averaging down
    return difference(Estimate(value, se=se), Estimate(0.0, se=0.0)), ns


def _scored_text(sweeps) -> str:
    tasks = sorted({str(t) for s in sweeps if "task" in s for t in s["task"].dropna().unique()})
    return ", ".join(t for t in tasks if t) or "none"


def _ns_words(ns, layers, none: str) -> str:
    """The n a row used, of how many layers; `none` when it used none."""
    return f"{n_text(ns)} of {layers} layers" if len(ns) else none


_GROUPS_TEXT = (
    f"QA: {', '.join(pv.GROMOV_QA_HOLD_TASKS)}; early-degrading: "
    f"{', '.join(pv.GROMOV_EARLY_DROP_TASKS)}"
)


def qa_math_rows(data: RunData) -> list[dict]:
    """gromov_qa_vs_math per pruned group whose sweep lm-eval scored tasks: HellaSwag and math
    lose more of their margin above chance than QA over the paper's range of n (QA holds, the
    others decline from the start). Published LMs over the items (their standard errors), models
    trained here over seeds."""
    rows = []
    threshold = pv.GROMOV_QA_MATH_NEGLIGIBLE
    for group, members in data.pruning_groups.items():
        sweeps = [data.sweeps.get(m) for m in members]
        if any(s is None or "score" not in s or not s["score"].notna().any() for s in sweeps):
            continue
        layers = sweep_layers(sweeps[0])
        max_n = block_range(layers, pv.GROMOV_MAX_FRACTION)
        trained = any(m in data.trained for m in members)
        measured = [qa_math_drop(s, max_n) for s in sweeps]
        estimates = [e for e, _ in measured]
        ns = sorted(set.intersection(*(set(n) for _, n in measured)))
        claim = (
            f"{group}: QA holds while HellaSwag and math degrade from the start: mean over angular "
            f"blocks {_ns_words(ns, layers, f'none scored at n <= {max_n}')} (unhealed) of "
            f"[early-degrading tasks' drop - "
            f"QA tasks' drop], each drop (intact - pruned) / (intact - chance), > {threshold:g} "
            f"({_GROUPS_TEXT})"
        )
        problems = [p for s in sweeps for p in score_problems(task_scores(s))]
        if any(e is None for e in estimates):
            e = Estimate(math.nan, n=len(members))
            decision = (
                NOT_TESTABLE,
                f"needs a QA and an early-degrading task scored by lm-eval at n = 0 and at some "
                f"n <= {max_n} (scored: {_scored_text(sweeps)}; pruning.lm_eval.harness_tasks, "
                "n_grid)",
            )
        else:
            blockers = not_learned(data, members) + list(dict.fromkeys(problems))
            e = over_seeds(estimates, sample_se=[e.se for e in estimates]) if trained else (
                estimates[0])  # fmt: skip
            decision = decide(e, verdict_positive(e, blockers, threshold), trained, blockers)
        rows.append(
            claim_row(
                f"gromov_qa_vs_math:{group}",
                GROMOV,
                claim,
                "gromov_qa_vs_math",
                e,
                scale_of(data, members),
                decision,
            )
        )
    return rows


def qa_profile(sweeps, trained: bool) -> dict:
    """{n: normalised QA score over the models} at every n >= 1 each sweep scored QA at (the
    unhealed angular blocks), each interval Bonferroni-adjusted over those n (the rule reads
    them together): a published LM's from the items' standard errors, seeds' over seeds
    widened by the items'."""
    per_model = [task_scores(s) for s in sweeps]
    ns = sorted(set.intersection(*(set(_scored_ns(r, ("qa",))) for r in per_model)))
    confidence = bonferroni(CONFIDENCE, len(ns))
    profile = {}
    for n in ns:
        scores = [group_score(r, "qa", n) for r in per_model]
        if trained and len(scores) > 1:
            profile[n] = over_seeds(scores, confidence, sample_se=[e.se for e in scores])
            continue
        e, half = scores[0], _z(confidence) * scores[0].se
        profile[n] = Estimate(
            e.value,
            e.value - half,
            e.value + half,
            f"{confidence:.4g} normal interval from the items' standard errors (95% jointly "
            f"over {len(ns)} n)",
            1,
            e.se,
        )
    return profile


def collapse_verdict(profile: dict, layers: int) -> tuple[float, tuple[str, str]]:
    """(the largest fraction of layers up to which QA holds, (verdict, reason)) of a normalised
    QA profile {n: Estimate}: reproduced when it holds (interval above GROMOV_QA_HOLD_LEVEL) at
    every scored n up to at least GROMOV_QA_HOLD_MIN_FRACTION of the layers and has collapsed
    (interval below GROMOV_QA_CHANCE_LEVEL) at a larger scored n; not reproduced when it lies
    below the hold level at a scored n within that fraction, or above the chance level at a
    scored n past GROMOV_QA_COLLAPSE_BY of the layers; otherwise not testable."""
    hold, low = pv.GROMOV_QA_HOLD_LEVEL, pv.GROMOV_QA_CHANCE_LEVEL
    early, late = pv.GROMOV_QA_HOLD_MIN_FRACTION * layers, pv.GROMOV_QA_COLLAPSE_BY * layers
    ns = sorted(profile)
    shown = "; ".join(
        f"n = {n}: {e.value:.3g} [{e.low:.3g}, {e.high:.3g}]" for n, e in profile.items()
    )
    held = 0
    for n in ns:
        if not profile[n].low > hold:
            break
        held = n
    fraction = held / layers
    failed = [n for n in ns if n <= early and profile[n].high < hold]
    if failed:
        return fraction, (
            NOT_REPRODUCED,
            f"QA lies below {hold:g} of its margin already at n = {failed[0]} (<= "
            f"{pv.GROMOV_QA_HOLD_MIN_FRACTION:g} L = {early:g}): it does not hold ({shown})",
        )
    standing = [n for n in ns if n >= late and profile[n].low > low]
    if standing:
        return fraction, (
            NOT_REPRODUCED,
            f"QA still lies above {low:g} of its margin at n = {standing[0]} (>= "
            f"{pv.GROMOV_QA_COLLAPSE_BY:g} L = {late:g}): it has not collapsed ({shown})",
        )
    collapsed = [n for n in ns if n > held and profile[n].high < low]
    if held >= early and collapsed:
        return fraction, (
            REPRODUCED,
            f"QA holds above {hold:g} up to n = {held} ({fraction:.2g} L) and lies below "
            f"{low:g} from n = {collapsed[0]} ({shown})",
        )
    missing = []
    if held < early:
        missing.append(
            f"no scored n shows QA holding up to {pv.GROMOV_QA_HOLD_MIN_FRACTION:g} L = {early:g}"
        )
    if not collapsed:
        missing.append(f"no scored n past the hold shows QA below {low:g}")
    return fraction, (NOT_TESTABLE, f"{'; '.join(missing)}: {TOO_WIDE} ({shown})")


def qa_collapse_rows(data: RunData) -> list[dict]:
    """gromov_qa_collapse per pruned group: the normalised QA score holds up to a
    model-dependent fraction of the layers and then collapses towards chance. Every group gets
    a row: one whose sweep scored no QA task says which tasks were scored."""
    rows = []
    for group, members in data.pruning_groups.items():
        sweeps = [data.sweeps.get(m) for m in members]
        if any(s is None for s in sweeps):
            continue
        layers = sweep_layers(sweeps[0])
        trained = any(m in data.trained for m in members)
        problems = list(dict.fromkeys(p for s in sweeps for p in score_problems(task_scores(s))))
        profile = qa_profile(sweeps, trained) if layers else {}
        claim = (
            f"{group}: QA ({', '.join(pv.GROMOV_QA_HOLD_TASKS)}) holds, then collapses: the "
            f"normalised QA score (score - chance) / (intact - chance) of the angular blocks "
            f"(unhealed, {_ns_words(profile, layers, 'no QA task scored')}) lies above "
            f"{pv.GROMOV_QA_HOLD_LEVEL:g} at every n up to at least "
            f"{pv.GROMOV_QA_HOLD_MIN_FRACTION:g} L and below {pv.GROMOV_QA_CHANCE_LEVEL:g} at a "
            f"larger n (not above it past {pv.GROMOV_QA_COLLAPSE_BY:g} L)"
        )
        if not profile:
            e = Estimate(math.nan, n=len(members))
            decision = (
                NOT_TESTABLE,
                f"needs a QA task ({', '.join(pv.GROMOV_QA_HOLD_TASKS)}) scored by lm-eval at "
                f"n = 0 and at removed n (scored: {_scored_text(sweeps)}; "
                "pruning.lm_eval.harness_tasks, n_grid)",
            )
        else:
            blockers = not_learned(data, members) + problems
            fraction, rule = collapse_verdict(profile, layers)
            e = Estimate(
                fraction,
                method="the largest scored fraction of layers up to which QA holds (its "
                "intervals decide the verdict)",
                n=len(members),
            )
            decision = decide(e, (NOT_TESTABLE, "; ".join(blockers)) if blockers else rule,
                              trained, blockers)  # fmt: skip
        rows.append(
            claim_row(
                f"gromov_qa_collapse:{group}",
                GROMOV,
                claim,
                "gromov_robust_fraction",
                e,
                scale_of(data, members),
                decision,
            )
        )
    return rows


def _intact_loss(sweep: pd.DataFrame) -> float:
    rows = sweep[(sweep["healed"].astype(str) == "False") & (sweep["n"] == 0)]
    return float(rows["val_loss"].iloc[0]) if not rows.empty else math.nan


def healed_loss_steepness(sweep: pd.DataFrame, ns) -> float:
    """steepness of the healed angular blocks' validation loss over n (the intact model
    first)."""
    flags = sweep["healed"].astype(str)
    healed = sweep[(sweep["strategy"] == "angular") & (flags == "True")]
    losses = healed.groupby("n")["val_loss"].first()  # the first healing method's
    return steepness([0, *ns], [_intact_loss(sweep), *(float(losses[n]) for n in ns)])


def _windows_steepness(windows: pd.DataFrame, ns, resamples: int, seed: int) -> Estimate:
    """healed_loss_steepness from window means ("full", "healed:angular:<n>"), bootstrapped over
    the validation windows (the sets stay paired window by window)."""

    def statistic(means):
        keys = ["full", *(f"healed:angular:{n}" for n in ns)]
        if any(k not in means for k in keys):  # another method healed some n: no paired curve
            return math.nan
        return steepness([0, *ns], [means[k] for k in keys])

    return window_bootstrap(windows, statistic, resamples, seed)


def qa_steepness(rows: pd.DataFrame, ns, resamples: int, seed: int) -> Estimate:
    """steepness of the QA tasks' normalised drop over n (the intact model first) with a
    percentile interval from redrawing every score from a normal of its standard error (the
    items' sampling variance); no interval when more than the confidence's tail of the draws
    has no drop at all."""
    ns = list(ns)
    qa = rows[rows["group"] == "qa"]
    tasks = sorted(qa[qa["n"] == 0]["task"].unique())
    table = qa.set_index(["task", "n"])
    scores = np.array([[table.loc[(t, n), "score"] for n in [0, *ns]] for t in tasks])
    errors = np.array([[table.loc[(t, n), "score_stderr"] for n in [0, *ns]] for t in tasks])
    chance = np.array([task_chance(t, pv.GROMOV_TASK_CHANCE) for t in tasks], dtype=float)
    x = np.asarray([0, *ns], dtype=np.float64)

    def curves(s):  # s: (draws, tasks, points) -> steepness per draw
        drop = 1 - ((s - chance[None, :, None]) / (s[:, :, :1] - chance[None, :, None])).mean(1)
        total = drop[:, -1] - drop[:, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            shares = (np.diff(drop, axis=1) / total[:, None]) / (np.diff(x) / (x[-1] - x[0]))
        return np.where(total > 0, shares.max(1), np.nan)

    point = float(curves(scores[None])[0])
    rng = np.random.default_rng(seed)
    draws = curves(scores[None] + rng.standard_normal((resamples, *scores.shape)) * errors[None])
    finite = draws[np.isfinite(draws)]
    if finite.size < (1 - (1 - CONFIDENCE) / 2) * resamples:
        return Estimate(point, method="QA drops in too few redraws: no interval")
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(finite, [alpha, 1 - alpha])
    return Estimate(
        point,
        float(low),
        float(high),
        f"{CONFIDENCE:.0%} interval over {resamples} redraws of the scores from their standard "
        "errors",
        1,
        float(finite.std(ddof=1)),
    )


def healed_smooth_verdict(loss: Estimate, qa: Estimate | None) -> tuple[str, str]:
    """Reproduced when the healed loss's steepness lies wholly at or below
    GROMOV_SMOOTH_MAX_STEEPNESS and QA's wholly above it; not reproduced when the loss's lies
    wholly above it or QA's wholly at or below it; otherwise not testable."""
    limit = pv.GROMOV_SMOOTH_MAX_STEEPNESS

    def side(e):
        if e is None or not e.has_interval:
            return 0
        return 1 if e.low > limit else (-1 if e.high <= limit else 0)

    def shown(what, e):
        if e is None:
            return f"{what}: not scored on the healed models"
        interval = f" [{e.low:.3g}, {e.high:.3g}]" if e.has_interval else f" ({e.method})"
        return f"{what} {e.value:.3g}{interval}"

    words = f"{shown('loss steepness', loss)}; {shown('QA steepness', qa)}; limit {limit:g}"
    if side(loss) > 0:
        return NOT_REPRODUCED, f"the healed loss jumps: {words}"
    if side(qa) < 0:
        return NOT_REPRODUCED, f"QA degrades as smoothly as the loss: {words}"
    if side(loss) < 0 and side(qa) > 0:
        return REPRODUCED, f"the healed loss is smooth and QA jumps: {words}"
    if qa is None:
        return NOT_TESTABLE, (
            f"QA ({', '.join(pv.GROMOV_QA_HOLD_TASKS)}) not scored on the healed models at "
            f"every healed n (pruning.lm_eval on healed variants): {words}"
        )
    return NOT_TESTABLE, f"{TOO_WIDE}: {words}"


def healed_smooth_rows(data: RunData) -> list[dict]:
    """gromov_healed_loss_smooth per pruned group: after healing, the validation loss of the
    angular blocks grows smoothly with n while the normalised QA score jumps. Every group gets
    a row; one healed at fewer than GROMOV_SMOOTH_MIN_HEALED n says so."""
    rows = []
    need = pv.GROMOV_SMOOTH_MIN_HEALED
    for group, members in data.pruning_groups.items():
        sweeps = [data.sweeps.get(m) for m in members]
        if any(s is None for s in sweeps):
            continue
        layers = sweep_layers(sweeps[0])
        trained = any(m in data.trained for m in members)
        ns = sorted(set.intersection(*(set(healed_ns(s)) for s in sweeps)))
        claim = (
            f"{group}: after healing the loss degrades smoothly while QA collapses: over the "
            f"healed angular blocks ({_ns_words(ns, layers, 'none healed')}, the intact model "
            f"first) "
            f"the steepness (largest step's share of the change / its share of the n span) of "
            f"the validation loss <= {pv.GROMOV_SMOOTH_MAX_STEEPNESS:g} and of the normalised "
            f"QA drop > {pv.GROMOV_SMOOTH_MAX_STEEPNESS:g}"
        )
        if len(ns) < need:
            rows.append(
                claim_row(
                    f"gromov_healed_loss_smooth:{group}",
                    GROMOV,
                    claim,
                    "gromov_healed_loss_smooth",
                    Estimate(math.nan, n=len(members)),
                    scale_of(data, members),
                    (
                        NOT_TESTABLE,
                        f"healed at {n_text(ns) if ns else 'no n'}: a smoothness claim needs "
                        f">= {need} healed n (pruning.healing.n_grid, strategies)",
                    ),
                )
            )
            continue
        windows = not trained and all(m in data.window_losses for m in members)
        if windows:
            boot = data.bootstrap
            loss = over_seeds(
                [
                    _windows_steepness(data.window_losses[m], ns, boot["resamples"], boot["seed"])
                    for m in members
                ]
            )
        else:
            loss = over_seeds(
                [Estimate(healed_loss_steepness(s, ns), method="one seed") for s in sweeps]
            )
        scores = [task_scores(s, healed=True) for s in sweeps]
        problems = list(dict.fromkeys(p for r in scores for p in score_problems(r)))
        qa = None
        if all(set(ns) <= set(_scored_ns(r, ("qa",))) for r in scores):
            boot = data.bootstrap
            parts = [qa_steepness(r, ns, boot["resamples"], boot["seed"]) for r in scores]
            qa = over_seeds(parts, sample_se=[e.se for e in parts]) if trained else parts[0]
        blockers = not_learned(data, members) + (problems if qa is not None else [])
        rule = healed_smooth_verdict(loss, qa)
        if blockers:
            rule = (NOT_TESTABLE, "; ".join(blockers))
        gate, runs, words = healing_gate(data, members, trained)
        loss = replace(loss, n=runs)
        verdict = decide(loss, rule, gate, blockers)
        if words and verdict[0] == INDICATIVE:
            verdict = (INDICATIVE, f"{words}: {verdict[1]}")
        rows.append(
            claim_row(
                f"gromov_healed_loss_smooth:{group}",
                GROMOV,
                claim,
                "gromov_healed_loss_smooth",
                loss,
                scale_of(data, members),
                verdict,
            )
        )
    return rows


CLAIMS = (
    Claim(
        "gromov_qa_vs_math:<group>",
        PAPER_VALUES["gromov_qa_vs_math"],
        f"mean over the scored n of {RANGE_TEXT} of [drop of HellaSwag / GSM8K - drop of MMLU / "
        "BoolQ], each drop (intact - pruned) / (intact - chance) (angular, unhealed)",
        "items (published), seeds",
        f"> {pv.GROMOV_QA_MATH_NEGLIGIBLE:g}; a task of unknown chance, or whose intact "
        "interval is not above chance, makes it not testable",
        "default: no QA or early-degrading task scored; one_gpu: BoolQ, GSM8K (Qwen2.5-1.5B); "
        "paper: all four",
        qa_math_rows,
    ),
    Claim(
        "gromov_qa_collapse:<group>",
        PAPER_VALUES["gromov_robust_fraction"],
        "the normalised QA score (score - chance) / (intact - chance) of MMLU / BoolQ per scored "
        "n (angular, unhealed); the row's value: the largest fraction up to which it holds",
        "items (published; Bonferroni over the n), seeds",
        f"above {pv.GROMOV_QA_HOLD_LEVEL:g} at every n up to >= "
        f"{pv.GROMOV_QA_HOLD_MIN_FRACTION:g} L and below {pv.GROMOV_QA_CHANCE_LEVEL:g} at a "
        f"larger n; fails below {pv.GROMOV_QA_HOLD_LEVEL:g} within "
        f"{pv.GROMOV_QA_HOLD_MIN_FRACTION:g} L or above {pv.GROMOV_QA_CHANCE_LEVEL:g} past "
        f"{pv.GROMOV_QA_COLLAPSE_BY:g} L",
        "default: no QA task scored (not testable); one_gpu: BoolQ at n = 2, 4, 7, 14 of 28 "
        "(decidable, except a QA that still holds at n = 14: no n past 0.75 L is scored); "
        "paper: MMLU, BoolQ at every n",
        qa_collapse_rows,
    ),
    Claim(
        "gromov_healed_loss_smooth:<group>",
        PAPER_VALUES["gromov_healed_loss_smooth"],
        "steepness (largest step's share of the change / its share of the n span) of the "
        "healed angular blocks' validation loss and of their normalised QA drop over n",
        "validation windows (published), seeds; QA: redraws of the scores from their errors",
        f"loss <= {pv.GROMOV_SMOOTH_MAX_STEEPNESS:g} and QA > "
        f"{pv.GROMOV_SMOOTH_MAX_STEEPNESS:g}; needs >= {pv.GROMOV_SMOOTH_MIN_HEALED} healed n",
        "default and one_gpu: healed at one n (not testable); paper: healed and scored at "
        "every n (decidable, healing runs permitting)",
        healed_smooth_rows,
    ),
)
