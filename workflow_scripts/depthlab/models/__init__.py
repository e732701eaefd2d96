"""Models: the project's decoders (six norm schemes), the architecture adapter every stage reads models through, checkpoint checks and loaders, GGUF conversion."""
