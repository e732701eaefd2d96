"""Gromov et al. rows: the angular block choice against dropping the deepest layers, before and
after healing; Kim et al. (Shortened LLaMA): continued pretraining heals better than LoRA."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from depthlab.claims.measures import (
    block_choice_gap,
    block_gap_of_means,
    block_range,
    healed_prefix,
    healing_gap_change,
    healing_gap_of_means,
    healing_methods,
    mean_task_score,
    method_gap_of_means,
    no_room,
    over_shards,
    removal_damage,
    sweep_layers,
    window_means,
)
from depthlab.claims.rows import (
    Claim,
    against_initialisation,
    claim_row,
    decide,
    learned_threshold,
    not_learned,
    over_windows,
    scale_of,
    twin,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    INDICATIVE,
    MIN_SEEDS,
    NOT_TESTABLE,
    Estimate,
    difference,
    over_seeds,
    verdict_positive,
)
from depthlab.core import paper_values as pv
from depthlab.core import paper_values_pruning as pvh
from depthlab.core.paper_values import GROMOV, PAPER_VALUES


def _healing_gate(data: RunData, members, trained: bool, method: str = "lora"):
    """(trained_here, healing runs, words): a healed model is trained here, so a healing claim
    is decided only over >= MIN_SEEDS healing runs, even on a published checkpoint."""
    runs = min(((data.healing.get(m) or {}).get(method) or {}).get("runs", 1) for m in members)
    if trained:
        return True, len(members), ""
    return (
        True,
        runs,
        (
            f"healing trains the model here: {runs} healing run{'s' if runs > 1 else ''} per "
            f"block (a verdict needs {MIN_SEEDS} healing seeds)"
        ),
    )


def gromov_claims(data: RunData) -> list[dict]:
    """gromov_block_choice and gromov_healing_gap per pruned group."""
    rows = []
    for group, members in data.pruning_groups.items():
        if not all(m in data.sweeps for m in members):
            continue
        blockers = not_learned(data, members)
        trained = any(m in data.trained for m in members)
        scale = scale_of(data, members)
        layers = sweep_layers(data.sweeps[members[0]])
        max_n = block_range(layers, pv.GROMOV_MAX_FRACTION)
        negligible, negligible_text = learned_threshold(data, members, pv.GROMOV_GAP_NEGLIGIBLE)
        n_text = f"n = 1..{max_n} of {layers} layers (about half: the paper's range)"
        blockers = blockers + no_room(
            [removal_damage(data.sweeps[m], "deepest", max_n) for m in members],
            negligible,
            f"mean over {n_text} of the deepest block's",
        )
        if not trained and all(m in data.window_losses for m in members):
            # published checkpoints: the documents' sampling variance, over validation windows
            before = over_seeds(
                [
                    over_windows(data, m, lambda means, top=max_n: block_gap_of_means(means, top))
                    for m in members
                ]
            )
            compared, extra = None, ""
        else:
            compared = against_initialisation(
                [block_choice_gap(data.sweeps[m], max_n) for m in members],
                [_twin_block_gap(data, m, max_n) for m in members],
                negligible,
            )
            before, extra = (
                compared.delta,
                (f"; shown: {compared.text}" if compared.initial is not None else ""),
            )
            blockers = blockers + compared.blockers
        rows.append(
            claim_row(
                f"gromov_block_choice:{group}",
                GROMOV,
                f"{group}: the angular block beats dropping the deepest layers before "
                f"healing: mean over {n_text} of val_loss(deepest) - val_loss(angular) > "
                f"{negligible_text}" + (", trained - untrained" if compared else "") + extra,
                "gromov_block_vs_baseline",
                before,
                scale,
                decide(before, verdict_positive(before, blockers, negligible), trained, blockers),
            )
        )
        rows.append(_healing_row(data, group, members, trained, blockers, scale, negligible,
                                 negligible_text))  # fmt: skip
    return rows


def _task_class(task: str) -> str | None:
    name = task.lower()
    if any(k in name for k in pv.GROMOV_MATH_TASKS):
        return "math"
    if any(k in name for k in pv.GROMOV_QA_TASKS):
        return "qa"
    return None


def qa_math_drop(sweep: pd.DataFrame, max_n: int | None) -> Estimate | None:
    """Mean over the angular blocks 1 <= n <= max_n lm-eval scored of [drop of the math tasks'
    mean score from the intact model's] - [drop of the QA tasks'], unhealed, with a normal
    interval from the scores' standard errors; None unless both classes were scored at n = 0
    and at some n in range."""
    rows = sweep[
        (sweep["strategy"] == "angular")
        & (sweep["healed"].astype(str) == "False")
        & sweep["score"].notna()
    ].copy()
    rows["class"] = rows["task"].astype(str).map(_task_class)
    rows = rows[rows["class"].notna()]
    ns = sorted(n for n in rows["n"].unique() if n >= 1 and (max_n is None or n <= max_n))
    if not ns or set(rows["class"]) != {"qa", "math"} or 0 not in set(rows["n"]):
        return None
    drops = []
    for n in ns:
        parts = {}
        for cls in ("qa", "math"):
            intact = mean_task_score(rows[(rows["class"] == cls) & (rows["n"] == 0)])
            pruned = rows[(rows["class"] == cls) & (rows["n"] == n)]
            if pruned.empty:
                return None
            parts[cls] = difference(intact, mean_task_score(pruned))
        drops.append(difference(parts["math"], parts["qa"]))
    value = float(np.mean([d.value for d in drops]))
    se = float(np.sqrt(np.mean([d.se**2 for d in drops])))  # the n share items: no averaging down
    return difference(Estimate(value, se=se), Estimate(0.0, se=0.0))


def qa_math_rows(data: RunData) -> list[dict]:
    """gromov_qa_vs_math per pruned group whose sweep lm-eval scored tasks: math loses more
    accuracy than QA over the paper's range of n (QA holds, math declines from the start).
    Published LMs over the items (their standard errors), models trained here over seeds."""
    rows = []
    threshold = pv.GROMOV_QA_MATH_NEGLIGIBLE
    for group, members in data.pruning_groups.items():
        sweeps = [data.sweeps.get(m) for m in members]
        if any(s is None or "score" not in s or not s["score"].notna().any() for s in sweeps):
            continue
        layers = sweep_layers(sweeps[0])
        max_n = block_range(layers, pv.GROMOV_MAX_FRACTION)
        trained = any(m in data.trained for m in members)
        estimates = [qa_math_drop(s, max_n) for s in sweeps]
        claim = (
            f"{group}: QA accuracy holds while math declines from the start: mean over angular "
            f"blocks n = 1..{max_n} of [math score drop - QA score drop] > {threshold:g} "
            f"(unhealed; QA: {', '.join(pv.GROMOV_QA_TASKS[:3])}...; math: "
            f"{', '.join(pv.GROMOV_MATH_TASKS[:2])}...)"
        )
        if any(e is None for e in estimates):
            tasks = sorted({str(t) for s in sweeps for t in s["task"].dropna().unique()})
            e = Estimate(math.nan, n=len(members))
            decision = (
                NOT_TESTABLE,
                f"needs a QA and a math task scored by lm-eval at n = 0 and at some n <= {max_n} "
                f"(scored: {', '.join(tasks)}; pruning.lm_eval.tasks, n_grid)",
            )
        else:
            blockers = not_learned(data, members)
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


def deep_block_position(measures: pd.DataFrame, max_fraction: float) -> float:
    """Mean over n = 1 .. max_fraction * L of l*(n) / (L - n), where l*(n) starts the block of n
    layers with the smallest last-token d(x^l, x^(l+n)) (the pruning stage's angular choice: the
    first minimum) of an analysis measures.csv frame: 0 when every block sits at the front, 1
    when it ends at the last layer; NaN without the distances."""
    from depthlab.stages.pruning.strategies import angular_block_choice

    rows = measures[measures["measure"] == "angular_distance_last"]
    if rows.empty:
        return math.nan
    layers = int((rows["layer"] + rows["n"]).max())
    distance = np.full((layers + 1, layers + 1), np.nan)
    starts, sizes = rows["layer"].to_numpy(dtype=int), rows["n"].to_numpy(dtype=int)
    distance[starts, starts + sizes] = rows["value"].to_numpy(dtype=float)
    positions = []
    for n in range(1, block_range(layers, max_fraction) + 1):
        if not (rows["n"] == n).any():
            return math.nan
        start, _ = angular_block_choice(distance, n)
        positions.append(start / (layers - n))
    return float(np.mean(positions))


def deep_block_rows(data: RunData) -> list[dict]:
    """gromov_deep_block per published LM whose analysis measured the last-token distances, over
    its document shards. Models trained here get no row: their untrained twins' block choice is
    not measured, and a random Pre-LN's deep layers may already be the closest."""
    rows = []
    threshold = pv.GROMOV_DEEP_BLOCK_ABOVE
    for name, replicates in data.pretrained.items():
        positions = [deep_block_position(f, pv.GROMOV_MAX_FRACTION) for f, _, _ in replicates]
        if not all(math.isfinite(p) for p in positions):
            continue
        e = over_shards(positions, "mean position each")
        rows.append(
            claim_row(
                f"gromov_deep_block:{name}",
                GROMOV,
                f"{name}: the block whose removal changes the last token's representation least "
                f"lies deep: mean over n = 1 .. {pv.GROMOV_MAX_FRACTION:g} L of l*(n) / (L - n) "
                f"> {threshold:g}, l*(n) the start of the n-layer block with the smallest "
                f"d(x^l, x^(l+n)) (0: at the front, 1: ending at the last layer)",
                "gromov_deep_block",
                e,
                data.pretrained_scale.get(name, name),
                decide(e, verdict_positive(e, [], threshold), False, []),
            )
        )
    return rows


