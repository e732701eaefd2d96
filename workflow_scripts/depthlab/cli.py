"""The command-line shape every stage script shares.

A stage script gets its job's complete, resolved settings in one of two ways, and both go through
`depthlab.config`, so a script run by hand uses exactly the values the workflow would:

- `--spec JSON`: the resolved job spec, as the workflow passes it;
- `--config FILE [FILE ...] --job NAME`: the config file(s), resolved here (`--job` lists the
  stage's jobs when omitted).

Plus `--threads` (torch and BLAS threads) and the helpers every script needs: device resolution,
thread setup, library progress bars kept out of job logs, and a clean exit for user errors (a
message naming the key or file, no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from depthlab.core.devices import resolve_device  # noqa: F401  (scripts import it from here)
from depthlab.core.errors import ConfigError, DepthlabError, UserError  # noqa: F401  (scripts import UserError from here)

# What OpenMP, huggingface_hub, datasets and tqdm read when they are imported, so a script sets it
# (job_environment) before anything imports them. Values already in the environment win.
SHARED_CORE_ENV = {
    "OMP_WAIT_POLICY": "PASSIVE"
}  # idle OpenMP threads must not spin on a shared core
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TQDM_DISABLE": "1"}


def job_environment(offline: bool = False) -> None:
    """The environment of a job (start_job sets it first, so a script imports torch and the hub
    libraries only after start_job): OpenMP
    threads that wait passively; `offline` (jobs that load models or lm-eval tasks): no hub or
    datasets download, no tqdm bars."""
    for key, value in {**SHARED_CORE_ENV, **(OFFLINE_ENV if offline else {})}.items():
        os.environ.setdefault(key, value)


def print_line(message: str) -> None:
    """A job's log line, flushed at once (the `log` callback of the stages)."""
    print(message, flush=True)


def stage_parser(doc: str | None, stage: str) -> argparse.ArgumentParser:
    """An argument parser with the spec arguments of `stage` and `--threads`."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--spec", help=f"JSON: the resolved spec of one `{stage}` job, as the workflow passes it"
    )
    source.add_argument(
        "--config",
        nargs="+",
        metavar="FILE",
        help="config YAML file(s), merged left to right; with --job, the job's "
        "spec is resolved exactly as the workflow resolves it",
    )
    parser.add_argument("--job", help=f"with --config: the `{stage}` job to run (omit to list)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch / BLAS threads (the rule's `threads:`)"
    )
    parser.set_defaults(stage=stage)
    return parser


def job_spec(args: argparse.Namespace) -> dict:
    """The resolved spec of the job the arguments name (exits with a message on a bad job)."""
    if args.spec is not None:
        try:
            return json.loads(args.spec)
        except json.JSONDecodeError as error:
            fail(f"--spec: not JSON ({error})")
    from depthlab.config import load_config, resolve

    try:
        jobs = resolve(load_config(*args.config)).jobs(args.stage)
    except ConfigError as error:
        fail(f"invalid config: {error}")
    known = ", ".join(sorted(jobs)) or "(none: the stage is off in this config)"
    if not args.job:  # asked for the list: an answer, not an error
        print(f"`{args.stage}` jobs of this config: {known}")
        sys.exit(0)
    if args.job not in jobs:
        fail(f"--job: {args.job!r} is not a `{args.stage}` job of this config; jobs: {known}")
    return jobs[args.job]


def start_job(doc: str | None, family: str, required=(), parser=None, offline: bool = False):
    """What every stage script does first: set the job's environment (job_environment, before
    the script imports torch or the hub libraries), print its exact command line (the first line
    of the job's log), parse the arguments, get the job's spec, check that it has the `required`
    keys, set threads, tell provenance records the rule, command and config files, and keep
    library progress bars out of the job's log. Returns (args, spec)."""
    job_environment(offline)
    from depthlab.core.provenance import set_job

    command = shlex.join([sys.executable, *sys.argv])
    print(command, file=sys.stderr, flush=True)
    quiet_library_progress_bars()
    from depthlab.core.tracking import quiet_library_messages

    quiet_library_messages()  # bitsandbytes' kernel notice and the like: not about the job
    args = (parser or stage_parser(doc, family)).parse_args()
    spec = job_spec(args)
    set_job(family, command, config_files=getattr(args, "config", None))
    missing = [key for key in required if key not in spec]
    if missing:
        fail(f"spec.{missing[0]}: required (see --help)")
    set_threads(args.threads)
    return args, spec


def start_lm_eval_job(doc: str | None, family: str):
    """start_job (offline) for a job that runs lm-eval: lm-eval loads the task files with
    `datasets`, whose cache goes inside the run (the spec's datasets_cache), set before
    `datasets` is imported."""
    args, spec = start_job(doc, family, offline=True)
    os.environ["HF_DATASETS_CACHE"] = str(spec["datasets_cache"])
    return args, spec


def finish_lm_eval_job(spec: dict, run, done: str) -> None:
    """The rest of a job that runs lm-eval on a model (prune, heal, evaluate), once its script
    imported its stage function `run` (after start_lm_eval_job, which the import must follow;
    the import stays in the script so that its code fingerprint covers the stage): `run` called
    with (spec, device=..., log=print_line), then the line `done` formatted with the spec and
    the result."""
    result = run(spec, device=resolve_device(spec["device"]), log=print_line)
    print_line(f"[{spec['model_name']}] " + done.format(spec=spec, result=result))


# Switches huggingface_hub (and through it transformers) and datasets read when imported, and
# tqdm's default for every bar that does not pass `disable` itself (lm-eval's request building,
# transformers' GGUF de-quantising): read when tqdm is imported, after start_job
QUIET_PROGRESS_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",
}


def quiet_library_progress_bars() -> None:
    """Off with the tqdm bars of huggingface_hub, transformers (e.g. "Writing model shards") and
    datasets, and every tqdm bar that does not force itself on, when stderr is not a terminal: in
    a job log they are carriage-return noise (the job's own progress lines, depthlab.core.tracking,
    stay). Imports nothing: libraries imported later read the environment, those already
    imported are told. (lm-eval's scoring bars follow its `disable_tqdm` arguments instead.)"""
    if hasattr(sys.stderr, "isatty") and sys.stderr.isatty():
        return
    for name, value in QUIET_PROGRESS_ENV.items():
        os.environ.setdefault(name, value)
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        from datasets.utils import disable_progress_bars as disable_datasets_bars

        disable_datasets_bars()


def set_threads(threads: int) -> None:
    """Match torch's and BLAS's threads to the rule's `threads:` (two busy 2-thread jobs on two
    cores run 5-15x slower than two 1-thread jobs)."""
    if threads < 1:
        fail(f"--threads must be at least 1 (got {threads})")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    # torch reads OMP_NUM_THREADS when it is first imported; importing it here only to set its
    # threads would cost every job that never uses it (plots, fits) ~2.5 s
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def fail(message: str) -> None:
    """Exit with a one-line error (status 2), no traceback."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main_guard(main) -> None:
    """Run a script's main; an error the user can fix (any DepthlabError: config, data, model
    folder, device ...) exits with its one-line message instead of a traceback."""
    try:
        main()
    except DepthlabError as error:
        fail(str(error))
