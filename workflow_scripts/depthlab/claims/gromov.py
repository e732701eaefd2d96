"""Gromov et al. rows: the angular block choice against dropping the deepest layers, before and
after healing; Kim et al. (Shortened LLaMA): continued pretraining heals better than LoRA."""

from __future__ import annotations

import math

from depthlab.claims.measures import (
    block_choice_gap,
    block_gap_of_means,
    healed_prefix,
    healing_gap_change,
    healing_gap_of_means,
    healing_methods,
    method_gap_of_means,
    window_means,
)
from depthlab.claims.rows import (
    claim_row,
    decide,
    not_learned,
    over_windows,
    scale_of,
)
from depthlab.claims.run_data import RunData
from depthlab.claims.verdicts import (
    NOT_TESTABLE,
    Estimate,
    over_seeds,
    verdict_positive,
)
from depthlab.core import paper_values as pv
from depthlab.core import paper_values_pruning as pvh
from depthlab.core.paper_values import GROMOV


def gromov_claims(data: RunData) -> list[dict]:
    rows = []
    negligible = pv.GROMOV_GAP_NEGLIGIBLE
    for group, members in data.pruning_groups.items():
        if not all(m in data.sweeps for m in members):
            continue
        blockers = not_learned(data, members)
        trained = any(m in data.trained for m in members)
        scale = scale_of(data, members)
        if not trained and all(m in data.window_losses for m in members):
            # published checkpoints: the documents' sampling variance, over validation windows
            before = over_seeds([over_windows(data, m, block_gap_of_means) for m in members])
        else:
            before = over_seeds([block_choice_gap(data.sweeps[m]) for m in members])
        rows.append(
            claim_row(
                f"gromov_block_choice:{group}",
                GROMOV,
                f"{group}: the angular block beats dropping the deepest layers before "
                f"healing: mean over n of val_loss(deepest) - val_loss(angular) > "
                f"{negligible:g}",
                "gromov_block_vs_baseline",
                before,
                scale,
                decide(before, verdict_positive(before, blockers, negligible), trained, blockers),
            )
        )
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
            f"|gap after| > {negligible:g}"
        )
        if any(c is None for c in changes):
            rows.append(
                claim_row(
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
                claim_row(
                    f"gromov_healing_gap:{group}",
                    GROMOV,
                    claim,
                    "gromov_block_vs_baseline",
                    after,
                    scale,
                    decide(after, verdict_positive(after, blockers, negligible), trained, blockers),
                )
            )
    return rows


def _cpt_prefixes(windows) -> tuple[str, str, str] | None:
    """(adapter method, its key prefix, full's key prefix) of a window_losses table healed with
    `full` and an adapter method (lora before qlora); None otherwise."""
    methods = healing_methods(windows)
    adapter = next((m for m in ("lora", "qlora") if m in methods), None)
    if "full" not in methods or adapter is None:
        return None
    return adapter, healed_prefix(methods, adapter), healed_prefix(methods, "full")


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
        blockers = not_learned(data, members)

        def statistic(means, worse=worse, better=better):
            return method_gap_of_means(means, worse, better)[0]

        if trained:
            gap = over_seeds(
                [Estimate(statistic(window_means(w)), method="one seed") for w in windows]
            )
        else:
            gap = over_seeds([over_windows(data, m, statistic) for m in members])
        threshold = pvh.KIM_CPT_GAP_NEGLIGIBLE
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
                decide(gap, verdict_positive(gap, blockers, threshold), trained, blockers),
                paper_value=pvh.PAPER_VALUES["kim_cpt_vs_lora"].describe(),
            )
        )
    return rows
