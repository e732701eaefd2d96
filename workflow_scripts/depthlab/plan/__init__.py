"""Planning without torch: stage settings checks, model shapes, the per-job resource plan and its tables, the preflight checks. Importing this package loads no torch."""
