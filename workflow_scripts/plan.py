#!/usr/bin/env python
"""Print the cost plan of a config as markdown: the assumptions (config `cluster.gpu` and
`cluster.sizing`), then per rule and per job the GPUs, GPU memory per GPU, host memory, time
limit, estimated wall time and GPU-hours, and disk each job requests (depthlab/plan/resource_plan.py),
with the totals. Offline: hub models are sized from depthlab/hub_architectures.yaml.

The config files merge left to right, as Snakemake's --configfile; --config overrides as
Snakemake's --config. A config without cluster.gpu lists its stages' resources.

A config with `cluster.max_runtime` (hours) is refused when a job's time limit exceeds it: the
error names the job and the key to change.

Example: python workflow_scripts/plan.py config/paper.yaml --summary --gpus 64
"""

import argparse

from depthlab.cli import main_guard
from depthlab.config import apply_overrides, load_config, resolve
from depthlab.plan.plan_tables import markdown


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="config file(s)")
    parser.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="overrides, as snakemake --config (nested values as YAML: 'cluster={gpu: ...}')",
    )
    parser.add_argument(
        "--summary", action="store_true", help="the per-rule table and totals only, no job rows"
    )
    parser.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="add each rule's wall time when its jobs run side by side on N GPUs",
    )
    args = parser.parse_args()
    if args.gpus is not None and args.gpus < 1:
        parser.error(f"--gpus: at least 1 (got {args.gpus})")
    overrides = dict(item.split("=", 1) for item in args.config)
    resolved = resolve(apply_overrides(load_config(*args.configs), overrides))
    print(markdown(resolved.resource_plan, per_job=not args.summary, gpu_count=args.gpus), end="")


if __name__ == "__main__":
    main_guard(main)
