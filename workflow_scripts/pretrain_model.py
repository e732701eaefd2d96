#!/usr/bin/env python
"""Pretrain one declared model and export it as an HF checkpoint directory.

Spec (`pretrain_model` job): {"model_name", "model": the resolved declaration (kind,
norm_scheme, architecture, train with every default filled in), "data": data stage folder,
"seed", "out": checkpoint folder, "state_dir": resumable training state, "processes": the DDP
processes the workflow starts it with (resources.pretrain), "tracking": progress lines and
TensorBoard}.

By hand: `python workflow_scripts/pretrain_model.py --config config/default.yaml --job lns`;
under `torchrun --standalone --nproc_per_node N workflow_scripts/pretrain_model.py ...` it
trains with DDP (gloo on CPU, nccl on GPU); the workflow does so when resources.pretrain asks
for several processes (`gpu`, or `processes` on CPU). `--threads` are shared among the
processes. Rerunning after a crash resumes from the state folder.
"""

import json

from depthlab.cli import main_guard, stage_parser, start_job


def main() -> None:
    parser = stage_parser(__doc__, "pretrain_model")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar or progress lines"
    )
    args, spec = start_job(__doc__, "pretrain_model", parser=parser)

    from depthlab.stages.pretrain.training import pretrain

    summary = pretrain(
        spec["model_name"],
        spec["model"],
        spec["data"],
        spec["out"],
        spec["state_dir"],
        seed=spec["seed"],
        threads=args.threads,
        progress=not args.no_progress,
        tracking=spec.get("tracking"),
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main_guard(main)
