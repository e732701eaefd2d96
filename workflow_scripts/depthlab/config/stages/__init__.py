"""One resolver per stage: `resolve_<stage>(resolved[, base_dir])` adds its jobs."""
