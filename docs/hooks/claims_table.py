"""MkDocs hook: the table of every claim on claims.md, rendered from the claims' declarations
(depthlab.claims.table.CLAIMS: each paper's module declares its claims beside the code that
writes their rows) at build time, so the page cannot drift from the code: a claim's paper,
section, measure, replicate unit, rule (written from the named thresholds in
depthlab.core.paper_values*), what it is about (training or the architecture, which decides
how the untrained twin counts) and whether the default suite's rows are a fair test.

claims.md holds MARKER where the table goes; a page without it fails the build.
`python docs/hooks/claims_table.py` prints the table.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = "claims.md"
MARKER = "<!-- the table of every claim: docs/hooks/claims_table.py writes it here -->"
# Six columns, the replicate unit inside "what is measured": seven did not fit the site's column
# (the last one was cut off); docs/stylesheets/extra.css sets the table (.claims-reference)
HEADER = (
    "| claim | paper, where | about | what is measured (replicate unit) | rule | "
    "the toy rows: a fair test? |\n|---|---|---|---|---|---|"
)
# The site's wrapper (md_in_html): the table's class, for the stylesheet
OPEN, CLOSE = '<div class="claims-reference" markdown>', "</div>"


def _cell(text: str) -> str:
    from depthlab.claims.results_page import markdown_cell

    return markdown_cell(" ".join(text.split()))


def render(claims) -> str:
    """The Markdown table, one row per declaration, in the table's order."""
    lines = [HEADER]
    for claim in claims:
        value = claim.paper_value
        cited = value.paper.split(" (", 1)[0]  # "Sun et al. 2025 (Curse of Depth, ...)"
        cells = (
            f"`{claim.id}`",
            f"{cited}, {value.source}",
            claim.kind,
            f"{claim.measure} (*{claim.replicate}*)",
            claim.rule,
            claim.fair,
        )
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def table_text(root: Path = ROOT) -> str:
    sys.path.insert(0, str(root / "workflow_scripts"))
    from depthlab.claims.table import CLAIMS

    return render(CLAIMS)


def fill(markdown: str, table: str) -> str:
    """The page with its marker replaced by the table; ValueError without exactly one marker."""
    if markdown.count(MARKER) != 1:
        raise ValueError(
            f"docs/{PAGE} must hold the line {MARKER!r} once (found {markdown.count(MARKER)})"
        )
    return markdown.replace(MARKER, f"{OPEN}\n\n{table}\n{CLOSE}")


def _breakable_id(match) -> str:
    """A claim id that breaks only after `_` or `:` (never mid-word, as the browser did)."""
    text = match.group(1).replace("_", "_<wbr>").replace(":", ":<wbr>")
    return f'<code class="claim-id">{text}</code>'


def break_ids(html: str) -> str:
    """The page's HTML with the ids in the table's first cells breakable at their words: every
    id, a templated one too (`cod_deep_identity:<LM>`, `liu_toy_tied_exceeds:T=<temperature>`:
    their escaped brackets are no `_` or `:`), which the browser otherwise cut mid-word."""
    start = html.find('<div class="claims-reference">')
    if start < 0:
        return html
    end = html.find("</table>", start)
    cells = re.sub(
        r"<td><code>([^<]+)</code></td>",
        lambda m: f"<td>{_breakable_id(m)}</td>",
        html[start:end],
    )
    return html[:start] + cells + html[end:]


def on_page_markdown(markdown, page, config, files):
    """Write the table into claims.md (mkdocs hook)."""
    if page.file.src_uri != PAGE:
        return markdown
    return fill(markdown, table_text())


def on_page_content(html, page, config, files):
    """Let the table's ids break at their words (mkdocs hook)."""
    return break_ids(html) if page.file.src_uri == PAGE else html


if __name__ == "__main__":
    print(table_text(), end="")
