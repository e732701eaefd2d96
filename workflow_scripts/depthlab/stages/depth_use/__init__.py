"""Depth use (Csordás et al.): skip interventions, depth score, problem scoring, linear maps between models, their jobs and figures."""
