"""Figures of the toy stage: test KL against student depth with the fitted depth laws."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from depthlab.core.figure_style import plain_log_ticks  # noqa: E402
from depthlab.stages.toy.teacher_student import TEACHER_KINDS  # noqa: E402


def published_toy_exponents() -> dict:
    """{teacher kind: (a, paper)}: Liu et al.'s converged depth exponents."""
    from depthlab.core.paper_values import PAPER_VALUES

    return {
        kind: (PAPER_VALUES[f"liu_toy_{kind}"].value, PAPER_VALUES[f"liu_toy_{kind}"].paper)
        for kind in TEACHER_KINDS
        if f"liu_toy_{kind}" in PAPER_VALUES
    }


def replicate_exponents(fit: dict) -> list[float]:
    """Per-replicate depth exponents of one fit when fit.json carries them (`replicates`: a list
    of numbers or of records with `a`); [] otherwise."""
    found = fit.get("replicates") or fit.get("replicate_exponents") or []
    return [float(r["a"] if isinstance(r, dict) else r) for r in found]


def consistent_with(fit: dict, value: float, sigmas: float = 2.0, relative: float = 0.1) -> bool:
    """The measured exponent is within `sigmas` standard errors (replicate spread when there are
    replicates, else the fit's standard error) or within `relative` of `value`; a very precise
    fit of a nearly converged run still counts."""
    replicates = replicate_exponents(fit)
    spread = np.std(replicates, ddof=1) if len(replicates) > 1 else fit.get("a_se", np.nan)
    spread = spread if np.isfinite(spread) else 0.0
    return bool(abs(fit["a"] - value) <= max(sigmas * spread, relative * abs(value)))


def exponent_label(fit: dict) -> str:
    """`T = 1: a = 0.44 ± 0.12` (± the fit's standard error, or the replicates' range)."""
    replicates = replicate_exponents(fit)
    text = f"T = {fit['temperature']:.3g}: a = {fit['a']:.2f}"
    if len(replicates) > 1:
        return text + f" (replicates {min(replicates):.2f} to {max(replicates):.2f})"
    if np.isfinite(fit.get("a_se", np.nan)):
        return text + f" ± {fit['a_se']:.2f}"
    return text


def _protocol_text(protocol) -> str:
    if not protocol:
        return ""
    if isinstance(protocol, dict):
        return "protocol: " + ", ".join(f"{k} {v}" for k, v in protocol.items())
    return f"protocol: {protocol}"


def plot_toy(
    losses: pd.DataFrame,
    fits: list[dict],
    angles: dict[str, dict],
    published: dict | None = None,
    protocol=None,
):
    """One panel per teacher kind: test KL vs student depth per temperature (mean over
    replicates, their range as error bars), each fit L = c/l^a + L0 (L0 = 0 for the power form)
    and the published exponent as a dashed slope guide. `published`: {teacher kind: (a, source)}
    (default: paper_values); the title claims agreement only for a temperature whose fitted a is
    within two standard errors or 10% of it (consistent_with). `protocol`: fit.json's training
    protocol, shown if given."""
    published = published_toy_exponents() if published is None else published
    kinds = [k for k in TEACHER_KINDS if k in set(losses["teacher_kind"])]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.8 * len(kinds), 4.6), squeeze=False)
    temperatures = sorted(losses["temperature"].unique())
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(temperatures)))
    for ax, kind in zip(axes[0], kinds):
        kind_fits = []
        for colour, temperature in zip(colours, temperatures):
            group = losses[
                (losses["teacher_kind"] == kind) & (losses["temperature"] == temperature)
            ]
            fit = next(
                f
                for f in fits
                if f["teacher_kind"] == kind and np.isclose(f["temperature"], temperature)
            )
            kind_fits.append(fit)
            stats = group.groupby("student_depth")["test_loss"].agg(["mean", "min", "max"])
            ax.errorbar(
                stats.index,
                stats["mean"],
                yerr=[stats["mean"] - stats["min"], stats["max"] - stats["mean"]],
                fmt="o",
                ms=4,
                color=colour,
                capsize=2,
            )
            grid = np.geomspace(group["student_depth"].min(), group["student_depth"].max(), 100)
            ax.plot(
                grid,
                fit["c"] / grid ** fit["a"] + fit["L0"],
                color=colour,
                label=exponent_label(fit),
            )
        verdict = ""
        if kind in published:
            value, source = published[kind]
            # slope guide through the shallowest student's loss at the highest temperature
            first = losses[
                (losses["teacher_kind"] == kind) & (losses["temperature"] == temperatures[-1])
            ]
            depth0 = first["student_depth"].min()
            loss0 = first[first["student_depth"] == depth0]["test_loss"].mean()
            grid = np.geomspace(depth0, first["student_depth"].max(), 100)
            ax.plot(
                grid,
                loss0 * (grid / depth0) ** -value,
                "k--",
                lw=1,
                label=f"paper ({source}): a = {value:g} when converged",
            )
            agree = [f for f in kind_fits if consistent_with(f, value)]
            verdict = (
                f"\nmeasured a consistent with paper a = {value:g} at T = "
                + ", ".join(f"{f['temperature']:.3g}" for f in agree)
                if agree
                else f"\npaper a = {value:g} (converged) not reached: measured a = "
                + ", ".join(f"{f['a']:.2f}" for f in kind_fits)
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_log_ticks(ax.xaxis, sorted(losses["student_depth"].unique()))
        ax.set_xlabel("student depth l")
        ax.set_ylabel("test KL to teacher")
        angle = angles.get(kind, {}).get("mean_angle_deg", float("nan"))
        ax.set_title(
            f"{kind} teacher ({angles.get(kind, {}).get('teacher_layers', '?')} "
            f"layers, successive-update angle {angle:.1f} deg){verdict}",
            fontsize=9,
        )
        ax.legend(fontsize=7)
    form = fits[0]["form"] if fits else "power"
    law = "L = c/l^a" if form == "power" else "L = c/l^a + L0"
    extra = _protocol_text(protocol)
    replicates = losses["replicate"].nunique() if "replicate" in losses else 1
    spread = (
        f"{replicates} replicates, error bars: their range" if replicates > 1 else "1 replicate"
    )
    fig.suptitle(
        f"Teacher-student toy model: test KL vs student depth, fitted {law} per "
        f"temperature (± standard error of a; {spread})" + (f"\n{extra}" if extra else ""),
        fontsize=10,
    )
    fig.tight_layout()
    return fig
