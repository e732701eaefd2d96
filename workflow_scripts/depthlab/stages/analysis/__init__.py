"""Analysis: the streamed residual-stream pass, its per-layer measures, the job and its figures."""
