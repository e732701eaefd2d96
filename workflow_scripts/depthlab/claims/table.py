"""The whole claims table from a run's data, its Markdown, and what differs between two runs'
tables (two machines, seeds or commits)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from depthlab.claims import (
    cod,
    csordas,
    gromov,
    gromov_tasks,
    lens,
    liu,
    pretrained,
    pruning_methods,
)
from depthlab.claims.rows import COLUMNS, Claim
from depthlab.claims.run_data import RunData

# Every claim the table can test, in the table's order: each paper's module declares its claims
# beside the functions that write their rows, so a claim added to a module's CLAIMS is computed,
# checked and listed in the docs (docs/hooks/claims_table.py) without touching this list.
CLAIMS: tuple[Claim, ...] = (
    *cod.CLAIMS,
    *pretrained.CLAIMS,
    *gromov.CLAIMS,
    *gromov_tasks.CLAIMS,
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


def _with_interval(value: float, low: float, high: float) -> str:
    """A value with its interval where it has one ("-" without a value)."""
    if not math.isfinite(value):
        return "-"
    interval = f" [{low:.4g}, {high:.4g}]" if math.isfinite(low) and math.isfinite(high) else ""
    return f"{value:.4g}{interval}"


def render_markdown(claims: pd.DataFrame, title: str) -> str:
    """The claims table as Markdown: measured value with its interval, verdict with reason,
    size verdict with the paper's band."""

    def measured(row):
        text = _with_interval(row.measured, row.low, row.high)
        return text + (f" ({row.interval})" if row.interval and text != "-" else "")

    def twins(row):
        text = _with_interval(
            row.training_effect, row.training_effect_low, row.training_effect_high
        )
        if text == "-":
            return text
        moved = row.training_moved if isinstance(row.training_moved, str) else ""
        return f"untrained {row.untrained:.4g}; trained - untrained {text}" + (
            f": training moved it {moved}" if moved else ""
        )

    def size(row):
        if not row.size_band:
            return row.size_verdict
        value = _with_interval(row.size_measured, row.size_low, row.size_high)
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
