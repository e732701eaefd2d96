#!/usr/bin/env python
"""The claims table: every claim of the four papers the run can test, the paper's value, the
measured value with its interval, the seeds, the scale, a verdict on the paper's statement and
one on its size (depthlab.claims). Two runs' tables: workflow_scripts/compare_claims.py.

Spec (`make_claims` job): the folders and files of every stage output the claims read (models,
data, analysis, pruning, depth-score, linear-map folders; fit.json files), the seed groups and
model pairs to compare, bootstrap settings, out_csv, out_md.
"""

from depthlab.cli import main_guard, start_job


def main() -> None:
    _, spec = start_job(__doc__, "make_claims", required=("out_csv", "out_md"))

    from depthlab.claims import build_claims, input_files, read_run_data, render_markdown
    from depthlab.core.atomic_files import write_dataframe, write_text
    from depthlab.core.provenance import Provenance, sidecar_path

    provenance = Provenance(
        "claims", config=spec, inputs=input_files(spec), seed=spec["bootstrap"]["seed"]
    )
    claims = build_claims(read_run_data(spec))
    write_dataframe(spec["out_csv"], claims)
    write_text(
        spec["out_md"], render_markdown(claims, f"Claims tested by run `{spec['run_name']}`")
    )
    provenance.extra["verdicts"] = claims["verdict"].value_counts().to_dict()
    provenance.extra["size_verdicts"] = claims["size_verdict"].value_counts().to_dict()
    provenance.write(sidecar_path(spec["out_csv"]), sidecar_path(spec["out_md"]))
    for row in claims.itertuples():
        print(f"{row.claim_id}: {row.verdict} ({row.reason}); size: {row.size_verdict}")


if __name__ == "__main__":
    main_guard(main)
