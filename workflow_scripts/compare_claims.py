#!/usr/bin/env python
"""Compare two runs' claims tables (two machines, two seeds, two commits).

Usage: compare_claims.py RUN_A RUN_B

RUN_A, RUN_B: a claims.csv file or the result folder holding one (results/<run_name>). Prints
every verdict (or size verdict) that changed, every value that lies outside the other run's
interval and every claim only one table has. Exit status 1 when a verdict changed, else 0.
"""

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", help="claims.csv or a result folder holding one")
    parser.add_argument("run_b", help="claims.csv or a result folder holding one")
    args = parser.parse_args()

    import pandas as pd
    from depthlab.claims import (
        claims_table_path,
        compare_claims,
        render_comparison,
        verdicts_changed,
    )

    paths = [claims_table_path(p) for p in (args.run_a, args.run_b)]
    for path in paths:
        if not path.is_file():
            print(
                f"error: {path}: no claims table (run the `claims` target first)", file=sys.stderr
            )
            return 2
    findings = compare_claims(*(pd.read_csv(p, keep_default_na=True) for p in paths))
    sys.stdout.write(render_comparison(findings, str(paths[0]), str(paths[1])))
    return 1 if verdicts_changed(findings) else 0


if __name__ == "__main__":
    sys.exit(main())
