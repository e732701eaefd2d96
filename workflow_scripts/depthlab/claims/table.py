"""The whole claims table from a run's data, and its Markdown."""

from __future__ import annotations

import math

import pandas as pd

from depthlab.claims import cod, csordas, gromov, lens, liu, pretrained, pruning_methods
from depthlab.claims.rows import COLUMNS, Claim
from depthlab.claims.run_data import RunData

# Every claim the table can test, in the table's order: each paper's module declares its claims
# beside the functions that write their rows, so a claim added to a module's CLAIMS is computed,
# checked and listed in the docs (docs/hooks/claims_table.py) without touching this list.
CLAIMS: tuple[Claim, ...] = (
    *cod.CLAIMS,
    *pretrained.CLAIMS,
    *gromov.CLAIMS,
    *pruning_methods.CLAIMS,
    *csordas.CLAIMS,
    *liu.CLAIMS,
    *cod.FINETUNE_CLAIMS,
    *lens.CLAIMS,
)


def undeclared(claim_ids, claims=CLAIMS) -> list[str]:
    """The claim ids among `claim_ids` whose part before ':' no declaration in `claims` has."""
    declared = {claim.base for claim in claims}
    return [c for c in claim_ids if str(c).split(":", 1)[0] not in declared]


def build_claims(data: RunData, claims=CLAIMS) -> pd.DataFrame:
    """Every claim the run's data can test, one row each (COLUMNS): the rows of every function
    the declarations name, each run once, in the declarations' order. A row no declaration
    covers is an error (the docs' list of claims would miss it)."""
    rows = [row for write in dict.fromkeys(c.rows for c in claims) for row in write(data)]
    missing = undeclared([row["claim_id"] for row in rows], claims)
    if missing:
        raise ValueError(
            f"claim rows without a declaration (a Claim in their module's CLAIMS): {missing}"
        )
    kinds = {claim.base: claim.kind for claim in claims}
    for row in rows:
        row["kind"] = kinds[str(row["claim_id"]).split(":", 1)[0]]
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

    def twins(row):
        if not math.isfinite(row.training_effect):
            return "-"
        text = f"{row.training_effect:.4g}"
        if math.isfinite(row.training_effect_low) and math.isfinite(row.training_effect_high):
            text += f" [{row.training_effect_low:.4g}, {row.training_effect_high:.4g}]"
        moved = row.training_moved if isinstance(row.training_moved, str) else ""
        return f"untrained {row.untrained:.4g}; trained - untrained {text}" + (
            f": training moved it {moved}" if moved else ""
        )

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
            "about": claims["kind"],
            "untrained twins": [twins(r) for r in claims.itertuples()],
            "one layer left out": claims["layer_check"].fillna("").replace("", "-"),
        }
    )
    # a bare | would end the cell (claims such as |gap before| - |gap after|)
    table = table.map(lambda cell: cell.replace("|", "\\|") if isinstance(cell, str) else cell)
    return f"# {title}\n\n" + table.to_markdown(index=False) + "\n"
