"""Every figure of a finished run with its caption, grouped by stage, for its results page.

A run's figures lie under results/<run>/figures/ as the rules write them (loss_curves,
analysis/<text set>/<figure>, lens_swaps/<model>, scaling/<fit>, toy_loss_vs_depth,
pruning/<figure>, depth_use/<figure>, finetuning). Each rule's caption is a Jinja template in
rules/captions/ (Snakemake renders it into `snakemake --report`); the page renders the same
template with the run's config, so the page and the report say the same of a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

CAPTIONS = Path(__file__).resolve().parents[3] / "rules" / "captions"

# The figures' first path part -> (the page's group heading, its caption file, or None when the
# caption is named after the figure: `<group>_<figure>.rst`), in the order the stages run.
GROUPS = {
    "loss_curves": ("Pretraining", "loss_curves"),
    "analysis": ("Analysis", None),
    "lens_swaps": ("Analysis: tuned lens and layer swaps", "lens_swaps"),
    "scaling": ("Scaling laws", "scaling"),
    "toy_loss_vs_depth": ("Toy models", "toy"),
    "pruning": ("Pruning", None),
    "depth_use": ("Depth use", None),
    "finetuning": ("Fine-tuning", "finetuning"),
}


@dataclass
class RunFigure:
    path: str  # relative to the run's figures/ folder
    group: str
    caption: str


def _key(relative: Path) -> str:
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def figure_files(figures_dir: Path) -> list[Path]:
    """The run's figures (relative to `figures_dir`), grouped in stage order, sorted within."""
    found = [
        path.relative_to(figures_dir)
        for path in figures_dir.rglob("*")
        if path.is_file() and path.suffix in (".png", ".svg", ".pdf", ".jpg")
    ]
    order = list(GROUPS)
    return sorted(
        found,
        key=lambda p: (order.index(_key(p)) if _key(p) in order else len(order), p.as_posix()),
    )


def caption_markdown(relative: Path, config: dict) -> str:
    """The figure's caption from its rule's template, rendered with `config` (the run's merged
    config) and the figure's wildcards, as one Markdown paragraph; a figure no rule captions
    says so."""
    import jinja2

    key = _key(relative)
    if key not in GROUPS:
        return f"(no caption: no rule of this workflow writes figures/{relative.as_posix()})"
    caption = GROUPS[key][1] or f"{key}_{relative.stem}"
    template = CAPTIONS / f"{caption}.rst"
    if not template.is_file():
        return f"(no caption: {template.name} is missing from rules/captions/)"
    # the wildcards of the rule that wrote it: analysis/<job>/<figure>, lens_swaps/<model>,
    # scaling/<job>
    job = relative.parts[1] if len(relative.parts) > 2 else relative.stem
    snakemake = SimpleNamespace(
        config=config, wildcards=SimpleNamespace(job=job, model=relative.stem)
    )
    text = jinja2.Template(template.read_text(encoding="utf-8")).render(snakemake=snakemake)
    return " ".join(text.replace("``", "`").split())


def run_figures(figures_dir: Path, config: dict) -> list[RunFigure]:
    return [
        RunFigure(
            path=relative.as_posix(),
            group=GROUPS.get(_key(relative), ("Other figures", None))[0],
            caption=caption_markdown(relative, config),
        )
        for relative in figure_files(figures_dir)
    ]
