"""One declaration per claim (depthlab.claims.rows.Claim, in each paper's module's CLAIMS): the
table runs the functions the declarations name and refuses a row no declaration covers; the docs'
table of every claim (docs/hooks/claims_table.py, on claims.md) is rendered from the same
declarations, and the report's caption restates no claim's rule."""

from __future__ import annotations

import math
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
from depthlab.claims import RunData, build_claims
from depthlab.claims.rows import Claim, claim_row
from depthlab.claims.table import CLAIMS, undeclared
from depthlab.claims.verdicts import NOT_TESTABLE, Estimate
from depthlab.core import paper_values, paper_values_lens, paper_values_pruning

ROOT = Path(__file__).resolve().parents[3]


def _hook():
    """docs/hooks/claims_table.py's names (the hook is a file of the docs, not a module)."""
    return SimpleNamespace(**runpy.run_path(str(ROOT / "docs" / "hooks" / "claims_table.py")))


def _planted(claim_id: str):
    """A row function that writes one not-testable row with the given id."""

    def rows(data):
        return [
            claim_row(
                claim_id,
                "paper",
                "a planted claim",
                None,
                Estimate(math.nan),
                "scale",
                (NOT_TESTABLE, "planted"),
                paper_value="planted",
            )
        ]

    return rows


def _claim(claim_id: str, rows) -> Claim:
    return Claim(
        claim_id,
        paper_values.PAPER_VALUES["cod_lns_best"],
        "a measure",
        "seeds",
        "> 0.5 | the rule",
        "no",
        rows,
    )


def test_every_declaration_is_unique_and_names_a_published_value():
    ids = [claim.id for claim in CLAIMS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    published = [
        *paper_values.PAPER_VALUES.values(),
        *paper_values_lens.PAPER_VALUES.values(),
        *paper_values_pruning.PAPER_VALUES.values(),
    ]
    for claim in CLAIMS:
        assert any(claim.paper_value is value for value in published), claim.id
        assert callable(claim.rows) and claim.measure and claim.rule and claim.fair, claim.id


def test_the_table_runs_each_declared_function_once_in_order():
    calls = []

    def first(data):
        calls.append("first")
        return _planted("first_claim:a")(data) + _planted("second_claim")(data)

    def second(data):
        calls.append("second")
        return _planted("third_claim")(data)

    claims = (
        _claim("first_claim:<model>", first),
        _claim("second_claim", first),
        _claim("third_claim", second),
    )
    table = build_claims(RunData(), claims)
    assert calls == ["first", "second"]
    assert list(table["claim_id"]) == ["first_claim:a", "second_claim", "third_claim"]


def test_a_row_without_a_declaration_is_an_error():
    claims = (_claim("declared_claim", _planted("undeclared_claim:x")),)
    with pytest.raises(ValueError, match=r"without a declaration .*undeclared_claim:x"):
        build_claims(RunData(), claims)
    assert undeclared(["cod_lns_best", "cod_post_ln_reverse:minilm", "made_up:x"]) == ["made_up:x"]


def test_every_claim_of_the_recorded_default_run_is_declared():
    """The claims of the recorded results page (a real run of the default suite) all have a
    declaration, so the docs' table lists every one of them."""
    page = (ROOT / "docs" / "results" / "default.md").read_text()
    recorded = re.findall(r'<code class="claim-id">([^<]+(?:<wbr>[^<]+)*)</code>', page)
    ids = [r.replace("<wbr>", "") for r in recorded]
    assert len(ids) >= 40
    assert undeclared(ids) == []


def test_the_docs_table_is_rendered_from_the_declarations():
    hook = _hook()
    text = hook.render(CLAIMS)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(CLAIMS)
    for claim, row in zip(CLAIMS, rows):
        assert row.startswith(f"| `{claim.id}` | ")
        assert claim.paper_value.source in row
    # a threshold reaches the page from paper_values, not typed into it
    variance = next(row for row in rows if row.startswith("| `cod_variance_growth` |"))
    assert f"| > {paper_values.COD_VARIANCE_SLOPE_NEGLIGIBLE:g}, no single layer" in variance
    # what the claim is about, which decides how its untrained twin counts
    assert "| architecture |" in variance
    assert all(f"| {claim.kind} |" in row for claim, row in zip(CLAIMS, rows))
    planted = hook.render([_claim("planted_claim", _planted("planted_claim"))])
    assert "| `planted_claim` | Sun et al. 2025, Sec. 5 (" in planted
    assert "| > 0.5 \\| the rule | no |" in planted  # a bare | would split the cell
    assert "| training |" in planted  # a claim's kind is training unless declared otherwise


def test_the_claims_page_holds_the_marker_once():
    hook = _hook()
    page = (ROOT / "docs" / "claims.md").read_text()
    filled = hook.fill(page, "TABLE\n")
    assert "TABLE" in filled and hook.MARKER not in filled
    with pytest.raises(ValueError, match="must hold the line"):
        hook.fill(page.replace(hook.MARKER, ""), "TABLE\n")
    # the page's prose names no rule of its own beside the generated table
    assert "| `cod_" not in page


def test_the_caption_restates_no_claim():
    caption = (ROOT / "rules" / "captions" / "claims.rst").read_text()
    assert [c.base for c in CLAIMS if c.base in caption] == []
    assert "docs/claims.md" in caption


def test_every_claim_the_docs_name_is_declared():
    """A claim id named in the manual, the README or a report caption (a renamed or removed
    claim's old id would linger there) has a declaration."""
    papers = "|".join(sorted({c.base.split("_", 1)[0] for c in CLAIMS}))
    named = re.compile(rf"`((?:{papers})_[a-z_]+)")
    texts = [
        ROOT / "README.md",
        *(p for p in (ROOT / "docs").glob("*.md")),
        *(ROOT / "rules" / "captions").glob("*.rst"),
    ]
    found = {(p.name, m) for p in texts for m in named.findall(p.read_text())}
    assert len(found) >= 5
    assert sorted(f"{page}: {m}" for page, m in found if undeclared([m])) == []


def test_the_claims_page_prose_quotes_the_named_thresholds():
    """The rules the page states in prose beside the generated table carry the named values."""
    from depthlab.claims.verdicts import MIN_SEEDS

    pv = paper_values
    page = " ".join((ROOT / "docs" / "claims.md").read_text().split())
    assert pv.GROMOV_GAP_NEGLIGIBLE == pv.COD_DELTA_P_NEGLIGIBLE
    assert pv.GROMOV_GAP_NEGLIGIBLE == paper_values_pruning.CRITERIA_GAP_NEGLIGIBLE
    for phrase in (
        f"decided only over {MIN_SEEDS} or more seeds",
        f"must exceed {pv.LEARNED_SHARE_NEGLIGIBLE:.0%} of what the model learned",
        f"published LMs keep {pv.GROMOV_GAP_NEGLIGIBLE:g} nats",
        "n = 1 .. L/2" if pv.GROMOV_MAX_FRACTION == 0.5 else "(GROMOV_MAX_FRACTION changed)",
        f"about {pv.COD_MIN_TOKENS_PER_PARAM:g} tokens per non-embedding parameter",
        "the paper's {:.0f}-{:.0f}%".format(*(100 * b for b in paper_values_lens.LAD_SWAP_BAND)),
    ):
        assert phrase in page, phrase
