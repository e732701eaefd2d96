#!/usr/bin/env python
"""Check a result or figure against the checksums its job recorded, then print its provenance
chain back to the data, checking every recorded checksum against the file on disk; exit status 1
when the result was edited (or its record is too old to tell), a checksum no longer matches, an
input is gone, or a commit on the chain was dirty (see depthlab/core/audit.py).

Example: python workflow_scripts/audit.py results/default/figures/loss_curves.png
"""

import sys

from depthlab.core.audit import main

if __name__ == "__main__":
    sys.exit(main())
