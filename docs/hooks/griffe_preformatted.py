"""Griffe extension (mkdocs.yml: mkdocstrings' `extensions`): a docstring's indented block shows
as it is written.

The library's docstrings lay out tables and lists by indenting them two spaces under a blank
line (the measure table of depthlab.stages.analysis.measures, the phases of the pruning stage);
read as Markdown, which the stage reference does (`docstring_style: null`), such a block joins
into one paragraph. Each run of indented lines that follows a blank line becomes a fenced text
block, so the page shows the columns the terminal shows; the rest stays Markdown.
"""

from __future__ import annotations

import griffe


def preformat(text: str) -> str:
    """`text` with every indented block that follows a blank line fenced as ```text."""
    lines, out, block = text.split("\n"), [], []

    def flush():
        if block:
            out.extend(["```text", *block, "```"])
            block.clear()

    for i, line in enumerate(lines):
        indented = line.startswith("  ") and line.strip()
        starts = indented and (i == 0 or not lines[i - 1].strip())
        if block and (indented or not line.strip()) or starts:
            block.append(line)
            continue
        trailing = []
        while block and not block[-1].strip():  # blank lines after a block stay outside it
            trailing.append(block.pop())
        flush()
        out.extend(trailing)
        out.append(line)
    trailing = []
    while block and not block[-1].strip():
        trailing.append(block.pop())
    flush()
    return "\n".join(out + trailing)


class PreformattedBlocks(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = preformat(obj.docstring.value)
