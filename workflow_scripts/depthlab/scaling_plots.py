"""Figures of the scaling stage: a fitted law against its points, residuals, bootstrap spread."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .figure_style import format_interval  # noqa: E402
from .scaling_fits import LAWS  # noqa: E402

# The term each law's first panel isolates: x axis, its coefficient/exponent, the other terms.
FOCUS = {
    "decomposed": ("depth", "c_l", "a_l", "depth l"),
    "reference": ("params", "A", "alpha", "parameters N"),
}


def plain_log_ticks(axis, ticks=None) -> None:
    """Log-scaled axis labelled with plain numbers (2, 4, 8 ... not 2 x 10^0)."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    if ticks is not None:
        axis.set_ticks(ticks)
    formatter = ScalarFormatter()
    formatter.set_scientific(False)
    axis.set_major_formatter(formatter)
    axis.set_minor_formatter(NullFormatter())


# The published exponents each law's figure draws beside its measurement (paper_values keys).
PUBLISHED = {
    "decomposed": {"a_m": "liu_a_m", "a_l": "liu_a_l", "a_D": "liu_a_D"},
    "reference": {"alpha": "besiroglu_alpha", "beta": "besiroglu_beta"},
}


def published_exponents(law: str) -> dict:
    """{exponent: (value, ± or None, paper)} of the published fit a law is compared with."""
    from .paper_values import PAPER_VALUES

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


def plot_scaling_fit(
    record: dict, samples: pd.DataFrame, title: str = "", published: dict | None = None
):
    """Three panels: loss against depth (or N) with every other term held at its reference value,
    residuals of log loss, and the bootstrap distribution of the depth (or N) exponent.
    `published`: {exponent: (value, spread or None, source)} drawn beside the measurement."""
    published = published or {}
    law = LAWS[record["law"]]
    est = record["estimates"]
    points = pd.DataFrame(record["points"])
    refs = record["feature_refs"]
    focus, coef, expo, label = FOCUS[law.name]
    offset = record.get("depth_offset", 0.0) if focus == "depth" else 0.0

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))

    # (a) Partial-residual collapse: move each point to the reference width/data (or data),
    # keeping its own depth (or N), so every point should sit on the fitted curve.
    adjusted = points["loss"].to_numpy(float).copy()
    at_reference = est.get(law.floor, 0.0)
    for feature, c, a in zip(law.features, law.coefficients, law.exponents):
        if feature == focus:
            continue
        values = points[feature].to_numpy(float)
        adjusted += _term(est, c, a, np.array([refs[feature]])) - _term(est, c, a, values)
        at_reference += float(_term(est, c, a, np.array([refs[feature]]))[0])
    x = points[focus].to_numpy(float)
    colour_by = points["width"] if focus == "depth" else points["tokens"]
    scatter = axes[0].scatter(
        x, adjusted, c=np.log10(colour_by.to_numpy(float)), s=14, cmap="viridis", alpha=0.8
    )
    fig.colorbar(
        scatter, ax=axes[0], label="log10 width m" if focus == "depth" else "log10 tokens D"
    )
    grid = np.geomspace(x.min(), x.max(), 200)
    curve = at_reference + _term(est, coef, expo, grid - offset)
    axes[0].plot(
        grid,
        curve,
        "k-",
        lw=2,
        label="fit: " + exponent_text(record, expo) + (f", offset {offset:g}" if offset else ""),
    )
    if expo in published:
        # the paper's exponent through the same reference point, for the slope comparison
        anchor = np.sqrt(x.min() * x.max())
        term_at_anchor = float(_term(est, coef, expo, np.array([anchor - offset]))[0])
        paper_curve = (
            at_reference
            + term_at_anchor * ((grid - offset) / (anchor - offset)) ** -published[expo][0]
        )
        axes[0].plot(
            grid,
            paper_curve,
            ls="--",
            color="tab:red",
            lw=1.5,
            label="paper: " + published_text(expo, published),
        )
    axes[0].set_xscale("log")
    if focus == "depth":
        nice = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
        plain_log_ticks(axes[0].xaxis, [t for t in nice if x.min() <= t <= x.max()] or None)
    held = ", ".join(f"{f} = {refs[f]:.3g}" for f in law.features if f != focus)
    axes[0].set_title(f"loss vs {label} at {held}", fontsize=9)
    axes[0].set_xlabel(label)
    axes[0].set_ylabel("loss (other terms moved to the reference)")
    axes[0].legend(fontsize=7)

    # (b) Residuals of log loss against the prediction.
    axes[1].scatter(points["predicted"], points["residual_log"], s=12, alpha=0.8)
    axes[1].axhline(0.0, color="k", lw=1)
    axes[1].set_xlabel("predicted loss")
    axes[1].set_ylabel("log L - log L_hat")
    axes[1].set_title(
        f"residuals ({record['objective']}, n = {record['n_points_used']}, "
        f"RMSE {record['rmse_log']:.3g})",
        fontsize=9,
    )

    # (c) Bootstrap distribution of the focus exponent, the published value beside it.
    if expo in samples.columns and len(samples):
        axes[2].hist(samples[expo].dropna(), bins=40, color="tab:blue", alpha=0.8)
        interval = record["intervals"].get(expo)
        if interval:
            for edge in (interval["low"], interval["high"]):
                axes[2].axvline(edge, color="k", ls="--", lw=1)
        axes[2].axvline(
            est[expo],
            color="k",
            lw=2,
            label="estimate " + exponent_text(record, expo).split(" = ", 1)[1],
        )
        if expo in published:
            value, spread, _ = published[expo]
            if spread:
                axes[2].axvspan(value - spread, value + spread, color="tab:red", alpha=0.15)
            axes[2].axvline(
                value,
                color="tab:red",
                lw=2,
                ls="--",
                label="paper " + published_text(expo, published).split(" = ", 1)[1],
            )
        axes[2].legend(fontsize=7)
    boot = record["bootstrap"]
    axes[2].set_title(
        f"bootstrap of {expo} ({boot['resamples']} resamples of "
        f"{boot['unit']}, {int(boot['confidence'] * 100)}% interval dashed)",
        fontsize=9,
    )
    axes[2].set_xlabel(expo)

    measured = "; ".join(exponent_text(record, name) for name in law.exponents)
    shown = [name for name in law.exponents if name in published]
    paper = "; ".join(published_text(name, published).rsplit(" (", 1)[0] for name in shown)
    papers = ", ".join(dict.fromkeys(published[name][2] for name in shown))
    fig.suptitle(
        f"{title}: {law.equation} fitted on log loss\nmeasured "
        f"({int(boot['confidence'] * 100)}% bootstrap interval): {measured}"
        + (f"\npaper ({papers}): {paper}" if paper else ""),
        fontsize=10,
    )
    fig.tight_layout()
    return fig
