#!/usr/bin/env python
"""Train the teacher-student toy models of Liu et al. (2026) for one teacher kind and one
temperature.

Students of every configured depth learn one random deep teacher (independent or tied layers)
at the job's temperature; writes losses.csv (test KL per depth), teacher.json (the teacher's
successive-update angle statistic) and provenance.json into `out`.

Spec (`train_toy` job, named <kind>/T<index>): teacher_kind, temperature_index, settings (the
config's toy section with `temperatures` expanded to a list), seed, out.
"""

import sys

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "train_toy")

    from depthlab.core.atomic_files import atomic_path, write_json
    from depthlab.core.provenance import Provenance
    from depthlab.stages.toy.teacher_student import run_teacher_kind

    provenance = Provenance("toy.train", config=spec, seed=spec["seed"])
    losses, angles = run_teacher_kind(
        spec["teacher_kind"],
        spec["settings"],
        spec["seed"],
        log=lambda line: print(line, file=sys.stderr, flush=True),
        temperature_index=spec["temperature_index"],
    )
    with atomic_path(spec["out"], is_dir=True) as tmp:
        losses.to_csv(tmp / "losses.csv", index=False)
        write_json(tmp / "teacher.json", angles)
        provenance.write(tmp / "provenance.json")
    print(
        f"{spec['teacher_kind']} teacher: mean successive-update angle "
        f"{angles['mean_angle_deg']:.2f} deg; {len(losses)} students -> {spec['out']}"
    )


if __name__ == "__main__":
    main_guard(main)
