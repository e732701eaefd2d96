"""Published values of the two papers beyond the four (depthlab.core.paper_values holds theirs, in
the same form): the tuned lens (Belrose et al. 2023) and layer swaps (Lad et al. 2024), read by
the claims' `lens_swaps` rows. A module of its own so that the four papers' figures and fits,
which import paper_values, do not rerun when these change."""

from __future__ import annotations

from depthlab.core.paper_values import PaperValue

BELROSE = "Belrose et al. 2023 (tuned lens, arXiv 2303.08112)"
LAD = "Lad et al. 2024 (stages of inference, arXiv 2406.19384)"

# Belrose et al.: the tuned lens' KL must be lower than the logit lens' by more than this fraction
# of it at every layer but the last (a relative margin: the logit lens' KL runs from nats in the
# middle of SmolLM2 to thousandths of a nat before the last layer of a 12 x 64 model).
BELROSE_KL_GAP_NEGLIGIBLE = 0.01
# Lad et al.: "most" of the intact top-1 accuracy is more than half of it; the middle layers are
# the positions l with L/4 <= l and l + 1 < L - L/4 (both swapped layers in the middle half).
LAD_MOST = 0.5
LAD_SWAP_BAND = (0.72, 0.95)

PAPER_VALUES = {
    "belrose_tuned_lens_kl": PaperValue(
        BELROSE,
        "Sec. 3 and Fig. 1 / the per-layer KL comparisons of tuned and logit lens",
        None,
        "the tuned lens' KL divergence to the final output distribution is lower than the "
        "logit lens' at every layer but the last (where both are the output)",
        derived="read off the paper's per-layer curves of both lenses",
    ),
    "lad_swap_kept_accuracy": PaperValue(
        LAD,
        "layer-swap experiments (swapping adjacent layers)",
        None,
        "swapping adjacent middle layers keeps 72-95% of the intact model's top-1 accuracy; "
        "swapping the first layer with the second does not keep most of it",
        derived="the 72-95% range issue 34 quotes from the paper's swap results (not re-read "
        "from the paper here); the first-layer statement from its swap curves",
    ),
}
