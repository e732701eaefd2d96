"""Data: the corpus and tokenizer, token files, tokenisation as a model saw it, training logs read back, the synthetic and benchmark problem sets."""
