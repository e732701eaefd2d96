#!/usr/bin/env python
"""Scaling-fit speed: grid fit + 1000-resample bootstrap on the ~200 Chinchilla points.

Target: fit plus 1000 resamples in <= 60 s on the 2-core machine. Runs Liu et al.'s protocol
(decomposed law, 203 points) and Besiroglu et al.'s (reference form, Huber, 240 points) with the
default optimizer (scipy least_squares/TRF, analytic Jacobian, warm-started resamples) and, side
by side on the same resamples, L-BFGS-B with an analytic gradient (fewer resamples, per-resample
ratio printed). Usage: python bench/bench_scaling_fit.py [--resamples 1000 --lbfgsb-resamples 100]
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow_scripts"))

from depthlab.scaling import (FitSettings, bootstrap, drop_highest_losses, fit_law,  # noqa: E402
                              load_points)

COLUMNS = {"width": "d_model", "depth": "n_layers", "tokens": "tokens", "loss": "loss",
           "params": "params"}
PROTOCOLS = {
    "liu (decomposed, LSQ, drop 40 incl. ties)": ("decomposed", "least_squares", 40, "inclusive"),
    "besiroglu (reference, Huber, drop 5)": ("reference", "huber", 5, "exact"),
}
TARGET_S = 60.0


def timed_fit_and_bootstrap(frame, law, objective, optimizer, resamples):
    settings = FitSettings(objective=objective, optimizer=optimizer)
    start = time.perf_counter()
    result = fit_law(frame, law, settings)
    fitted = time.perf_counter()
    boot = bootstrap(result, resamples, "points", 0.95, seed=0)
    done = time.perf_counter()
    return result, boot, fitted - start, done - fitted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--lbfgsb-resamples", type=int, default=100)
    args = parser.parse_args()

    points = load_points(ROOT / "data/chinchilla/chinchilla_points.csv", COLUMNS)
    print(f"threads: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}; load "
          f"{os.getloadavg()[0]:.2f} (the machine is shared: timings are noisy)")
    for name, (law, objective, drop, ties) in PROTOCOLS.items():
        frame = drop_highest_losses(points, drop, ties)
        result, boot, fit_s, boot_s = timed_fit_and_bootstrap(
            frame, law, objective, "least_squares", args.resamples)
        total = fit_s + boot_s
        exponent = result.law.exponents[1] if law == "decomposed" else result.law.exponents[0]
        interval = boot["intervals"][exponent]
        print(f"\n{name}: {len(frame)} points")
        print(f"  least_squares: fit {fit_s:.2f} s + {args.resamples} resamples {boot_s:.2f} s "
              f"= {total:.2f} s ({total / TARGET_S:.2f} x the {TARGET_S:.0f} s target; "
              f"{boot['failures']} failed resamples)")
        print(f"  {exponent} = {result.estimates[exponent]:.4f} "
              f"[{interval['low']:.4f}, {interval['high']:.4f}]")
        _, _, fit_l, boot_l = timed_fit_and_bootstrap(
            frame, law, objective, "lbfgsb", args.lbfgsb_resamples)
        per_ls = boot_s / max(args.resamples, 1)
        per_lb = boot_l / max(args.lbfgsb_resamples, 1)
        print(f"  lbfgsb: fit {fit_l:.2f} s; per resample {per_lb * 1e3:.1f} ms vs least_squares "
              f"{per_ls * 1e3:.1f} ms (lbfgsb / least_squares = {per_lb / per_ls:.2f})")


if __name__ == "__main__":
    main()
