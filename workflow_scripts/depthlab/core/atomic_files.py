"""Atomic output writing: a killed job never leaves a half-written file or folder."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, is_dir: bool = False):
    """Yield a temporary path beside `final`; rename it onto `final` only if the block succeeds.

    The temporary lives in the same folder so the rename is atomic on one filesystem.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{final.name}.tmp-"
    if is_dir:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=final.parent, suffix=final.suffix)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        # mkdtemp/mkstemp create owner-only entries, and so do libraries that write through
        # their own temporary files (safetensors' model.safetensors is 0600): every result must
        # be as readable as any file the user creates, so everything inside is fixed too.
        fix_permissions(tmp)
        if is_dir and final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process umask (read by setting and restoring it: there is no pure getter)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def fix_permissions(path: str | os.PathLike, umask: int | None = None) -> None:
    """Give `path` and, for a folder, everything inside it the mode a plain `open` / `mkdir`
    would: folders 0777 & ~umask, files 0666 & ~umask (0777 & ~umask if any execute bit was set).
    Symbolic links are left alone (chmod would follow them out of the folder)."""
    umask = current_umask() if umask is None else umask
    path = Path(path)

    def fix(entry: Path, is_dir: bool) -> None:
        if is_dir:
            mode = 0o777
        else:
            mode = 0o777 if entry.lstat().st_mode & 0o111 else 0o666
        os.chmod(entry, mode & ~umask)

    if path.is_symlink():
        return
    if not path.is_dir():
        fix(path, False)
        return
    fix(path, True)
    for root, dirnames, filenames in os.walk(path):
        for name in dirnames:
            entry = Path(root, name)
            if not entry.is_symlink():
                fix(entry, True)
        for name in filenames:
            entry = Path(root, name)
            if not entry.is_symlink():
                fix(entry, False)


def json_safe(obj):
    """NaN and infinities -> None, numpy scalars -> Python, recursively (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj


def write_json(path: str | os.PathLike, obj) -> None:
    """Strict JSON (no NaN tokens, which most readers reject), written atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(
            json.dumps(json_safe(obj), indent=2, sort_keys=True, default=str, allow_nan=False)
            + "\n"
        )


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_dataframe(path: str | os.PathLike, frame) -> None:
    """Write a pandas frame as CSV or parquet (by suffix), atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)


def save_figure(path: str | os.PathLike, fig) -> None:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format=path.suffix.lstrip(".") or "png")
