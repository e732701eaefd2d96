#!/usr/bin/env python
"""Train the teacher-student toy models of Liu et al. (2026) for one teacher kind (optionally
only the students of one temperature, --temperature-index).

Students of every configured depth learn one random deep teacher (independent or tied layers)
at every temperature; writes losses.csv (test KL per temperature x depth), teacher.json (the
teacher's successive-update angle statistic) and provenance.json into --out.
"""

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher-kind", required=True, choices=["independent", "tied"])
    parser.add_argument("--toy-config", required=True,
                        help='JSON: the config\'s toy section, e.g. {"width": 16, "hidden": 64, '
                             '"output_size": 32, "teacher_layers": 32, "student_depths": [2, 4], '
                             '"temperatures": [0.1, 1.0], "steps": 300, "batch_size": 256, '
                             '"lr": 0.003, "eval_batches": 4, "replicates": 1, '
                             '"angle_samples": 512}')
    parser.add_argument("--temperature-index", type=int, default=None,
                        help="train only the students of temperatures[i] (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args()

    import sys

    import torch

    from depthlab.io import atomic_path, write_json
    from depthlab.provenance import Provenance
    from depthlab.toy import run_teacher_kind

    torch.set_num_threads(args.threads)
    settings = json.loads(args.toy_config)
    provenance = Provenance("toy.train", config={"teacher_kind": args.teacher_kind,
                                                 "temperature_index": args.temperature_index,
                                                 **settings}, seed=args.seed)
    losses, angles = run_teacher_kind(args.teacher_kind, settings, args.seed,
                                      log=lambda line: print(line, file=sys.stderr, flush=True),
                                      temperature_index=args.temperature_index)
    with atomic_path(args.out, is_dir=True) as tmp:
        losses.to_csv(tmp / "losses.csv", index=False)
        write_json(tmp / "teacher.json", angles)
        provenance.write(tmp / "provenance.json")
    print(f"{args.teacher_kind} teacher: mean successive-update angle "
          f"{angles['mean_angle_deg']:.2f} deg; {len(losses)} students -> {args.out}")


if __name__ == "__main__":
    main()
