"""The files of the checkout the library reads by path, each declared once, with the modules
that read it.

A job's inputs and outputs reach it through its spec; these are the other files whose content
decides what library code does. Every such read names its file from here, and `READ_BY` says
which modules read it, so the code fingerprint (depthlab.core.code_fingerprint) adds the file to
the fingerprint of every script whose import closure holds one of them: editing the file reruns
exactly the jobs that read it. tests/unit/core/test_repo_files.py fails on a path walk from
`__file__` anywhere else in the library, on a module loaded by name (import it instead: an
import is what the layer contract and the fingerprint follow), and on a reader of a constant
below that `READ_BY` does not name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# workflow_scripts/depthlab: the library's one path walk from its own location
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# the checkout: its git state goes into provenance records; relative config paths start here
REPO_ROOT = PACKAGE_DIR.parents[1]

# Optional keys' defaults are written once, here (depthlab.settings.defaults)
SCHEMA = REPO_ROOT / "config" / "schema.yaml"
# The figures' caption templates: Snakemake's report renders them, and so does the results page
CAPTIONS = REPO_ROOT / "rules" / "captions"
# NORM_SCHEMES is declared in the self-contained model file (it is copied beside custom-code
# checkpoints and imports torch); torch-free core reads the table from its source
MODELING_SOURCE = PACKAGE_DIR / "models" / "modeling_depthlab.py"
# The pinned config.json values of the hub models the planner sizes offline
HUB_TABLE = PACKAGE_DIR / "plan" / "hub_architectures.yaml"


@dataclass(frozen=True)
class ReadFile:
    """A file (or a folder: every file in it) of the checkout and the library modules that
    read it, dotted below the package (e.g. "settings.defaults")."""

    path: Path
    readers: tuple[str, ...]

    def files(self) -> list[Path]:
        if self.path.is_dir():
            return sorted(p for p in self.path.rglob("*") if p.is_file())
        return [self.path]


READ_BY = (
    ReadFile(SCHEMA, ("settings.defaults",)),
    ReadFile(CAPTIONS, ("claims.results_page",)),
    ReadFile(MODELING_SOURCE, ("core.norm_schemes",)),
    ReadFile(HUB_TABLE, ("plan.model_shapes",)),
)
