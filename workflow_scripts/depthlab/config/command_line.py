"""The config of one `snakemake` command line, resolved as the Snakefile resolves it, with every
way it can be wrong as one ConfigError whose message is the line to print.

    workflow_config(files, overrides, base_dir, argv=None) -> Resolved

The Snakefile calls it and exits with the message (`error: ...`, status 1, no traceback); tests
call it directly, the same path without a Snakemake process. What Snakemake parses itself before
the Snakefile runs (the --configfile files, the --config syntax) never reaches it: docs/configs.md
lists those messages.
"""

from __future__ import annotations

import os

from depthlab.config import resolve
from depthlab.config.load import apply_overrides, load_config, repeated_configfile
from depthlab.config.resolved import Resolved
from depthlab.core.errors import ConfigError


def workflow_config(
    config_files, overrides: dict, base_dir: str | os.PathLike, argv=None
) -> Resolved:
    """Every job's spec for `config_files` merged left to right, then `overrides` (Snakemake's
    --config, as it parsed them). `argv`: snakemake's own command line, checked for a repeated
    --configfile (None: not started by `snakemake`, nothing to check). ConfigError: `invalid
    command line: ...` or `invalid config: <key or file>: ...` (with `(in file:line)` where a
    file set the key, `(in --config)` where the command line did)."""
    problem = repeated_configfile(argv) if argv else None
    if problem:
        raise ConfigError(f"invalid command line: {problem}")
    try:
        return resolve(apply_overrides(load_config(*config_files), overrides), base_dir)
    except ConfigError as error:
        raise ConfigError(f"invalid config: {error}") from None
