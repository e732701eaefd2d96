"""Scaling laws (Liu et al., Besiroglu et al.): the power-law fitter, the fits and their figures."""
