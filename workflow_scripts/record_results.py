#!/usr/bin/env python
"""Write the results page of a config, docs/results/<config name>.md: the date, the commit, the
machine (CPU model, cores, memory), Python and torch, the suite's wall time, the claims table and
the job time of every rule (depthlab.claims.results_page).

Run the suite and record it (run this in a fresh clone: the page says which commit ran):

    python workflow_scripts/record_results.py --configfile config/default.yaml

runs `.venv/bin/snakemake --cores all --configfile config/default.yaml`, timing it, with its
output also in results/<run_name>/logs/record_results.log. Or record a run that has finished:

    python workflow_scripts/record_results.py --configfile config/default.yaml --finished \\
        --log suite.log   # ends with '<seconds> s wall', bash's 'real 14m2s' or 'Elapsed time:'

(`--wall-time SECONDS` instead of --log; with neither, the page gives the span of the run's job
records only). The machine lines describe the machine this runs on: record where the suite ran.
To re-render a recorded page (a change of the page's layout) from the same run, keep its date:

    python workflow_scripts/record_results.py --configfile config/default.yaml --finished \
        --results <the run's folder> --log <its>/logs/record_results.log \
        --command '<the command the page shows>' --date '2026-12-05 00:45'
"""

import argparse
import datetime as dt
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_suite(command: list[str], log_path: Path) -> tuple[int, float]:
    """Run the suite, its output to the terminal and to `log_path`; (exit status, wall s)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for line in process.stdout:
            sys.stdout.write(line)
            log.write(line)
        status = process.wait()
        wall = time.monotonic() - start
        # the format wall_time_from_log reads back (--finished --log)
        log.write(f"{wall:.2f} s wall\n")
    return status, wall


def _utc_date(text: str) -> dt.datetime:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=dt.UTC)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: not 'YYYY-MM-DD HH:MM' ({error})") from None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configfile", nargs="+", required=True, metavar="FILE")
    parser.add_argument("--cores", default="all", help="Snakemake's --cores (default: all)")
    parser.add_argument(
        "--finished", action="store_true", help="record the finished run; do not run the suite"
    )
    timing = parser.add_mutually_exclusive_group()
    timing.add_argument("--log", type=Path, help="with --finished: the timed run's log")
    timing.add_argument("--wall-time", type=float, metavar="SECONDS", help="with --finished")
    parser.add_argument(
        "--results",
        type=Path,
        help="with --finished: the run's folder (default: results/<run_name>)",
    )
    parser.add_argument(
        "--command", help="with --finished: the command that ran it, as the page should show it"
    )
    parser.add_argument(
        "--date",
        type=_utc_date,
        help="with --finished: when the run finished, 'YYYY-MM-DD HH:MM' in UTC (default: now)",
    )
    parser.add_argument(
        "--figure",
        nargs="*",
        metavar="FILE",
        help="figures of results/<run>/figures/ (paths under it) to copy beside the page and "
        "show on it with their captions (default: every figure of the run); none: --figure",
    )
    parser.add_argument("--out", type=Path, help="the page (default: docs/results/<config>.md)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="plan only: Snakemake's --dry-run (without --finished); write no page",
    )
    args = parser.parse_args()
    if not args.finished and (
        args.log or args.wall_time is not None or args.results or args.command or args.date
    ):
        parser.error(
            "--log, --wall-time, --results, --command and --date describe a finished run: add "
            "--finished"
        )
    return args


def main() -> int:
    args = parse_args()
    from depthlab.claims import results_page as page
    from depthlab.config import ConfigError, load_config

    try:
        config = load_config(*args.configfile)
        run_name = config["run_name"]
    except ConfigError as error:
        print(f"error: invalid config: {error}", file=sys.stderr)
        return 2
    run_dir = Path("results") / run_name  # as the page names it
    folder = args.results or ROOT / run_dir
    out = args.out or page.page_path(args.configfile, ROOT)
    snakemake = Path(sys.executable).parent / "snakemake"
    command = [str(snakemake), "--cores", args.cores, "--configfile", *args.configfile]
    # each returns an exit status when it stops here, else what the page says of the run
    if args.finished:
        outcome = finished_run(args, folder, out)
    else:
        outcome = timed_run(command, args.dry_run, folder, run_dir)
    if isinstance(outcome, int):
        return outcome
    shown, wall, source, jobs, skipped = outcome
    claims_csv = folder / "claims.csv"
    run = page.Run(
        config_files=list(args.configfile),
        run_dir=str(run_dir),
        command=shown or shlex.join([".venv/bin/snakemake", *command[1:]]),
        wall_s=wall,
        wall_source=source,
        date=args.date or dt.datetime.now(dt.UTC),
        machine=page.machine_info(),
        claims=page.read_claims(claims_csv) if claims_csv.is_file() else [],
        jobs=jobs,
        records=page.read_records(folder),
        skipped_jobs=skipped,
    )
    return write_page(run, args.figure, folder, out, config)


def finished_run(args: argparse.Namespace, folder: Path, out: Path):
    """(command shown, wall s, its source, jobs, skipped jobs) of a run that has finished, or an
    exit status."""
    from depthlab.claims import results_page as page

    if args.dry_run:
        print(f"would read {folder}/ and write {out}")
        return 0
    if not folder.is_dir():
        print(f"error: {folder}: no such run folder", file=sys.stderr)
        return 2
    if args.log:
        wall = page.wall_time_from_log(args.log.read_text())
        if wall is None:
            print(f"error: {args.log}: no wall time line in it", file=sys.stderr)
            return 2
        source = f"from its log (`{args.log.name}`)"
    elif args.wall_time is not None:
        wall, source = args.wall_time, "as given"
    else:
        wall, source = None, "no log given"
    jobs = page.read_benchmarks(folder / "benchmarks")
    return args.command or "not given", wall, source, jobs, 0


def timed_run(command: list[str], dry_run: bool, folder: Path, run_dir: Path):
    """Run the suite and time it: (None: the command as run, wall s, its source, the jobs that
    ran, the jobs that were up to date), or an exit status."""
    from depthlab.claims import results_page as page

    if dry_run:
        return subprocess.run([*command, "--dry-run"], cwd=ROOT).returncode
    since = time.time() - 1  # file times have coarse resolution on some filesystems
    status, wall = run_suite(command, folder / "logs" / "record_results.log")
    if status != 0:
        print(f"error: the suite failed (exit {status}); no page written", file=sys.stderr)
        return status
    every = page.read_benchmarks(folder / "benchmarks")
    jobs = page.read_benchmarks(folder / "benchmarks", since=since)
    if not jobs:
        print(
            f"error: no job ran ({run_dir} was up to date): delete it for a fresh run, or "
            "record it as it is with --finished",
            file=sys.stderr,
        )
        return 1
    return None, wall, "timed by record_results.py", jobs, len(every) - len(jobs)


def write_page(run, figures: list[str] | None, folder: Path, out: Path, config: dict) -> int:
    """Copy the figures beside the page (replacing the last run's) and write it; `figures`:
    paths under the run's figures/ (None: every figure of the run)."""
    from depthlab.claims import results_page as page
    from depthlab.claims.results_page import run_figures

    out.parent.mkdir(parents=True, exist_ok=True)
    beside = out.parent / out.stem
    shown = run_figures(folder / "figures", config) if (folder / "figures").is_dir() else []
    if figures is not None:
        by_path = {figure.path: figure for figure in shown}
        for name in figures:
            if name not in by_path:
                print(f"error: {folder / 'figures' / name}: no such figure", file=sys.stderr)
                return 2
        shown = [by_path[name] for name in figures]
    if beside.is_dir():
        shutil.rmtree(beside)  # the last recorded run's figures
    for figure in shown:
        (beside / figure.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "figures" / figure.path, beside / figure.path)
    run.figures, run.figure_folder = shown, out.stem
    out.write_text(page.render_page(run))
    print(f"wrote {out} ({len(shown)} figures beside it in {beside})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
