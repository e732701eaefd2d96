"""Figures of the analysis stage, across the models of a run (one text set at a time).

Curves use relative depth l/L on the x axis so models of different depths share a panel; the
six norm schemes of the default run all have the same L, so there it is the layer index scaled.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .measures import LAYER_MEASURES, MEASURE_LABELS, UPDATE_MEASURES

FIGURES = ("angular_distance", "variance_growth", "contributions", "logit_lens", "angles")


def read_analyses(folders) -> tuple:
    """(tidy measures of all models, {model: summary}) from analyse_model.py output folders."""
    import pandas as pd

    frames, summaries = [], {}
    for folder in folders:
        folder = Path(folder)
        frame = pd.read_csv(folder / "measures.csv")
        summary = json.loads((folder / "summary.json").read_text())
        frames.append(frame)
        summaries[summary["model"]] = summary
    if not frames:
        raise ValueError("no analysis folders given")
    return pd.concat(frames, ignore_index=True), summaries


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colours(models):
    plt = _pyplot()
    cmap = plt.get_cmap("tab10" if len(models) <= 10 else "tab20")
    return {model: cmap(i % cmap.N) for i, model in enumerate(models)}


def _x_offset(measure: str) -> float:
    """States sit at l, a layer's measures at its middle l + 1/2, the angle between updates l
    and l+1 at the state l + 1 they share."""
    if measure in LAYER_MEASURES:
        return 0.5
    if measure in UPDATE_MEASURES:
        return 1.0
    return 0.0


def _curve_panels(frame, summaries, measures, title, log_y=()):
    """One panel per measure, one line per model, x = relative depth."""
    plt = _pyplot()
    models = list(summaries)
    colours = _colours(models)
    cols = min(4, len(measures))
    rows = math.ceil(len(measures) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax, measure in zip(axes.flat, measures):
        subset = frame[frame["measure"] == measure]
        for model in models:
            rows_m = subset[subset["model"] == model].sort_values("layer")
            if rows_m.empty:
                continue
            depth = summaries[model]["architecture"]["num_layers"]
            ax.plot((rows_m["layer"] + _x_offset(measure)) / depth, rows_m["value"], marker=".",
                    color=colours[model], label=model)
        if subset.empty:
            ax.text(0.5, 0.5, "not measured\n(no model with an LM head)", ha="center",
                    va="center", transform=ax.transAxes)
        ax.set_title(MEASURE_LABELS.get(measure, measure), fontsize=10)
        ax.set_xlabel("relative depth l / L")
        if measure in log_y and (subset["value"] > 0).all() and not subset.empty:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(measures):]:
        ax.axis("off")
    handles, labels = max((ax.get_legend_handles_labels() for ax in axes.flat),
                          key=lambda pair: len(pair[0]))
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_angular_distance(frame, summaries, measure="angular_distance_last"):
    """Heatmaps of d(x^l, x^{l+n}): x = start layer l, y = block size n, one panel per model."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    models = [m for m in summaries if (frame[(frame["model"] == m)]["measure"] == measure).any()]
    cols = min(4, max(1, len(models)))
    rows = max(1, math.ceil(len(models) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False)
    for ax, model in zip(axes.flat, models):
        subset = frame[(frame["model"] == model) & (frame["measure"] == measure)]
        depth = summaries[model]["architecture"]["num_layers"]
        grid = np.full((depth, depth), np.nan)  # rows n-1, columns l
        for l, n, value in zip(subset["layer"], subset["n"], subset["value"]):
            grid[int(n) - 1, int(l)] = value
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", vmin=0,
                          extent=(-0.5, depth - 0.5, 0.5, depth + 0.5))
        fig.colorbar(image, ax=ax, fraction=0.046)
        count = int(subset["count"].iloc[0])
        ax.set_title(f"{model} ({count} samples)", fontsize=9)
        ax.set_xlabel("start layer l")
        ax.set_ylabel("block size n")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in list(axes.flat)[len(models):]:
        ax.axis("off")
    which = "last token" if measure.endswith("last") else "all tokens"
    fig.suptitle(f"Angular distance d(x^l, x^(l+n)) = arccos(cos)/pi, {which} "
                 "(Gromov et al. / Curse of Depth heatmap layout)", fontsize=11)
    fig.tight_layout()
    return fig


def plot_variance_growth(frame, summaries):
    return _curve_panels(
        frame, summaries, ["h_var", "h_norm", "h_mean"],
        "Hidden-state variance and norm growth with depth, all norm schemes overlaid "
        "(Curse of Depth: Pre-LN variance growth vs LayerNorm Scaling)",
        log_y=("h_var", "h_norm"))


def plot_contributions(frame, summaries):
    return _curve_panels(
        frame, summaries,
        ["attn_rel_norm", "mlp_rel_norm", "block_rel_norm", "cos_attn_residual",
         "cos_mlp_residual", "cos_update_residual", "cos_adjacent"],
        "Relative contribution of each sublayer to the residual and its cosine with it "
        "(Csordas et al., relative-contribution and cosine figures)",
        log_y=("attn_rel_norm", "mlp_rel_norm", "block_rel_norm"))


def plot_logit_lens(frame, summaries):
    return _curve_panels(
        frame, summaries, ["logit_lens_kl", "logit_lens_top5"],
        "Logit lens: KL(p_l || p_L) and top-5 overlap with the final prediction "
        "(Csordas et al., logit-lens figure)")


def plot_angles(frame, summaries):
    return _curve_panels(
        frame, summaries, ["angle_adjacent", "angle_update"],
        "Angle between adjacent hidden states and between successive updates "
        "(Liu et al., Inverse Depth Scaling: layer-similarity angles)")


def plot_all(frame, summaries) -> dict:
    """{figure name: matplotlib figure} for FIGURES."""
    return {
        "angular_distance": plot_angular_distance(frame, summaries),
        "variance_growth": plot_variance_growth(frame, summaries),
        "contributions": plot_contributions(frame, summaries),
        "logit_lens": plot_logit_lens(frame, summaries),
        "angles": plot_angles(frame, summaries),
    }
