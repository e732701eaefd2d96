"""The teacher-student toy models of Liu et al.: training, exponent fits, figures."""
