"""Figures of the toy stage: test KL against student depth with the fitted depth laws."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .scaling_plots import plain_log_ticks  # noqa: E402
from .toy import TEACHER_KINDS  # noqa: E402


def plot_toy(losses: pd.DataFrame, fits: list[dict], angles: dict[str, dict]):
    """One panel per teacher kind: test KL vs student depth per temperature, with each fit
    L = c/l^a + L0 (L0 = 0 for the power form) and the teacher's successive-update angle."""
    kinds = [k for k in TEACHER_KINDS if k in set(losses["teacher_kind"])]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.5 * len(kinds), 4.4), squeeze=False)
    temperatures = sorted(losses["temperature"].unique())
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(temperatures)))
    for ax, kind in zip(axes[0], kinds):
        for colour, temperature in zip(colours, temperatures):
            group = losses[(losses["teacher_kind"] == kind)
                           & (losses["temperature"] == temperature)]
            fit = next(f for f in fits if f["teacher_kind"] == kind
                       and np.isclose(f["temperature"], temperature))
            ax.scatter(group["student_depth"], group["test_loss"], color=colour, s=18)
            grid = np.geomspace(group["student_depth"].min(), group["student_depth"].max(), 100)
            ax.plot(grid, fit["c"] / grid ** fit["a"] + fit["L0"], color=colour,
                    label=f"T = {temperature:.3g}: a = {fit['a']:.2f}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_log_ticks(ax.xaxis, sorted(losses["student_depth"].unique()))
        ax.set_xlabel("student depth l")
        ax.set_ylabel("test KL to teacher")
        angle = angles.get(kind, {}).get("mean_angle_deg")
        ax.set_title(f"{kind} teacher ({angles.get(kind, {}).get('teacher_layers', '?')} "
                     f"layers, successive-update angle {angle:.1f} deg)", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Reproduces Liu et al. (2026) teacher-student toy model: loss vs student depth "
                 "(independent teacher a ~ 1, tied teacher a ~ 3 when converged)", fontsize=10)
    fig.tight_layout()
    return fig
