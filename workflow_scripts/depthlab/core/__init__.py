"""Foundations every layer uses: errors, atomic files, provenance and audit, devices and weight placement, code fingerprints, tracking, figure style, the papers' published values."""
