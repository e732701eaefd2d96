"""Models: the project's decoders (the norm schemes of modeling_depthlab.NORM_SCHEMES), the architecture adapter every stage reads models through, checkpoint checks and loaders, GGUF conversion."""
