#!/usr/bin/env python
"""Scaling-fit speed: grid fit + 1000-resample bootstrap on the ~200 Chinchilla points.

Target: fit plus 1000 resamples in <= 60 s on the 2-core machine. Runs Liu et al.'s protocol
(decomposed law, 203 points) and Besiroglu et al.'s (reference form, Huber, 240 points) with the
default optimizer (scipy least_squares/TRF, analytic Jacobian, warm-started resamples) and, side
by side on the same resamples, L-BFGS-B with an analytic gradient (fewer resamples, per-resample
ratio printed). Then bootstrap refits from the start grid (full) against warm-started ones on the
same resamples: every parameter's interval side by side and the time ratio.
Usage: python bench/bench_scaling_fit.py [--resamples 1000 --lbfgsb-resamples 100
       --refit-resamples 1000]
"""

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]

from depthlab.stages.scaling.fits import (  # noqa: E402
    FitSettings,
    bootstrap,
    drop_highest_losses,
    fit_law,
    load_points,
)

COLUMNS = {
    "width": "d_model",
    "depth": "n_layers",
    "tokens": "tokens",
    "loss": "loss",
    "params": "params",
}
PROTOCOLS = {
    "liu (decomposed, LSQ, drop 40 incl. ties)": ("decomposed", "least_squares", 40, "inclusive"),
    "besiroglu (reference, Huber, drop 5)": ("reference", "huber", 5, "exact"),
}
TARGET_S = 60.0


def timed_fit_and_bootstrap(frame, law, objective, optimizer, resamples, refit="warm"):
    settings = FitSettings(objective=objective, optimizer=optimizer)
    start = time.perf_counter()
    result = fit_law(frame, law, settings)
    fitted = time.perf_counter()
    boot = bootstrap(result, resamples, "points", 0.95, seed=0, refit=refit)
    done = time.perf_counter()
    return result, boot, fitted - start, done - fitted


def compare_refits(frame, law, objective, resamples):
    """Warm-started and full (start-grid) refits on the same resamples, side by side."""
    result, warm, _, warm_s = timed_fit_and_bootstrap(
        frame, law, objective, "least_squares", resamples, "warm"
    )
    _, full, _, full_s = timed_fit_and_bootstrap(
        frame, law, objective, "least_squares", resamples, "full"
    )
    print(
        f"  bootstrap refits, {resamples} resamples: warm {warm_s:.2f} s ({warm['local_fits']} "
        f"local fits), full {full_s:.2f} s ({full['local_fits']} local fits); "
        f"full / warm = {full_s / warm_s:.1f}x"
    )
    print(
        f"  {'parameter':<10} {'estimate':>10}  {'warm 95% interval':>22}  "
        f"{'full 95% interval':>22}  {'width full/warm':>15}"
    )
    for name in result.law.parameter_names:
        w, f = warm["intervals"][name], full["intervals"][name]
        ratio = (
            (f["high"] - f["low"]) / (w["high"] - w["low"])
            if w["high"] > w["low"]
            else float("nan")
        )
        print(
            f"  {name:<10} {result.estimates[name]:>10.4g}  [{w['low']:>9.4g}, {w['high']:>9.4g}]"
            f"  [{f['low']:>9.4g}, {f['high']:>9.4g}]  {ratio:>15.2f}"
        )
    differing = (warm["samples"] - full["samples"]).abs().max(axis=1) > 1e-6 * (
        1 + full["samples"].abs().max(axis=1)
    )
    print(
        f"  resamples whose refits differ (any parameter, relative 1e-6): "
        f"{int(differing.sum())} of {len(differing)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--lbfgsb-resamples", type=int, default=100)
    parser.add_argument(
        "--refit-resamples",
        type=int,
        default=1000,
        help="resamples of the full vs warm refit comparison (0: skip it)",
    )
    parser.add_argument("--protocol", choices=["all", "liu", "besiroglu"], default="all")
    args = parser.parse_args()

    points = load_points(ROOT / "data/chinchilla/chinchilla_points.csv", COLUMNS)
    print(
        f"threads: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}; load "
        f"{os.getloadavg()[0]:.2f} (the machine is shared: timings are noisy)"
    )
    for name, (law, objective, drop, ties) in PROTOCOLS.items():
        if args.protocol != "all" and not name.startswith(args.protocol):
            continue
        frame = drop_highest_losses(points, drop, ties)
        result, boot, fit_s, boot_s = timed_fit_and_bootstrap(
            frame, law, objective, "least_squares", args.resamples
        )
        total = fit_s + boot_s
        exponent = result.law.exponents[1] if law == "decomposed" else result.law.exponents[0]
        interval = boot["intervals"][exponent]
        print(f"\n{name}: {len(frame)} points")
        print(
            f"  least_squares: fit {fit_s:.2f} s + {args.resamples} resamples {boot_s:.2f} s "
            f"= {total:.2f} s ({total / TARGET_S:.2f} x the {TARGET_S:.0f} s target; "
            f"{boot['failures']} failed resamples)"
        )
        print(
            f"  {exponent} = {result.estimates[exponent]:.4f} "
            f"[{interval['low']:.4f}, {interval['high']:.4f}]"
        )
        _, _, fit_l, boot_l = timed_fit_and_bootstrap(
            frame, law, objective, "lbfgsb", args.lbfgsb_resamples
        )
        per_ls = boot_s / max(args.resamples, 1)
        per_lb = boot_l / max(args.lbfgsb_resamples, 1)
        print(
            f"  lbfgsb: fit {fit_l:.2f} s; per resample {per_lb * 1e3:.1f} ms vs least_squares "
            f"{per_ls * 1e3:.1f} ms (lbfgsb / least_squares = {per_lb / per_ls:.2f})"
        )
        if args.refit_resamples:
            compare_refits(frame, law, objective, args.refit_resamples)


if __name__ == "__main__":
    main()
