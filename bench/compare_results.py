#!/usr/bin/env python
"""Compare the numbers of two result folders (results/<run>/) for exact equality.

Usage: python bench/compare_results.py BEFORE_DIR AFTER_DIR [--all-json-numbers]

Compared, file by file (a file found in only one of the two folders is a failure):

  analysis/*/*/measures.csv, analysis/*/*/angular_distance_*.csv   every column
  models/*/train_log.csv                every column but the wall-clock one (wall_s)
  models/*/model.safetensors            sha256 of the bytes
  scaling/sweep_points.csv              every column
  scaling/*/fit.json                    estimates and bootstrap intervals
                                        (--all-json-numbers: every number in the file)
  toy/*/T*/losses.csv                   every column
  toy/fit.json                          the fitted exponents (fits) and teacher angles
                                        (--all-json-numbers: every number in the file)

--every-file widens the comparison to every CSV and every safetensors file under the run
(except logs/ and benchmarks/, which hold timings): what a refactor must leave unchanged.

Numbers must be exactly equal (NaN matches NaN); text cells and the set of columns/keys must be
identical. Prints one row per file with the largest absolute difference, then a summary.
--include GLOB ... restricts the comparison to matching relative paths (a partial rerun).
Exit status: 0 all equal, 1 any difference or missing file (or nothing to compare), 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

CSV_PATTERNS = (
    "analysis/*/*/measures.csv",
    "analysis/*/*/angular_distance_*.csv",
    "models/*/train_log.csv",
    "scaling/sweep_points.csv",
    "toy/*/T*/losses.csv",
)
FIT_PATTERNS = ("scaling/*/fit.json",)
TOY_FIT = "toy/fit.json"
WEIGHT_PATTERNS = ("models/*/model.safetensors",)
EVERY_CSV, EVERY_WEIGHT = ("**/*.csv",), ("**/*.safetensors",)
NOT_RESULTS = ("logs/", "benchmarks/")  # timings and job logs, never reproducible
TIMING_COLUMNS = {"wall_s"}  # wall-clock seconds in train_log.csv: never reproducible
# Parse floats exactly (shortest repr round trip): pandas >= 3 does by default and deprecates
# the option; older pandas needs it.
READ_CSV = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


class Difference(Exception):
    """The two files differ in structure (columns, shape, keys, text)."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def compare_csv(before: Path, after: Path) -> float:
    """Largest absolute difference over the numeric cells; Difference on any other mismatch."""
    a, b = pd.read_csv(before, **READ_CSV), pd.read_csv(after, **READ_CSV)
    a = a.drop(columns=[c for c in a.columns if c in TIMING_COLUMNS])
    b = b.drop(columns=[c for c in b.columns if c in TIMING_COLUMNS])
    if list(a.columns) != list(b.columns):
        raise Difference(f"columns differ: {list(a.columns)} vs {list(b.columns)}")
    if a.shape != b.shape:
        raise Difference(f"shape differs: {a.shape} vs {b.shape}")
    worst = 0.0
    for column in a.columns:
        x, y = a[column], b[column]
        numeric = pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y)
        if not numeric:
            if not x.astype(str).equals(y.astype(str)):
                row = int(np.flatnonzero(x.astype(str).to_numpy() != y.astype(str).to_numpy())[0])
                raise Difference(f"column {column!r} row {row}: {x.iloc[row]!r} vs {y.iloc[row]!r}")
            continue
        x, y = x.to_numpy(float), y.to_numpy(float)
        nan_x, nan_y = np.isnan(x), np.isnan(y)
        if (nan_x != nan_y).any():
            row = int(np.flatnonzero(nan_x != nan_y)[0])
            raise Difference(f"column {column!r} row {row}: {x[row]} vs {y[row]} (NaN)")
        both = np.isfinite(x) & np.isfinite(y)
        other = ~both & ~nan_x  # an infinity on either side: must match exactly
        if (x[other] != y[other]).any():
            row = int(np.flatnonzero(other & (x != y))[0])
            raise Difference(f"column {column!r} row {row}: {x[row]} vs {y[row]}")
        if both.any():
            worst = max(worst, float(np.max(np.abs(x[both] - y[both]))))
    return worst


