"""The README's and docs/stages.md's figure-redraw command forces every rule that writes a figure
(before, it left out plot_finetuning and lens_swaps, whose figures then stayed as they were),
and no rule that trains something other than a seconds-long fit (before, the lens figures were
drawn by their lens_swaps jobs, which retrained each lens)."""

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def figure_rules() -> set[str]:
    """Every rule whose output holds a figure (PATHS.figure(...)) in rules/*.smk."""
    found = set()
    for smk in (ROOT / "rules").glob("*.smk"):
        for block in re.split(r"\n(?=\s*rule )", smk.read_text()):
            name = re.match(r"\s*rule (\w+):", block)
            if name and "PATHS.figure(" in block.split("params:")[0]:
                found.add(name.group(1))
    return found


def redraw_rules(page: str) -> set[str]:
    lines = [line for line in (ROOT / page).read_text().splitlines() if "--forcerun" in line]
    commands = [shlex.split(line) for line in lines if line.rstrip().endswith("-- figures")]
    widest = max(commands, key=len)
    start = widest.index("--forcerun") + 1
    return set(widest[start : widest.index("--")])


def test_the_rules_that_write_figures_are_found():
    assert {"plot_loss_curves", "plot_finetuning", "plot_lens_swaps", "fit_toy"} <= figure_rules()
    # the lens job writes tables only: a figure redraw never retrains a lens
    assert "lens_swaps" not in figure_rules()


def test_the_redraw_command_forces_every_figure_rule():
    for page in ("README.md", "docs/stages.md"):
        assert figure_rules() <= redraw_rules(page), page
