"""A provenance record names the library its job ran (issue 51, point 2): the checkout's own
`workflow_scripts/depthlab`, the one this process imported. tests/workflow/test_own_checkout.py
checks it from a second checkout that the venv does not install."""

from pathlib import Path

import depthlab
from depthlab.core.provenance import Provenance
from local_snakemake import ROOT


def test_a_record_names_the_library_this_process_imported():
    record = Provenance("probe", config={}).record()
    assert Path(record["library"]) == Path(depthlab.__file__).resolve().parent
    assert Path(record["library"]) == (ROOT / "workflow_scripts" / "depthlab").resolve()
