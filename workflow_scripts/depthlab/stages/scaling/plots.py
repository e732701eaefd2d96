"""Figures of the scaling stage: a fitted law against its points, residuals, bootstrap spread."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from depthlab.core.figure_style import format_interval, plain_log_ticks  # noqa: E402
from depthlab.stages.scaling.fits import LAWS  # noqa: E402

# The term each law's first panel isolates: x axis, its coefficient/exponent, the other terms.
FOCUS = {
    "decomposed": ("depth", "c_l", "a_l", "depth l"),
    "reference": ("params", "A", "alpha", "parameters N"),
}


# The published exponents each law's figure draws beside its measurement (paper_values keys).
PUBLISHED = {
    "decomposed": {"a_m": "liu_a_m", "a_l": "liu_a_l", "a_D": "liu_a_D"},
    "reference": {"alpha": "besiroglu_alpha", "beta": "besiroglu_beta"},
}


def published_exponents(law: str) -> dict:
    """{exponent: (value, ± or None, paper)} of the published fit a law is compared with."""
    from depthlab.core.paper_values import PAPER_VALUES

    return {
        name: (PAPER_VALUES[key].value, PAPER_VALUES[key].error, PAPER_VALUES[key].paper)
        for name, key in PUBLISHED.get(law, {}).items()
        if key in PAPER_VALUES
    }


def _term(estimates: dict, coefficient: str, exponent: str, values: np.ndarray) -> np.ndarray:
    return np.exp(estimates[f"log_{coefficient}"] - estimates[exponent] * np.log(values))


def exponent_text(record: dict, name: str) -> str:
    """`a_l = 5 [7.56e-12, 5] (at bound)`: estimate, bootstrap interval, and "at bound" when the
    optimum sits on an exponent bound (the data do not pin it down)."""
    value = format_interval(record["estimates"][name], record["intervals"].get(name))
    at_bound = " (at bound)" if name in record.get("parameters_at_bounds", ()) else ""
    return f"{name} = {value}{at_bound}"


def published_text(name: str, published: dict) -> str:
    value, spread, source = published[name]
    return f"{name} = {value:g}" + (f" ± {spread:g}" if spread else "") + f" ({source})"


def _collapsed_points(record: dict, law, points: pd.DataFrame, focus: str) -> tuple:
    """(loss of each point with every term but the focus one moved to its reference value, the
    fitted loss at the reference apart from the focus term): the partial-residual collapse."""
    est, refs = record["estimates"], record["feature_refs"]
    adjusted = points["loss"].to_numpy(float).copy()
    at_reference = est.get(law.floor, 0.0)
    for feature, c, a in zip(law.features, law.coefficients, law.exponents):
        if feature == focus:
            continue
        values = points[feature].to_numpy(float)
        adjusted += _term(est, c, a, np.array([refs[feature]])) - _term(est, c, a, values)
        at_reference += float(_term(est, c, a, np.array([refs[feature]]))[0])
    return adjusted, at_reference


def _collapse_panel(fig, ax, record: dict, law, points: pd.DataFrame, published: dict) -> None:
    """(a) Partial-residual collapse: each point moved to the reference width/data (or data),
    keeping its own depth (or N), so every point should sit on the fitted curve; the paper's
    exponent drawn through the same reference point for the slope comparison."""
    est, refs = record["estimates"], record["feature_refs"]
    focus, coef, expo, label = FOCUS[law.name]
    offset = record.get("depth_offset", 0.0) if focus == "depth" else 0.0
    adjusted, at_reference = _collapsed_points(record, law, points, focus)
    x = points[focus].to_numpy(float)
    colour_by = points["width"] if focus == "depth" else points["tokens"]
    scatter = ax.scatter(
        x, adjusted, c=np.log10(colour_by.to_numpy(float)), s=14, cmap="viridis", alpha=0.8
    )
    fig.colorbar(scatter, ax=ax, label="log10 width m" if focus == "depth" else "log10 tokens D")
    grid = np.geomspace(x.min(), x.max(), 200)
    curve = at_reference + _term(est, coef, expo, grid - offset)
    ax.plot(
        grid,
        curve,
        "k-",
        lw=2,
        label="fit: " + exponent_text(record, expo) + (f", offset {offset:g}" if offset else ""),
    )
    if expo in published:
        anchor = np.sqrt(x.min() * x.max())
        term_at_anchor = float(_term(est, coef, expo, np.array([anchor - offset]))[0])
        paper_curve = (
            at_reference
            + term_at_anchor * ((grid - offset) / (anchor - offset)) ** -published[expo][0]
        )
        ax.plot(
            grid,
            paper_curve,
            ls="--",
            color="tab:red",
            lw=1.5,
            label="paper: " + published_text(expo, published),
        )
    ax.set_xscale("log")
    if focus == "depth":
        nice = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
        plain_log_ticks(ax.xaxis, [t for t in nice if x.min() <= t <= x.max()] or None)
    held = ", ".join(f"{f} = {refs[f]:.3g}" for f in law.features if f != focus)
    ax.set_title(f"loss vs {label} at {held}", fontsize=9)
    ax.set_xlabel(label)
    ax.set_ylabel("loss (other terms moved to the reference)")
    ax.legend(fontsize=7)


def _residual_panel(ax, record: dict, points: pd.DataFrame) -> None:
    """(b) Residuals of log loss against the prediction."""
    ax.scatter(points["predicted"], points["residual_log"], s=12, alpha=0.8)
    ax.axhline(0.0, color="k", lw=1)
    ax.set_xlabel("predicted loss")
    ax.set_ylabel("log L - log L_hat")
    ax.set_title(
        f"residuals ({record['objective']}, n = {record['n_points_used']}, "
        f"RMSE {record['rmse_log']:.3g})",
        fontsize=9,
    )


def _bootstrap_panel(ax, record: dict, samples: pd.DataFrame, expo: str, published: dict):
    """(c) Bootstrap distribution of the focus exponent, the published value beside it."""
    if expo in samples.columns and len(samples):
        ax.hist(samples[expo].dropna(), bins=40, color="tab:blue", alpha=0.8)
        interval = record["intervals"].get(expo)
        if interval:
            for edge in (interval["low"], interval["high"]):
                ax.axvline(edge, color="k", ls="--", lw=1)
        ax.axvline(
            record["estimates"][expo],
            color="k",
            lw=2,
            label="estimate " + exponent_text(record, expo).split(" = ", 1)[1],
        )
        if expo in published:
            value, spread, _ = published[expo]
            if spread:
                ax.axvspan(value - spread, value + spread, color="tab:red", alpha=0.15)
            ax.axvline(
                value,
                color="tab:red",
                lw=2,
                ls="--",
                label="paper " + published_text(expo, published).split(" = ", 1)[1],
            )
        ax.legend(fontsize=7)
    boot = record["bootstrap"]
    ax.set_title(
        f"bootstrap of {expo} ({boot['resamples']} resamples of "
        f"{boot['unit']}, {int(boot['confidence'] * 100)}% interval dashed)",
        fontsize=9,
    )
    ax.set_xlabel(expo)


def _suptitle(record: dict, law, title: str, published: dict) -> str:
    """The law, every measured exponent with its interval, and the published ones beside."""
    boot = record["bootstrap"]
    measured = "; ".join(exponent_text(record, name) for name in law.exponents)
    shown = [name for name in law.exponents if name in published]
    paper = "; ".join(published_text(name, published).rsplit(" (", 1)[0] for name in shown)
    papers = ", ".join(dict.fromkeys(published[name][2] for name in shown))
    return (
        f"{title}: {law.equation} fitted on log loss\nmeasured "
        f"({int(boot['confidence'] * 100)}% bootstrap interval): {measured}"
        + (f"\npaper ({papers}): {paper}" if paper else "")
    )


def plot_scaling_fit(
    record: dict, samples: pd.DataFrame, title: str = "", published: dict | None = None
):
    """Three panels: loss against depth (or N) with every other term held at its reference value,
    residuals of log loss, and the bootstrap distribution of the depth (or N) exponent.
    `published`: {exponent: (value, spread or None, source)} drawn beside the measurement."""
    published = published or {}
    law = LAWS[record["law"]]
    points = pd.DataFrame(record["points"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    _collapse_panel(fig, axes[0], record, law, points, published)
    _residual_panel(axes[1], record, points)
    _bootstrap_panel(axes[2], record, samples, FOCUS[law.name][2], published)
    fig.suptitle(_suptitle(record, law, title, published), fontsize=10)
    fig.tight_layout()
    return fig
