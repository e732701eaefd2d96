"""Figures of the analysis stage, across the models of a run (one text set at a time).

Curves use relative depth l/L on the x axis so models of different depths share a panel; the
norm schemes of the default run all have the same L, so there it is the layer index scaled.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np

from depthlab.stages.analysis.measures import (
    LAYER_MEASURES,
    LOGIT_LENS_MEASURES,
    MEASURE_LABELS,
    UPDATE_MEASURES,
)

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


def _x_offset(measure: str) -> float:
    """States sit at l, a layer's measures at its middle l + 1/2, the angle between updates l
    and l+1 at the state l + 1 they share."""
    if measure in LAYER_MEASURES:
        return 0.5
    if measure in UPDATE_MEASURES:
        return 1.0
    return 0.0


def _missing_reason(summary: dict, measure: str) -> str:
    if measure.startswith("logit_lens") and not summary["architecture"].get("has_lm_head", True):
        return "no LM head: no logit lens"
    return "not measured"


def _curve_panels(frame, summaries, measures, title, facts=None, log_y=()):
    """One row of panels per model group (norm schemes, each sweep, hub models), one panel per
    measure, one line per model (seed replicates: their mean, the range as a band), x = relative
    depth. A model without a measure is named in the panel, not dropped silently."""
    import seaborn as sns

    from depthlab.core import figure_style as style

    plt = _pyplot()
    facts = style.model_facts(list(summaries), facts)
    colours = style.colours(facts)
    counts = style.seed_counts(facts)
    grouped = style.groups(facts)
    cols = len(measures)
    fig = plt.figure(figsize=(3.4 * cols + 2.4, 2.9 * len(grouped) + 0.5), layout="constrained")
    subfigs = np.atleast_1d(fig.subfigures(len(grouped), 1))
    for subfig, (group, models) in zip(subfigs, grouped.items()):
        axes = subfig.subplots(1, cols, squeeze=False)[0]
        for ax, measure in zip(axes, measures):
            subset = frame[(frame["measure"] == measure) & frame["model"].isin(models)].copy()
            missing = [m for m in models if m not in set(subset["model"])]
            if not subset.empty:
                depth = subset["model"].map(lambda m: summaries[m]["architecture"]["num_layers"])
                subset["x"] = (subset["layer"] + _x_offset(measure)) / depth
                subset["base"] = subset["model"].map(lambda m: facts[m]["base"])
                sns.lineplot(
                    subset,
                    x="x",
                    y="value",
                    hue="base",
                    palette=colours,
                    style="base",
                    dashes={
                        facts[m]["base"]: style.DASHES[style.line_style(facts[m], facts)]
                        for m in models
                    },
                    errorbar=style.SEED_BAND,
                    marker=".",
                    markeredgecolor=None,
                    legend=False,
                    ax=ax,
                )
            if missing:
                reasons = {m: _missing_reason(summaries[m], measure) for m in missing}
                ax.text(
                    0.5,
                    0.5,
                    "\n".join(f"{m}: {r}" for m, r in reasons.items()),
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                    fontsize=8,
                    color="dimgray",
                )
            ax.set_title(MEASURE_LABELS.get(measure, measure), fontsize=9)
            ax.set_xlabel("relative depth l / L")
            ax.set_ylabel("")
            if measure in log_y and not subset.empty and (subset["value"] > 0).all():
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
        handles, labels, shown = [], [], set()
        for model in models:
            fact = facts[model]
            name = style.label(fact)
            if fact["base"] in shown:  # one entry per seed group, not one per seed
                continue
            shown.add(fact["base"])
            absent = [
                m
                for m in measures
                if not ((frame["model"] == model) & (frame["measure"] == m)).any()
            ]
            if absent:
                name += f" ({_missing_reason(summaries[model], absent[0])})"
            if counts[fact["base"]] > 1:
                name += f" (mean of {counts[fact['base']]} seeds, band: range)"
            labels.append(name)
            handles.append(
                plt.Line2D(
                    [],
                    [],
                    color=colours[fact["base"]],
                    marker=".",
                    ls=style.line_style(fact, facts),
                )
            )
        subfig.legend(handles, labels, loc="outside right center", fontsize=8)
        subfig.suptitle(group, fontsize=10, x=0.02, ha="left")
    fig.suptitle(title, fontsize=11)
    return fig


def plot_angular_distance(frame, summaries, measure="angular_distance_last", facts=None):
    """Heatmaps of d(x^l, x^{l+n}): x = start layer l, y = block size n, one panel per model,
    one row per model group, one colour scale (0 to the largest distance) for all panels;
    seed replicates are averaged."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.ticker import MaxNLocator

    from depthlab.core import figure_style as style

    plt = _pyplot()
    present = [m for m in summaries if (frame[frame["model"] == m]["measure"] == measure).any()]
    facts = style.model_facts(present, facts)
    grids, samples = {}, {}
    for model in present:
        subset = frame[(frame["model"] == model) & (frame["measure"] == measure)]
        depth = summaries[model]["architecture"]["num_layers"]
        grid = np.full((depth, depth), np.nan)  # rows n-1, columns l
        grid[subset["n"].astype(int) - 1, subset["layer"].astype(int)] = subset["value"]
        base = facts[model]["base"]
        grids.setdefault(base, []).append(grid)
        samples[base] = int(subset["count"].iloc[0])
    with warnings.catch_warnings():  # cells beyond the last layer are NaN in every seed
        warnings.simplefilter("ignore", RuntimeWarning)
        means = {base: np.nanmean(np.stack(g), axis=0) for base, g in grids.items()}
    norm = style.shared_norm(means.values(), vmin=0.0)
    grouped = {
        group: list(dict.fromkeys(facts[m]["base"] for m in models))
        for group, models in style.groups(facts).items()
    }
    base_fact = {f["base"]: f for f in facts.values()}
    cols = max(len(b) for b in grouped.values()) if grouped else 1
    cols = min(cols, 8)
    rows_per = {g: math.ceil(len(b) / cols) for g, b in grouped.items()}
    fig = plt.figure(
        figsize=(2.6 * cols + 1.2, 2.5 * sum(rows_per.values()) + 0.8 * len(grouped)),
        layout="constrained",
    )
    subfigs = np.atleast_1d(
        fig.subfigures(
            len(grouped), 1, height_ratios=[rows_per[g] + 0.3 for g in grouped] if grouped else None
        )
    )
    all_axes = []
    for subfig, (group, bases) in zip(subfigs, grouped.items()):
        axes = subfig.subplots(rows_per[group], cols, squeeze=False)
        for ax, base in zip(axes.flat, bases):
            depth = means[base].shape[0]
            ax.imshow(
                means[base],
                origin="lower",
                aspect="auto",
                cmap="viridis",
                norm=norm,
                extent=(-0.5, depth - 0.5, 0.5, depth + 0.5),
            )
            seeds = len(grids[base])
            ax.set_title(
                f"{style.label(base_fact[base])} ({samples[base]} samples"
                + (f", mean of {seeds} seeds" if seeds > 1 else "")
                + ")",
                fontsize=8,
            )
            ax.set_xlabel("start layer l", fontsize=8)
            ax.set_ylabel("block size n", fontsize=8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            all_axes.append(ax)
        for ax in list(axes.flat)[len(bases) :]:
            ax.axis("off")
        subfig.colorbar(
            ScalarMappable(norm=norm, cmap="viridis"),
            ax=axes,
            shrink=0.9,
            label="d (same scale\nin every panel)",
        )
        subfig.suptitle(group, fontsize=10, x=0.02, ha="left")
    missing = [m for m in summaries if m not in present]
    which = "last token" if measure.endswith("last") else "all tokens"
    fig.suptitle(
        f"Angular distance d(x^l, x^(l+n)) = arccos(cos)/pi between layer inputs, "
        f"{which}, range 0 to {norm.vmax:.3f}"
        + (f"; not measured: {', '.join(missing)}" if missing else ""),
        fontsize=11,
    )
    return fig


def plot_variance_growth(frame, summaries, facts=None):
    return _curve_panels(
        frame,
        summaries,
        ["h_var", "h_norm", "h_mean"],
        "Variance, norm and mean of the residual stream h_l by relative depth "
        "(Curse of Depth layout: Pre-LN variance growth vs LayerNorm Scaling)",
        facts,
        log_y=("h_var", "h_norm"),
    )


def plot_contributions(frame, summaries, facts=None):
    return _curve_panels(
        frame,
        summaries,
        [m for m in LAYER_MEASURES if m != "angle_adjacent"],  # the angles have their own figure
        "Relative contribution of each sublayer to the residual and its cosine with it "
        "(Csordas et al., relative-contribution and cosine figures)",
        facts,
        log_y=("attn_rel_norm", "mlp_rel_norm", "block_rel_norm"),
    )


def plot_logit_lens(frame, summaries, facts=None):
    return _curve_panels(
        frame,
        summaries,
        list(LOGIT_LENS_MEASURES),
        "Logit lens: KL(p_l || p_L) and top-5 overlap with the final prediction "
        "(Csordas et al., logit-lens figure)",
        facts,
    )


def plot_angles(frame, summaries, facts=None):
    return _curve_panels(
        frame,
        summaries,
        ["angle_adjacent", *UPDATE_MEASURES],
        "Angle between adjacent hidden states and between successive updates "
        "(Liu et al., Inverse Depth Scaling: layer-similarity angles)",
        facts,
    )


def plot_all(frame, summaries, facts=None) -> dict:
    """{figure name: matplotlib figure} for FIGURES; `facts` group and colour the models
    (depthlab.core.figure_style)."""
    return {
        "angular_distance": plot_angular_distance(frame, summaries, facts=facts),
        "variance_growth": plot_variance_growth(frame, summaries, facts),
        "contributions": plot_contributions(frame, summaries, facts),
        "logit_lens": plot_logit_lens(frame, summaries, facts),
        "angles": plot_angles(frame, summaries, facts),
    }
