"""MkDocs hook: every figure of the site is a link to its full size, and a wide one is laid out
at a size that can be read.

The theme scales every image to the text column (about 700 px): a 3530 px strip of seven
panels (pruning/delta_p.png) became 66 px tall. A figure wider than WIDE_PX is shown at
SCALE of its pixels instead, in a box that scrolls sideways (docs/stylesheets/extra.css:
.figure-wide); every figure links to its file, so a click opens it at full size. Read as files
(GitHub, an editor) the pages need none of this: results pages write each figure as a link to
itself (depthlab.claims.results_page).
"""

from __future__ import annotations

import posixpath
import re
import struct
from pathlib import Path

# Wider than this many pixels, a figure squeezed into the ~700 px column falls below half its
# size, where its panel titles and tick labels cannot be read (1400-2200 px figures such as
# depth_use/skip_effects.png were shown at 39-48%); at SCALE it is then at least the column's width
WIDE_PX = 1400
# ... so it is shown at half its pixels: the figures are drawn at 150-200 dpi, half is about
# a screen's 96 dpi, their labels at the size they were drawn
SCALE = 0.5

_IMAGE = re.compile(r'(<a [^>]*href="[^"]*"[^>]*>\s*)?(<img [^>]*>)(\s*</a>)?')
_SRC = re.compile(r'\ssrc="([^"]+)"')


def png_size(path: str | Path) -> tuple[int, int] | None:
    """(width, height) from a PNG's header, or None for another format or a short file."""
    with open(path, "rb") as handle:
        head = handle.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def _source_file(src: str, page_url: str, files) -> str | None:
    """The docs file an <img src> of the page at `page_url` points to (None: external/absent)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:|^/", src):
        return None
    target = posixpath.normpath(posixpath.join(posixpath.dirname("/" + page_url), src))
    for file in files:
        if "/" + file.url == target:
            return file.abs_src_path
    return None


def lay_out(html: str, size_of) -> str:
    """`html` with every image a link to its source and a wide one (size_of(src) -> (width,
    height) or None) in a sideways-scrolling box at SCALE of its pixels."""

    def one(match) -> str:
        opened, img, closed = match.groups()
        found = _SRC.search(img)
        if found is None:
            return match.group(0)
        src = found.group(1)
        if not (opened and closed):
            opened, closed = f'<a href="{src}" title="the figure at full size">', "</a>"
        size = size_of(src)
        if size is None or size[0] <= WIDE_PX:
            return f"{opened}{img}{closed}"
        width = round(size[0] * SCALE)
        img = img.replace("<img ", f'<img style="width: {width}px" ', 1)
        # a span (display: block), not a div: the image sits inside the paragraph Markdown made
        hint = (
            '<small class="figure-hint">wider than the page: scroll sideways, or click it</small>'
        )
        return f'<span class="figure-wide">{opened}{img}{closed}</span>{hint}'

    return _IMAGE.sub(one, html)


def on_page_content(html, page, config, files):
    """Link and lay out the page's figures (mkdocs hook)."""

    def size_of(src):
        path = _source_file(src, page.url, files)
        return png_size(path) if path and path.endswith(".png") else None

    return lay_out(html, size_of)