def _twin_block_gap(data: RunData, name: str, max_n: int | None):
    stats = twin(data, name)
    if stats is None or not stats.losses:
        return None
    value = block_gap_of_means(stats.losses, max_n)
    return value if math.isfinite(value) else None


def _healing_row(data, group, members, trained, blockers, scale, negligible, negligible_text):
    if not trained and all(
        m in data.window_losses
        and math.isfinite(healing_gap_of_means(window_means(data.window_losses[m])))
        for m in members
    ):
        changes = [over_windows(data, m, healing_gap_of_means) for m in members]
    else:
        changes = [healing_gap_change(data.sweeps[m]) for m in members]
    claim = (
        f"{group}: healing shrinks the gap: mean over healed n of |gap before| - "
        f"|gap after| > {negligible_text}"
    )
    if any(c is None for c in changes):
        return claim_row(
            f"gromov_healing_gap:{group}",
            GROMOV,
            claim,
            "gromov_block_vs_baseline",
            Estimate(math.nan, n=len(members)),
            scale,
            (
                NOT_TESTABLE,
                "needs healed angular and deepest variants (pruning.healing.strategies)",
            ),
        )
    gate, runs, words = _healing_gate(data, members, trained)
    after = replace(over_seeds(changes), n=runs)
    verdict = decide(after, verdict_positive(after, blockers, negligible), gate, blockers)
    if words and verdict[0] == INDICATIVE:
        verdict = (INDICATIVE, f"{words}: {verdict[1]}")
    return claim_row(
        f"gromov_healing_gap:{group}",
        GROMOV,
        claim,
        "gromov_block_vs_baseline",
        after,
        scale,
        verdict,
    )


