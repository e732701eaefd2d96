"""The site's figure and claims-table hooks (docs/hooks/figures.py, claims_table.py): every
figure a link to its full size, a wide one shown at a readable size in a sideways-scrolling box
(issue 51: a 3530 px strip of seven panels was squeezed to 700 px), and the table of every claim
in six columns whose ids break only between words."""

import runpy
import struct
import zlib
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def hook(name: str) -> SimpleNamespace:
    return SimpleNamespace(**runpy.run_path(str(ROOT / "docs" / "hooks" / f"{name}.py")))


def png(path: Path, width: int, height: int) -> Path:
    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b""))
    return path


def test_png_size_reads_the_header(tmp_path):
    figures = hook("figures")
    assert figures.png_size(png(tmp_path / "a.png", 3530, 335)) == (3530, 335)
    (tmp_path / "b.png").write_bytes(b"GIF89a" + b"\0" * 30)
    assert figures.png_size(tmp_path / "b.png") is None


def test_every_figure_links_to_itself_and_a_wide_one_scrolls_at_half_size():
    figures = hook("figures")
    # a 1548 px figure (pruning/sweep.png) squeezed into the column was shown at 45%
    sizes = {"wide.png": (3530, 335), "narrow.png": (1300, 523), "mid.png": (1548, 523)}
    html = (
        '<p><a href="wide.png"><img alt="w" src="wide.png" /></a></p>\n'
        '<p><img alt="m" src="mid.png" /></p>\n'
        '<p><img alt="n" src="narrow.png" /></p>\n'
        '<p><img alt="x" src="https://example.org/x.png" /></p>'
    )
    out = figures.lay_out(html, sizes.get)
    wide, mid, narrow, external = out.split("\n")
    assert wide.startswith('<p><span class="figure-wide"><a href="wide.png">')
    assert mid.startswith('<p><span class="figure-wide">') and "width: 774px" in mid
    assert '<img style="width: 1765px" alt="w" src="wide.png" />' in wide
    assert wide.count("<a ") == 1  # already a link: not wrapped twice
    assert narrow == (
        '<p><a href="narrow.png" title="the figure at full size">'
        '<img alt="n" src="narrow.png" /></a></p>'
    )
    assert 'href="https://example.org/x.png"' in external and "figure-wide" not in external


def test_the_claims_table_fits_six_columns_and_its_ids_break_between_words():
    claims = hook("claims_table")
    assert claims.HEADER.splitlines()[0].count("|") == 7  # six columns
    filled = claims.fill(f"a\n\n{claims.MARKER}\n", "TABLE\n")
    assert '<div class="claims-reference" markdown>\n\nTABLE\n' in filled
    html = (
        '<div class="claims-reference"><table><tr><td><code>gromov_block_choice:smollm2</code>'
        "</td><td><code>not_an_id</code> in prose</td></tr>"
        "<tr><td><code>cod_deep_identity:&lt;LM&gt;</code></td></tr></table></div>"
        "<p><code>a_b</code></p>"
    )
    out = claims.break_ids(html)
    assert (
        '<td><code class="claim-id">gromov_<wbr>block_<wbr>choice:<wbr>smollm2</code></td>' in out
    )
    # a templated id (its brackets escaped) breaks at its words too
    assert '<code class="claim-id">cod_<wbr>deep_<wbr>identity:<wbr>&lt;LM&gt;</code>' in out
    assert "<code>not_an_id</code> in prose" in out  # only a cell that is an id
    assert out.endswith("<p><code>a_b</code></p>")  # outside the table: untouched


def test_a_docstrings_indented_table_is_fenced_and_its_prose_stays_markdown():
    """The stage reference read docstrings as Markdown: the measure table of
    depthlab.stages.analysis.measures, indented two spaces, joined into one paragraph."""
    preformat = hook("griffe_preformatted").preformat
    text = (
        "Measures:\n\n  Gromov\n    angular   d(x, y)\n\n    h_norm    ||h||\n\nMore prose\n"
        "- a list item\n  its continuation"
    )
    assert preformat(text) == (
        "Measures:\n\n```text\n  Gromov\n    angular   d(x, y)\n\n    h_norm    ||h||\n```\n\n"
        "More prose\n- a list item\n  its continuation"
    )
