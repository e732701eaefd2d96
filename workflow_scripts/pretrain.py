#!/usr/bin/env python
"""Pretrain one declared model and export it as an HF checkpoint directory.

Runs alone (`python workflow_scripts/pretrain.py --help`) or under
`torchrun --nproc_per_node N workflow_scripts/pretrain.py ...` for DDP (gloo on CPU, nccl on GPU).
Rerunning after a crash resumes from --state-dir.
"""

import argparse
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads must not spin on a shared core

from depthlab.training import pretrain  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--model-config", required=True,
                        help="JSON of the resolved model declaration (kind, norm_scheme, "
                             "architecture, train)")
    parser.add_argument("--data", required=True, help="data stage output folder")
    parser.add_argument("--out", required=True, help="checkpoint folder to write")
    parser.add_argument("--state-dir", required=True, help="folder for resumable training state")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()

    model_decl = json.loads(args.model_config)
    summary = pretrain(args.model_name, model_decl, args.data, args.out, args.state_dir,
                       seed=args.seed, threads=args.threads, progress=not args.no_progress)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
