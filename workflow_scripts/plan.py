#!/usr/bin/env python
"""Print the cost plan of a config as markdown: the assumptions (config `cluster.gpu` and
`cluster.sizing`), then per rule and per job the GPUs, GPU memory per GPU, host memory, time
limit, estimated wall time and GPU-hours, and disk each job requests (depthlab/plan/resource_plan.py),
with the totals. Offline: hub models are sized from depthlab/plan/hub_architectures.yaml.

The config files merge left to right, as Snakemake's --configfile; --config overrides as
Snakemake's --config. A config without cluster.gpu lists its stages' resources.

A config with `cluster.max_runtime` (hours) is refused when a job's time limit exceeds it: the
error names the job and the key to change.

--calibrate gpu_check.json --write OVERLAY prices the plan from measurement: it writes OVERLAY, a
config file setting cluster.gpu to the GPU workflow_scripts/gpu_check.py measured (its peaks and
each job family's utilisation; depthlab/plan/calibration.py), prints the plan of CONFIG + OVERLAY
and, on stderr, the total GPU-hours before and after. Run the workflow with the same files:
snakemake --configfile CONFIG OVERLAY -- all.

Examples:
  python workflow_scripts/plan.py config/paper.yaml --summary --gpus 64
  python workflow_scripts/plan.py config/paper.yaml --summary \
      --calibrate results/gpu_check/gpu_check.json --write config/calibrated/my_cluster.yaml
"""

import argparse
import sys

from depthlab.cli import fail, main_guard
from depthlab.config import apply_overrides, load_config, merge, resolve
from depthlab.plan.calibration import calibration, check_target, write_overlay
from depthlab.plan.plan_tables import markdown, totals


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
    parser.add_argument(
        "--calibrate",
        metavar="GPU_CHECK_JSON",
        help="gpu_check.json of workflow_scripts/gpu_check.py: write its measured GPU into the "
        "overlay --write names and print the plan with it",
    )
    parser.add_argument(
        "--write",
        metavar="OVERLAY",
        help="with --calibrate: the config overlay to write (a new file, or one --calibrate wrote)",
    )
    args = parser.parse_args()
    if args.gpus is not None and args.gpus < 1:
        parser.error(f"--gpus: at least 1 (got {args.gpus})")
    if (args.calibrate is None) != (args.write is None):
        parser.error("--calibrate and --write go together")
    malformed = [item for item in args.config if "=" not in item]
    if malformed:
        fail(f"--config {malformed[0]}: not KEY=VALUE (e.g. pretrain.steps=100)")
    overrides = dict(item.split("=", 1) for item in args.config)
    config = apply_overrides(load_config(*args.configs), overrides)
    if args.calibrate is not None:
        target = check_target(args.write, args.configs)
        before = totals(resolve(config).resource_plan)["gpu_hours"]
        gpu = calibration(args.calibrate, config, args.configs)
        # merged as the written file will be (before --config), and resolved before writing:
        # an overlay that fails the schema or the plan's checks is not written
        files = merge(load_config(*args.configs), {"cluster": {"gpu": gpu}})
        config = apply_overrides(files, overrides)
    resolved = resolve(config)
    if args.calibrate is not None:
        write_overlay(target, gpu, args.calibrate)
        after = totals(resolved.resource_plan)["gpu_hours"]
        print(
            f"wrote {target}: {gpu['source']}\nest. GPU-hours: {before:,.1f} with the config's "
            f"values, {after:,.1f} calibrated",
            file=sys.stderr,
        )
    print(markdown(resolved.resource_plan, per_job=not args.summary, gpu_count=args.gpus), end="")


if __name__ == "__main__":
    main_guard(main)