def flatten(value, path: str = "") -> dict:
    """{key path: leaf} of a JSON value; lists of toy fits are keyed by (kind, temperature)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(flatten(item, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            if isinstance(item, dict) and {"teacher_kind", "temperature"} <= set(item):
                key = f"{item['teacher_kind']}@T={item['temperature']!r}"
            else:
                key = str(index)
            out.update(flatten(item, f"{path}[{key}]"))
        return out
    return {path: value}


def compare_leaves(a: dict, b: dict) -> float:
    """Largest absolute difference over numeric leaves; Difference on other mismatches."""
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))
        raise Difference(f"keys differ, e.g. {only[:3]}")
    worst = 0.0
    for key in sorted(a):
        x, y = a[key], b[key]
        is_num = (
            isinstance(x, (int, float))
            and not isinstance(x, bool)
            and isinstance(y, (int, float))
            and not isinstance(y, bool)
        )
        if not is_num:
            if x != y:
                raise Difference(f"{key}: {x!r} vs {y!r}")
            continue
        if math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                raise Difference(f"{key}: {x!r} vs {y!r} (NaN)")
            continue
        if math.isinf(x) or math.isinf(y):
            if x != y:
                raise Difference(f"{key}: {x!r} vs {y!r}")
            continue
        worst = max(worst, abs(float(x) - float(y)))
    return worst


def numbers_only(flat: dict) -> dict:
    return {
        k: v for k, v in flat.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def compare_scaling_fit(before: Path, after: Path, everything: bool) -> float:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    if everything:
        return compare_leaves(numbers_only(flatten(a)), numbers_only(flatten(b)))
    part = {k: a.get(k) for k in ("estimates", "intervals")}
    return compare_leaves(flatten(part), flatten({k: b.get(k) for k in part}))


def compare_toy_fit(before: Path, after: Path, everything: bool) -> float:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    if everything:
        return compare_leaves(numbers_only(flatten(a)), numbers_only(flatten(b)))
    part = {k: a.get(k) for k in ("form", "fits", "teacher_angles_deg")}
    return compare_leaves(flatten(part), flatten({k: b.get(k) for k in part}))


def compare_weights(before: Path, after: Path) -> float:
    x, y = sha256(before), sha256(after)
    if x != y:
        raise Difference(f"sha256 {x[:12]} vs {y[:12]}")
    return 0.0


def matches(root: Path, patterns) -> set[str]:
    return {
        str(p.relative_to(root)) for pattern in patterns for p in root.glob(pattern) if p.is_file()
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", type=Path, help="results/<run>/ folder of the reference run")
    parser.add_argument("after", type=Path, help="results/<run>/ folder to check against it")
    parser.add_argument(
        "--all-json-numbers",
        action="store_true",
        help="compare every number of fit.json files, not only the estimates",
    )
    parser.add_argument(
        "--include",
        nargs="+",
        metavar="GLOB",
        help="only the files whose relative path matches one of these globs "
        "(e.g. 'scaling/*' 'toy/*'), for a partial rerun",
    )
    parser.add_argument(
        "--every-file",
        action="store_true",
        help="every CSV and safetensors file of the run (a refactor's check)",
    )
    args = parser.parse_args(argv)
    for folder in (args.before, args.after):
        if not folder.is_dir():
            parser.error(f"{folder}: not a folder")

    checks = []  # (relative path, kind, compare function)
    csvs, weights = (
        (EVERY_CSV, EVERY_WEIGHT) if args.every_file else (CSV_PATTERNS, WEIGHT_PATTERNS)
    )
    kinds = [
        ("csv", csvs, compare_csv),
        ("fit.json", FIT_PATTERNS, lambda a, b: compare_scaling_fit(a, b, args.all_json_numbers)),
        ("toy fit", (TOY_FIT,), lambda a, b: compare_toy_fit(a, b, args.all_json_numbers)),
        ("sha256", weights, compare_weights),
    ]
    for kind, patterns, compare in kinds:
        for rel in sorted(matches(args.before, patterns) | matches(args.after, patterns)):
            if args.include and not any(fnmatch.fnmatch(rel, g) for g in args.include):
                continue
            if rel.startswith(NOT_RESULTS):
                continue
            checks.append((rel, kind, compare))

    rows, failed = [], 0
    for rel, kind, compare in checks:
        a, b = args.before / rel, args.after / rel
        if not a.is_file() or not b.is_file():
            status, detail = "MISSING", f"only in {'before' if a.is_file() else 'after'}"
        else:
            try:
                worst = compare(a, b)
                status = "equal" if worst == 0.0 else "DIFFERENT"
                detail = f"{worst:.3g}"
            except Difference as error:
                status, detail = "DIFFERENT", str(error)
            except Exception as error:  # an unreadable file is a failure, reported as such
                status, detail = "ERROR", f"{type(error).__name__}: {error}"
        failed += status != "equal"
        rows.append((rel, kind, status, detail))

    width = max([len(r[0]) for r in rows] + [4])
    print(f"{'file':<{width}}  {'kind':<8}  {'status':<9}  max |diff| / detail")
    for rel, kind, status, detail in rows:
        print(f"{rel:<{width}}  {kind:<8}  {status:<9}  {detail}")
    print(
        f"\n{len(rows)} files compared, {len(rows) - failed} equal, {failed} differing, "
        f"missing or unreadable ({args.before} vs {args.after})"
    )
    if not rows:
        print("no result files found in either folder", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
