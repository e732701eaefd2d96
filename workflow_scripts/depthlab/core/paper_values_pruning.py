"""Published statements of the depth-pruning methods beyond Gromov et al. (depthlab.core.paper_values
holds the four papers' values, in the same form): Shortened LLaMA's criteria and its continued
pretraining against LoRA (Kim et al. 2024), SLEB's iterative removal (Song et al. 2024), read by
the claims' pruning-method rows and `kim_cpt_vs_lora`. A module of its own so that the four
papers' figures and fits, which import paper_values, do not rerun when these change."""

from __future__ import annotations

from depthlab.core.paper_values import PaperValue

KIM = "Kim et al. 2024 (Shortened LLaMA, arXiv 2402.02834)"
SONG = "Song et al. 2024 (SLEB, arXiv 2402.09025)"

# A loss difference between two criteria below this (nats, mean over the compared n) is no
# difference: Gromov et al.'s negligible gap, so the pruning rows share one threshold.
CRITERIA_GAP_NEGLIGIBLE = 0.005
# Continued pretraining against LoRA is a sign: CPT leaves a lower validation loss than LoRA after
# the same tokens at the most severe pruning healed; the paper states no size in nats this code
# could hold as a band, so the row has no size verdict and its threshold is 0.
KIM_CPT_GAP_NEGLIGIBLE = 0.0
# Kim et al.'s continued pretraining reads a pretraining corpus (billions of tokens); healing that
# reads fewer than 10M tokens is no large-corpus CPT: the row is not testable below it.
KIM_CPT_MIN_TOKENS = 10_000_000

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
    "kim_ppl_vs_taylor_loss": PaperValue(
        KIM,
        "Table 2 / Sec. 4 (LLaMA-1-7B, 20% of the blocks removed, LoRA-healed)",
        None,
        "the PPL criterion leaves a lower perplexity than Taylor+ (WikiText-2 17.66 vs 20.21) "
        "while Taylor+ keeps more zero-shot accuracy (7-task mean 63.49 vs 61.83)",
        derived="the paper's perplexity and accuracy columns, after LoRA healing; here: "
        "validation loss of the healed blocks where the run heals both rankings",
    ),
    "kim_taylor_vs_ppl_tasks": PaperValue(
        KIM,
        "Table 2 / Sec. 4 (LLaMA-1-7B, 20% of the blocks removed, LoRA-healed)",
        None,
        "Taylor+ keeps more zero-shot task accuracy than the PPL criterion (63.49 vs 61.83)",
        derived="the paper's 7-task means after LoRA healing; here: the run's lm-eval tasks, "
        "healed where the run heals both rankings",
    ),
    "song_iterative_vs_one_shot": PaperValue(
        SONG,
        "Sec. 3-4 (the iterative block selection against one-shot metrics)",
        None,
        "removing blocks one at a time, each chosen on the model already pruned, beats ranking "
        "the blocks once by their single-removal effect; training-free, so the paper's numbers "
        "are unhealed, as this row's",
        derived="the paper's argument and its comparisons with one-shot block metrics",
    ),
}
