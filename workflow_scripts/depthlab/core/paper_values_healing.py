"""Published values on healing pruned models beyond Gromov et al. (depthlab.core.paper_values
holds the four papers', in the same form): Kim et al. 2024 (Shortened LLaMA) on continued
pretraining against LoRA, read by the claims' `kim_cpt_vs_lora` rows. A module of its own so
that the figures and fits importing paper_values do not rerun when this changes."""

from __future__ import annotations

from depthlab.core.paper_values import PaperValue

KIM = "Kim et al. 2024 (Shortened LLaMA, arXiv 2402.02834)"

# The claim is a sign: continued pretraining leaves a lower validation loss than LoRA after the
# same tokens at the most severe pruning healed; the paper states no size in nats this code
# could hold as a band, so the row has no size verdict and its threshold is 0.
KIM_CPT_GAP_NEGLIGIBLE = 0.0

PAPER_VALUES = {
    "kim_cpt_vs_lora": PaperValue(
        KIM,
        "Abstract; the retraining comparison at severe pruning ratios (arXiv v2)",
        None,
        "continued pretraining of every weight on a large corpus recovers a depth-pruned "
        "model's quality far better than LoRA, the more so the more blocks are removed",
        quote="continued pretraining on a large corpus markedly outperforms LoRA-based tuning, "
        "particularly at severe pruning ratios",
    ),
}
