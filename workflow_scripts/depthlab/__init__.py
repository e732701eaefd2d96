"""depthlab: how large language models use their depth."""
