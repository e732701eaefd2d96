"""The data stage: the prepare_data job."""

from __future__ import annotations

import copy
import glob
import os
from pathlib import Path

from depthlab.config.resolved import Resolved
from depthlab.core.errors import ConfigError


def resolve_data(resolved: Resolved, base_dir: Path) -> None:
    config = resolved.config
    data = copy.deepcopy(config["data"])
    if data["source"] == "text_files":
        for index, pattern in enumerate(data["text_files"]["paths"]):  # >= 1: the schema
            if not glob.glob(os.path.expanduser(pattern), recursive=True) and not glob.glob(
                str(base_dir / pattern), recursive=True
            ):
                raise ConfigError(f"data.text_files.paths[{index}]: '{pattern}' matches no file")
    resolved.add(
        "prepare_data",
        "data",
        {"data": data, "seed": config["seed"], "out": resolved.paths.data},
        outputs=[resolved.paths.data],
    )
