"""Comparing two runs' claims tables (two machines, seeds or commits)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

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
