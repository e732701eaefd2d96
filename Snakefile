# depthlab: how large language models use their depth, rebuilt as one reproducible workflow.
# Config: config/default.yaml unless --configfile names another (config/test.yaml, config/paper.yaml).
import os
import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, update_config, validate

min_version("9.0")

sys.path.insert(0, str(Path(workflow.basedir) / "workflow_scripts"))
from depthlab.config import ConfigError, resolve_config  # noqa: E402

# No `configfile:` directive: Snakemake would deep-merge it under --configfile, adding the
# default's models to every other config. --config overrides still apply on top of the default.
if "models" not in config:
    _overrides = dict(config)
    config.clear()
    config.update(yaml.safe_load(Path(workflow.basedir, "config/default.yaml").read_text()))
    update_config(config, _overrides)

# Jobs call `python` from the environment Snakemake runs in (the project's venv), also on Slurm.
envvars:
    "PATH",


os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

validate(config, "config/schema.yaml")
try:
    config.update(resolve_config(config))
except ConfigError as error:
    raise WorkflowError(f"invalid config: {error}") from None


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/pretrain.smk"
include: "rules/figures.smk"
include: "rules/scaling.smk"
include: "rules/toy.smk"
include: "rules/analysis.smk"


rule all:
    default_target: True
    input:
        ALL_TARGETS,
