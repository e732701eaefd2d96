"""Gromov et al. rows: the angular block choice against dropping the deepest layers, before and
after healing."""

from __future__ import annotations

import math

from depthlab.claims.measures import (
    block_choice_gap,
    block_gap_of_means,
    healing_gap_change,
    healing_gap_of_means,
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
