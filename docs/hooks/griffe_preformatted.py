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
    """`text` with every indented block that follows a blank line fenced as ```text (blank lines
    inside it kept, those after it left outside)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if lines[i].startswith("  ") and lines[i].strip() and (i == 0 or not lines[i - 1].strip()):
            end = i + 1
            while end < len(lines) and (lines[end].startswith("  ") or not lines[end].strip()):
                end += 1
            while not lines[end - 1].strip():
                end -= 1
            out += ["```text", *lines[i:end], "```"]
            i = end
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out)


class PreformattedBlocks(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = preformat(obj.docstring.value)
