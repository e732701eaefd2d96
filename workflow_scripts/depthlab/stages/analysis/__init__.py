"""Analysis: the per-layer measures of the streamed residual-stream pass (depthlab.stages.residual_stream), the job and its figures."""
