"""The whole claims table from a run's data, and its Markdown."""

from __future__ import annotations

import math

import pandas as pd

from depthlab.claims.cod import cod_claims, finetune_claims
from depthlab.claims.csordas import csordas_claims
from depthlab.claims.gromov import gromov_claims, kim_claims
from depthlab.claims.lens import lens_swaps_claims
from depthlab.claims.liu import liu_claims
from depthlab.claims.pretrained import pretrained_claims
from depthlab.claims.pruning_methods import pruning_method_claims
from depthlab.claims.rows import COLUMNS
from depthlab.claims.run_data import RunData


def build_claims(data: RunData) -> pd.DataFrame:
    """Every claim the run's data can test, one row each (COLUMNS)."""
    rows = (
        cod_claims(data)
        + pretrained_claims(data)
        + gromov_claims(data)
        + kim_claims(data)
        + pruning_method_claims(data)
        + csordas_claims(data)
        + liu_claims(data)
        + finetune_claims(data)
        + lens_swaps_claims(data)
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
