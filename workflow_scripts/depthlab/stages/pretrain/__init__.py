"""Pretraining: the training job of the six norm schemes, its figures."""
