"""Pretraining: the training job of the norm-scheme models, its figures."""
