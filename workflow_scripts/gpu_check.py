#!/usr/bin/env python
"""The check to run on one GPU node before a cluster run (<= 8 minutes on one H100/H200):
config/test.yaml's whole DAG on the GPU (into results/gpu_check/), the GPU's matmul peaks,
training throughput of depthlab's loop against plain transformers (130M shape, every norm scheme;
1B shape; pure_bf16 and bf16), each job family's share of the bf16 peak (what
`plan.py --calibrate` writes), one analysis on the GPU against float64 on the CPU, QLoRA healing
on CUDA, and the tests marked `cuda`. Prints one table; writes gpu_check.json and gpu_check.md
(GPU, driver, CUDA, torch and package versions, CPU, date, commit) into --out.

Without a GPU it says so and runs the same checks at tiny shapes with a narrowed DAG (the CI
smoke test, tests/workflow/test_gpu_check.py). depthlab/gpu_check.py holds the checks.

Then: python workflow_scripts/plan.py config/paper.yaml --calibrate results/gpu_check/gpu_check.json
      --write config/calibrated/my_cluster.yaml
"""

import argparse
import os
from pathlib import Path

from depthlab.cli import main_guard

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "results" / "gpu_check", help="where the outputs go"
    )
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=2.5,
        help="the throughput runs still to start after this many minutes of throughput "
        "measuring are skipped, and say so (the most telling run first); the DAG comes before "
        "them, the families' rates, the analysis and the cuda tests after them",
    )
    parser.add_argument(
        "--cores", type=int, default=os.cpu_count(), help="Snakemake's --cores for the DAG"
    )
    parser.add_argument("--skip-dag", action="store_true", help="leave out the test DAG")
    args = parser.parse_args()
    from depthlab.gpu_check import run_check

    record = run_check(
        ROOT,
        args.out,
        budget_s=args.budget_minutes * 60,
        cores=args.cores,
        skip_dag=args.skip_dag,
        log=lambda message: print(message, flush=True),
    )
    failed = [
        step
        for step, result in (("DAG", record["dag"]), ("cuda tests", record["cuda_tests"]))
        if result.get("returncode", 0) != 0
    ]
    if failed:
        raise SystemExit(f"gpu_check: {', '.join(failed)} failed (see {args.out / 'gpu_check.md'})")


if __name__ == "__main__":
    main_guard(main)