def _cpt_prefixes(windows) -> tuple[str, str, str] | None:
    """(adapter method, its key prefix, full's key prefix) of a window_losses table healed with
    `full` and an adapter method (lora before qlora); None otherwise."""
    methods = healing_methods(windows)
    adapter = next((m for m in ("lora", "qlora") if m in methods), None)
    if "full" not in methods or adapter is None:
        return None
    return adapter, healed_prefix(methods, adapter), healed_prefix(methods, "full")


def _cpt_blockers(data: RunData, members, adapter: str) -> list[str]:
    """Why a CPT-vs-adapter comparison is no test of Kim et al.'s: continued pretraining that
    read fewer than KIM_CPT_MIN_TOKENS tokens (the paper's reads a pretraining corpus) compares
    two learning rates on a few steps, not a large corpus against LoRA."""
    reasons = []
    for m in members:
        runs = data.healing.get(m) or {}
        full, lora = runs.get("full"), runs.get(adapter)
        if full is None:
            continue
        if full["tokens"] < pvh.KIM_CPT_MIN_TOKENS:
            lr = f" at lr {full['lr']:g} against {adapter} at lr {lora['lr']:g}" if lora else ""
            reasons.append(
                f"{m}: continued pretraining read {full['tokens']:,} tokens{lr}; the paper's "
                f"reads a large corpus (>= {pvh.KIM_CPT_MIN_TOKENS:.0e} tokens here): a few "
                f"steps compare learning rates, not large-corpus pretraining with LoRA"
            )
    return reasons


