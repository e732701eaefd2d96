"""Gromov et al. rows: the angular block choice against dropping the deepest layers, before and
after healing, and where the angular block lies; Kim et al. (Shortened LLaMA): continued
pretraining heals better than LoRA. The task rows (QA against math, QA's collapse, the healed
loss's smoothness) are in gromov_tasks."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from depthlab.claims.measures import (
    block_choice_gap,
    block_gap_of_means,
    block_ns,
    block_ns_of_means,
    block_range,
    healed_ns,
    healed_prefix,
    healing_gap_change,
    healing_gap_of_means,
    healing_methods,
    method_gap_of_means,
    n_text,
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
    over_seeds,
    verdict_positive,
)
from depthlab.core import paper_values as pv
from depthlab.core import paper_values_pruning as pvh
from depthlab.core.paper_values import GROMOV, PAPER_VALUES


def healing_gate(data: RunData, members, trained: bool, method: str = "lora"):
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


def _block_ns(data: RunData, members, max_n: int | None, windows: bool) -> list[int]:
    """The n the block row averages over, read from the data (window-set means of a published
    LM, else the sweeps; seeds measured at different n: the n every seed has)."""
    if windows:
        sets = [set(block_ns_of_means(window_means(data.window_losses[m]), max_n)) for m in members]
    else:
        sets = [set(block_ns(data.sweeps[m], max_n)) for m in members]
    return sorted(set.intersection(*sets)) if sets else []


def gromov_claims(data: RunData) -> list[dict]:
    """gromov_block_choice and gromov_healing_gap per pruned group. The block row's value is the
    trained models' gap (the paper's statement is about them); their untrained twins' gap at the
    same n is shown beside it and blocks the row only where the initialisation alone gives the
    verdict (against_initialisation)."""
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
        windows = not trained and all(m in data.window_losses for m in members)
        ns = _block_ns(data, members, max_n, windows)
        n_words = (
            f"{n_text(ns)} of {layers} layers (measured n up to about half: the paper's range)"
        )
        blockers = blockers + no_room(
            [removal_damage(data.sweeps[m], "deepest", max_n) for m in members],
            negligible,
            f"mean over {n_text(ns)} of the deepest block's",
        )
        compared = None
        if windows:
            # published checkpoints: the documents' sampling variance, over validation windows
            value = over_seeds(
                [
                    over_windows(data, m, lambda means, top=max_n: block_gap_of_means(means, top))
                    for m in members
                ]
            )
        else:
            compared = against_initialisation(
                [block_choice_gap(data.sweeps[m], max_n) for m in members],
                [_twin_block_gap(data, m, ns) for m in members],
                negligible,
            )
            value = compared.trained  # the twins fill the row's untrained / training columns
            blockers = blockers + compared.blockers
        rows.append(
            claim_row(
                f"gromov_block_choice:{group}",
                GROMOV,
                f"{group}: the angular block beats dropping the deepest layers before "
                f"healing: mean over {n_words} of val_loss(deepest) - val_loss(angular) > "
                f"{negligible_text}",
                "gromov_block_vs_baseline",
                value,
                scale,
                decide(value, verdict_positive(value, blockers, negligible), trained, blockers),
                against=compared,
            )
        )
        rows.append(_healing_row(data, group, members, trained, blockers, scale, negligible,
                                 negligible_text))  # fmt: skip
    return rows


# ---------------------------------------------------------------------------------------------
# Task scores: QA against the early-degrading tasks, QA's collapse, the healed loss


def deep_block_position(measures: pd.DataFrame, max_fraction: float) -> float:
    """Mean over n = 1 .. max_fraction * L of l*(n) / (L - n), where l*(n) starts the block of n
    layers with the smallest last-token d(x^l, x^(l+n)) (the pruning stage's angular choice: the
    first minimum) of an analysis measures.csv frame: 0 when every block sits at the front, 1
    when it ends at the last layer; NaN without the distances."""
    from depthlab.stages.pruning.blocks import angular_block_choice

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
        last = replicates[0][0]
        last = last[last["measure"] == "angular_distance_last"]
        layers = int((last["layer"] + last["n"]).max())
        top = block_range(layers, pv.GROMOV_MAX_FRACTION)
        rows.append(
            claim_row(
                f"gromov_deep_block:{name}",
                GROMOV,
                f"{name}: the block whose removal changes the last token's representation least "
                f"lies deep: mean over {n_text(range(1, top + 1))} of {layers} layers of "
                f"l*(n) / (L - n) "
                f"> {threshold:g}, l*(n) the start of the n-layer block with the smallest "
                f"d(x^l, x^(l+n)) (0: at the front, 1: ending at the last layer)",
                "gromov_deep_block",
                e,
                data.pretrained_scale.get(name, name),
                decide(e, verdict_positive(e, [], threshold), False, []),
            )
        )
    return rows


def _twin_block_gap(data: RunData, name: str, ns):
    """The untrained twin's mean over the trained rows' n of loss(deepest) - loss(angular),
    over the n it was measured at; None without a twin or without one of those n."""
    stats = twin(data, name)
    if stats is None or not stats.losses:
        return None
    used = [n for n in ns if f"angular:{n}" in stats.losses and f"deepest:{n}" in stats.losses]
    if not used:
        return None
    return float(
        np.mean([stats.losses[f"deepest:{n}"] - stats.losses[f"angular:{n}"] for n in used])
    )


def _healing_row(data, group, members, trained, blockers, scale, negligible, negligible_text):
    if not trained and all(
        m in data.window_losses
        and math.isfinite(healing_gap_of_means(window_means(data.window_losses[m])))
        for m in members
    ):
        changes = [over_windows(data, m, healing_gap_of_means) for m in members]
    else:
        changes = [healing_gap_change(data.sweeps[m]) for m in members]
    ns = sorted(
        set.intersection(
            *(set(healed_ns(data.sweeps[m])) & set(healed_ns(data.sweeps[m], "deepest"))
              for m in members)
        )
    )  # fmt: skip
    claim = (
        f"{group}: healing shrinks the gap: mean over healed "
        f"{n_text(ns) if ns else 'n'} of |gap before| - |gap after| > {negligible_text}"
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
    gate, runs, words = healing_gate(data, members, trained)
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
        gate, runs, words = healing_gate(data, members, trained, "full")
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


RANGE_TEXT = f"n = 1 .. {pv.GROMOV_MAX_FRACTION:g} L"
_LEARNED = f"{pv.LEARNED_SHARE_NEGLIGIBLE:.0%} of what the model learned"

CLAIMS = (
    Claim(
        "gromov_block_choice:<group>",
        PAPER_VALUES["gromov_block_vs_baseline"],
        f"mean over the measured n of {RANGE_TEXT} of loss(deepest) - loss(angular), unhealed, of "
        "the trained models (their untrained twins' beside it)",
        "seeds; validation windows (published)",
        f"> {_LEARNED} (trained here), {pv.GROMOV_GAP_NEGLIGIBLE:g} nats (published); twins on "
        "the same side, unmoved by training, block it",
        "no: the toys' removals cost less than the threshold; SmolLM2: yes (n in {2, 4, 8})",
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
        "gromov_deep_block:<LM>",
        PAPER_VALUES["gromov_deep_block"],
        f"mean over {RANGE_TEXT} of l*(n) / (L - n), l*(n) the start of the angular choice of n "
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
        "no: the default's CPT reads a few thousand tokens, so the row compares learning rates",
        kim_claims,
    ),
)
