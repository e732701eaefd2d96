"""Tuned lens and layer swaps (Belrose et al. 2023, Lad et al. 2024): the lens, the swap and deletion variants, the job and its figure."""