def kim_claims(data: RunData) -> list[dict]:
    """kim_cpt_vs_lora per pruned group healed with both an adapter method and `full`: at the
    largest n both healed, val_loss(adapter-healed) - val_loss(CPT-healed), mean over the
    strategies healed by both there; a published LM's over a paired bootstrap of its
    validation windows, models trained here over seeds (each seed's mean over the windows)."""
    rows = []
    for group, members in data.pruning_groups.items():
        windows = [data.window_losses.get(m) for m in members]
        prefixes = [None if w is None else _cpt_prefixes(w) for w in windows]
        if any(p is None for p in prefixes):
            continue  # the row's inputs do not exist
        adapter, worse, better = prefixes[0]
        if any(p != prefixes[0] for p in prefixes):
            continue  # seeds healed with different methods: no paired comparison
        _, n = method_gap_of_means(window_means(windows[0]), worse, better)
        if n is None:
            continue  # no (strategy, n) healed by both methods
        trained = any(m in data.trained for m in members)
        blockers = not_learned(data, members) + _cpt_blockers(data, members, adapter)

        def statistic(means, worse=worse, better=better):
            return method_gap_of_means(means, worse, better)[0]

        if trained:
            gap = over_seeds(
                [Estimate(statistic(window_means(w)), method="one seed") for w in windows]
            )
        else:
            gap = over_seeds([over_windows(data, m, statistic) for m in members])
        threshold = pvh.KIM_CPT_GAP_NEGLIGIBLE
        gate, runs, words = _healing_gate(data, members, trained, "full")
        gap = replace(gap, n=runs)
        verdict = decide(gap, verdict_positive(gap, blockers, threshold), gate, blockers)
        if words and verdict[0] == INDICATIVE:
            verdict = (INDICATIVE, f"{words}: {verdict[1]}")
        rows.append(
            claim_row(
                f"kim_cpt_vs_lora:{group}",
                pvh.KIM,
                f"{group}: continued pretraining heals better than {adapter} on the same "
                f"tokens at the largest healed n ({n}): val_loss({adapter}-healed) - "
                f"val_loss(CPT-healed) > {threshold:g}",
                "kim_cpt_vs_lora",
                gap,
                scale_of(data, members),
                verdict,
                paper_value=pvh.PAPER_VALUES["kim_cpt_vs_lora"].describe(),
            )
        )
    return rows


_RANGE = f"n = 1 .. {pv.GROMOV_MAX_FRACTION:g} L"
_LEARNED = f"{pv.LEARNED_SHARE_NEGLIGIBLE:.0%} of what the model learned"

CLAIMS = (
    Claim(
        "gromov_block_choice:<group>",
        PAPER_VALUES["gromov_block_vs_baseline"],
        f"mean over {_RANGE} of loss(deepest) - loss(angular), unhealed; trained - untrained",
        "seeds; validation windows (published)",
        f"> {_LEARNED} (trained here), {pv.GROMOV_GAP_NEGLIGIBLE:g} nats (published)",
        "no: the toys' removals cost less than the threshold; SmolLM2: yes",
        gromov_claims,
    ),
    Claim(
        "gromov_healing_gap:<group>",
        PAPER_VALUES["gromov_block_vs_baseline"],
        "mean over healed n of |gap before| - |gap after|",
        "healing runs",
        "> gromov_block_choice's threshold",
        "indicative: one healing run per block",
        gromov_claims,
    ),
    Claim(
        "gromov_qa_vs_math:<group>",
        PAPER_VALUES["gromov_qa_vs_math"],
        f"mean over {_RANGE} of math-score drop - QA-score drop (angular, unhealed)",
        "items (published), seeds",
        f"> {pv.GROMOV_QA_MATH_NEGLIGIBLE:g}",
        "no QA / math task in the default; one_gpu: BoolQ, GSM8K",
        qa_math_rows,
    ),
    Claim(
        "gromov_deep_block:<LM>",
        PAPER_VALUES["gromov_deep_block"],
        f"mean over {_RANGE} of l*(n) / (L - n), l*(n) the start of the angular choice of n "
        "layers (last token)",
        "document shards",
        f"> {pv.GROMOV_DEEP_BLOCK_ABOVE:g}",
        "published LMs: yes; toys: no row (their twins' block choice is not measured)",
        deep_block_rows,
    ),
    Claim(
        "kim_cpt_vs_lora:<group>",
        pvh.PAPER_VALUES["kim_cpt_vs_lora"],
        "loss(LoRA-healed) - loss(CPT-healed) at the largest healed n",
        "healing runs",
        f"> {pvh.KIM_CPT_GAP_NEGLIGIBLE:g}; CPT must read ≥ {pvh.KIM_CPT_MIN_TOKENS / 1e6:g}M "
        "tokens",
        "no: CPT reads 1.5k tokens, so the row compares learning rates",
        kim_claims,
    ),
)
