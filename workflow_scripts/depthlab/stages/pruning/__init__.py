"""Pruning: layer removal, block choice strategies, healing, lm-eval tasks, speed, the job and its figures."""
