"""Published values of the four papers that the workflow compares against (claims table,
figures). One entry per value: which paper, where in it (section / figure / table of the arXiv
version named below), the value, what it means, and either a short quote or a note saying how
the value is derived from what the paper prints.

`value` is a number (with `error`, its ± when the paper gives one), a tuple of numbers (one per
model size) or, for a purely qualitative claim, None (the `note` says what the paper shows).

Beside each value stand the named margins and bands the claims table judges it with
(depthlab.claims), each with the reason for its size:
  *_NEGLIGIBLE   the threshold x of a positive claim ("the effect > x"): reproduced when the
                 whole interval lies above x, not reproduced when it lies below x (an effect
                 that small is not the paper's effect), not testable when it straddles x
  *_MARGIN       a "no rise / no difference" claim is reproduced only when the whole interval
                 lies inside [-x, x] (an equivalence test)
  *_BAND         the size the paper states: the size verdict asks whether the interval lies
                 inside it; for a parameter value (Liu's a_l, a_m, Besiroglu's alpha) the band
                 decides the main verdict too (an equivalence test), and *_BAND_SOURCE says
                 whether it is the paper's stated uncertainty or a tolerance stated here
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

COD = "Sun et al. 2025 (Curse of Depth, arXiv 2502.05795)"
GROMOV = "Gromov et al. 2025 (arXiv 2403.17887)"
CSORDAS = "Csordás et al. 2025 (arXiv 2505.13898)"
LIU = "Liu et al. 2026 (arXiv 2602.05970)"
BESIROGLU = "Besiroglu et al. 2024 (arXiv 2404.10102)"


@dataclass(frozen=True)
class PaperValue:
    paper: str
    source: str  # section / figure / table
    value: Any
    note: str
    error: float | None = None
    quote: str = ""  # the paper's words, short; empty when `derived` says how it was obtained
    derived: str = ""  # how the value follows from what the paper prints (when not quoted)

    def describe(self) -> str:
        """The value as one short string with its source, for tables and captions."""
        if self.value is None:
            shown = self.note
        elif self.error is not None:
            shown = f"{self.value:g} ± {self.error:g}"
        elif isinstance(self.value, tuple):
            shown = " / ".join(f"{v:g}" for v in self.value)
        else:
            shown = f"{self.value:g}" if isinstance(self.value, float | int) else str(self.value)
        return f"{shown} ({self.source})"


# ---------------------------------------------------------------------------------------------
# Curse of Depth (Sun et al. 2025, arXiv 2502.05795): LLaMA-130M / 250M / 350M / 1B on C4.

COD_PPL_PRE_LN = (26.73, 21.92, 19.58, 17.02)
COD_PPL_LNS = (25.76, 20.35, 18.20, 15.71)
# ln(ppl Pre-LN / ppl LNS) per size = the validation-loss gain in nats: 0.0370, 0.0743, 0.0731,
# 0.0801 for 130M / 250M / 350M / 1B.
COD_LNS_GAIN_NATS = tuple(math.log(p / q) for p, q in zip(COD_PPL_PRE_LN, COD_PPL_LNS))
# The paper's own gains span a factor 2.2 over its four sizes, so the band takes its range
# widened by a factor 2 on each side: a gain outside it is not the paper's size at any scale.
COD_LNS_GAIN_BAND = (min(COD_LNS_GAIN_NATS) / 2, max(COD_LNS_GAIN_NATS) * 2)
# About 1/7 of the paper's smallest gain (0.037 nats): below it LNS changes nothing Table 1 shows.
COD_LNS_GAIN_NEGLIGIBLE = 0.005
# 0.01 per layer of ln Var is under 13% growth across 12 layers: flat on Fig. 4's log scale.
COD_VARIANCE_SLOPE_NEGLIGIBLE = 0.01
# 1% of the angular distance's [0, 1] range: no colour scale of Fig. 2 / Fig. 3a,b shows it.
COD_ANGULAR_NEGLIGIBLE = 0.01
# Published LMs: 0.005 nats of validation loss per removed layer, the loss-side reading of half a
# point of ΔP (the paper's ΔP is in accuracy points on MMLU / ARC-e; no nats are printed).
COD_DELTA_P_NEGLIGIBLE = 0.005
# Models trained here: a loss difference (ΔP as a loss increase, a block choice's or a criterion's
# gain) is judged against what the model learned, not in nats borrowed from another scale: below
# this share of the gap between the unigram loss and the model's final loss it is no effect (a
# 12 x 64 toy that learns 0.4 nats: 0.02 nats; a 130M model that learns ~4 nats: 0.2).
LEARNED_SHARE_NEGLIGIBLE = 0.05
# Table 1 compares final losses after pretraining to about 20 tokens per parameter and more (the
# compute-optimal budget); far below it the loss gap measures how fast each scheme starts, which
# the paper does not claim (the toy's curves coincide up to ~40k tokens and then part).
COD_MIN_TOKENS_PER_PARAM = 20.0
# "LNS outperforms all other schemes": each other scheme's loss - LNS's must exceed this (nats):
# the same resolution as COD_LNS_GAIN_NEGLIGIBLE.
COD_LNS_BEST_NEGLIGIBLE = 0.005
# Post-LN reverses the trend: deep layers farther from identity than shallow ones, mean d(l, l+1)
# over the deeper half - over the shallower half > 0.01 (COD_ANGULAR_NEGLIGIBLE's resolution).
COD_POST_LN_NEGLIGIBLE = 0.01
# Half a point of mean task accuracy (fraction 0.005) after fine-tuning: the same resolution as
# COD_DELTA_P_NEGLIGIBLE; the paper prints no per-size fine-tuning gain this code could hold as
# a band, so the fine-tuning row has no size verdict.
COD_SFT_GAIN_NEGLIGIBLE = 0.005

# ---------------------------------------------------------------------------------------------
# Gromov et al. 2025 (arXiv 2403.17887)

# 0.005 nats of validation loss (0.5% perplexity): far below the accuracy collapse of Fig. 1-2
# (published LMs; models trained here use LEARNED_SHARE_NEGLIGIBLE of what they learned).
GROMOV_GAP_NEGLIGIBLE = 0.005
# The block sizes the paper's comparison covers: up to about half the layers (its QA accuracy
# collapses near there; beyond it every strategy is at chance). The block rows average over
# n = 1 .. L * GROMOV_MAX_FRACTION.
GROMOV_MAX_FRACTION = 0.5
# QA holds while math declines: over the removal fractions up to GROMOV_MAX_FRACTION, the mean
# drop of a math task's score (from the intact model's) minus the mean drop of a QA task's
# exceeds 5 points of accuracy. Tasks are classed by name (lm-eval task names).
GROMOV_QA_MATH_NEGLIGIBLE = 0.05
# The angular block lies deep: the mean over n = 1 .. GROMOV_MAX_FRACTION * L of where the block
# of n layers with the smallest d(x^l, x^(l+n)) starts, l* / (L - n) (0: at the front, 1: ending
# at the last layer), above the middle of the places it can start.
GROMOV_DEEP_BLOCK_ABOVE = 0.5
GROMOV_QA_TASKS = ("mmlu", "boolq", "arc_easy", "arc_challenge", "openbookqa", "piqa", "hellaswag")
GROMOV_MATH_TASKS = ("gsm8k", "math", "minerva_math", "arithmetic", "mathqa")

# ---------------------------------------------------------------------------------------------
# Csordás et al. 2025 (arXiv 2505.13898)

# 0.005 of the relative error ||y_hat - y|| / ||y|| (in [0, ~1]): half a percent of the target
# norm, below the differences between neighbouring target layers the paper's map plots show.
CSORDAS_MAP_ERROR_NEGLIGIBLE = 0.005
# 0.01 of the relative contribution ||h_{l+1} - h_l|| / ||h_l|| (first-half means of real LMs are
# ~0.1-1): a difference this small is no "much less" in the second half.
CSORDAS_HALF_CONTRIBUTION_NEGLIGIBLE = 0.01
# "No rise": every level's depth score within 5% of the model's depth (normalised score,
# /(L - 1)) of the easiest level's; a larger shift moves the score by more than a layer in a
# 20-layer model, a visible use of more layers.
CSORDAS_DEPTH_SCORE_MARGIN = 0.05
# Sec. 3: the first half's layers contribute more than 0.15 of the residual norm, the second
# half's less than 0.05 (the size the paper states; the size verdict asks both).
CSORDAS_FIRST_HALF_ABOVE = 0.15
CSORDAS_SECOND_HALF_BELOW = 0.05
# Skipping a second-half layer "barely" changes the later layers' updates at future tokens: its
# mean relative change (max over the later layers) under 0.05, while first-half skips exceed it.
CSORDAS_FUTURE_EFFECT_SMALL = 0.05
# From-scratch models "use more depth": a slope under 0.01 of the depth per level (4% over
# 4 levels) is no more depth at all.
CSORDAS_DEPTH_SCORE_SLOPE_NEGLIGIBLE = 0.01

# ---------------------------------------------------------------------------------------------
# Liu et al. 2026 (arXiv 2602.05970): L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0.

# The paper's a_l = 1.2 ± 0.3: the band is its stated ± (value ± error). A fitted a_l is
# "reproduced" only when its whole interval lies inside it (an equivalence test).
LIU_A_L_BAND = (0.9, 1.5)
LIU_A_L_BAND_SOURCE = "the paper's stated ± 0.3"
# "a_m ≈ 1" (no error given) read with the same relative width as a_l's ± 0.3 / 1.2 (25%),
# rounded to ± 0.2: our stated tolerance.
LIU_A_M_BAND = (0.8, 1.2)
LIU_A_M_BAND_SOURCE = "our tolerance ± 0.2: the paper gives no error; a_l's relative ± 25%"
# Tied ≈ 3 vs independent ≈ 1: a ratio ≈ 3, read as 2 - 4.5 (a factor 1.5 either side), since
# each exponent is itself a fit over a few student depths.
LIU_TOY_RATIO_BAND = (2.0, 4.5)
# 0.1 of an exponent: a tenth of the independent teacher's a_l ≈ 1, far below the ≈ 2 gap.
LIU_TOY_GAP_NEGLIGIBLE = 0.1
# The toy protocols in which the paper's tied ≈ 3 vs independent ≈ 1 holds: the converged runs
# (Sec. 5); before convergence the paper finds the two exponents close, so an unconverged run is
# tested for no gap: |a_tied - a_indep| inside this margin.
LIU_TOY_CONVERGED_PROTOCOLS = ("converged",)
LIU_TOY_UNCONVERGED_MARGIN = 0.5
# Adjacent updates "nearly orthogonal": the mean angle between dh_l and dh_(l+1) within this many
# radians of pi/2 (|cos| < 0.1, about 6 degrees), over the layer pairs l >= 1 (the first update
# reads the embedding). The paper counts tokens (99.6% near pi/2); the analysis keeps means.
LIU_ORTHOGONAL_MARGIN = 0.1


# ---------------------------------------------------------------------------------------------
# Besiroglu et al. 2024 (arXiv 2404.10102): L = E + A/N^alpha + B/D^beta on Chinchilla's points.

BESIROGLU_ALPHA = 0.3478
# The fit repeats theirs on the same points, and the text quoted here prints no uncertainty for
# alpha: ± 0.05 is our stated tolerance. Within it the compute-optimal data exponent
# beta / (alpha + beta) moves by at most 0.04, less than the 0.05 by which their refit differs
# from Hoffmann et al.'s Approach 3, the discrepancy their paper is about.
BESIROGLU_ALPHA_BAND = (BESIROGLU_ALPHA - 0.05, BESIROGLU_ALPHA + 0.05)
BESIROGLU_ALPHA_BAND_SOURCE = "our tolerance ± 0.05: the paper prints no error for alpha"

PAPER_VALUES: dict[str, PaperValue] = {
    "cod_ppl_pre_ln": PaperValue(
        COD,
        "Table 1",
        COD_PPL_PRE_LN,
        "Pre-LN validation perplexity, LLaMA-130M / 250M / 350M / 1B on C4",
        derived="Table 1, row Pre-LN, columns LLaMA-130M / 250M / 350M / 1B (perplexity, C4)",
    ),
    "cod_ppl_lns": PaperValue(
        COD,
        "Table 1",
        COD_PPL_LNS,
        "LayerNorm Scaling validation perplexity, LLaMA-130M / 250M / 350M / 1B on C4",
        derived="Table 1, row LayerNorm Scaling, same columns",
    ),
    "cod_lns_gain": PaperValue(
        COD,
        "Table 1 (derived)",
        COD_LNS_GAIN_NATS,
        "validation-loss gain of LNS over Pre-LN in nats, LLaMA-130M / 250M / 350M / 1B",
        derived="ln(ppl Pre-LN / ppl LNS) per column of Table 1 (loss = ln perplexity)",
    ),
    "cod_variance_growth": PaperValue(
        COD,
        "Fig. 4 / Sec. 3",
        None,
        "Pre-LN hidden-state variance grows with depth (exponentially in the bound); LNS keeps "
        "it growing at most polynomially",
        quote="its output variance exponentially grows with the model depth (abstract)",
    ),
    "cod_angular_distance": PaperValue(
        COD,
        "Sec. 5.5 (LNS vs Pre-LN); the distance of Eq. 1",
        None,
        "deep Pre-LN layers have small angular distance to the next layer (near identity); "
        "LNS keeps deep layers distinct; the distance is a mean over all tokens (Eq. 1)",
        derived="Sec. 5.5's comparison of LNS with Pre-LN, read off its heatmaps (Sec. 2's "
        "Fig. 2-3 compare Pre-LN with Post-LN); no number is printed",
    ),
    "cod_delta_p": PaperValue(
        COD,
        "Sec. 5.5 (LNS vs Pre-LN, ΔP per removed layer)",
        None,
        "removing one deep Pre-LN layer barely changes the score (small ΔP); with LNS deep "
        "layers matter more",
        derived="Sec. 5.5's layer-removal comparison of LNS with Pre-LN, read off its bar charts "
        "(ΔP in accuracy points; here the validation-loss increase); no number is printed",
    ),
    "cod_delta_p_depth": PaperValue(
        COD,
        "Sec. 2 (Fig. 2-3: pretrained Pre-LN LLMs, ΔP per removed layer)",
        None,
        "in pretrained Pre-LN LLMs removing a deep layer barely changes the score, removing an "
        "early one does",
        derived="Sec. 2's ΔP bar charts of published Pre-LN models; no number is printed",
    ),
    "cod_deep_identity": PaperValue(
        COD,
        "Sec. 2 (Fig. 2-3: pretrained Pre-LN LLMs, angular distance, Eq. 1)",
        None,
        "in pretrained Pre-LN LLMs deep layers are close to identity (small d(l, l+1))",
        derived="Sec. 2's heatmaps of published Pre-LN models; no number is printed",
    ),
    "cod_lns_best": PaperValue(
        COD,
        "Sec. 5 (Table 1 and the comparison with the other normalisation schemes)",
        None,
        "LNS reaches a lower perplexity than every other scheme it is compared with (Post-LN, "
        "DeepNorm, Mix-LN, Pre-LN, scaled initialisation)",
        quote="consistently outperforms",
    ),
    "cod_post_ln_reverse": PaperValue(
        COD,
        "Sec. 2 (Fig. 2: BERT-Large, Post-LN)",
        None,
        "in Post-LN models the trend reverses: the deep layers change the representation more "
        "than the early ones (larger angular distance, larger ΔP)",
        derived="Sec. 2's Post-LN (BERT) heatmap and bars; no number is printed",
    ),
    "cod_sft_gain": PaperValue(
        COD,
        "abstract; Sec. 5 (supervised fine-tuning)",
        None,
        "after the same supervised fine-tuning LNS models stay ahead of Pre-LN on the "
        "downstream tasks",
        quote="this improvement seamlessly carries over to supervised fine-tuning (abstract)",
    ),
    # Gromov et al.: Llama-2-70B and smaller open models, MMLU / BoolQ / C4 loss.
    "gromov_block_vs_baseline": PaperValue(
        GROMOV,
        "Fig. 1 / Fig. 2",
        None,
        "the angular-distance block choice keeps accuracy better than dropping the deepest "
        "layers; QLoRA healing recovers most of the loss",
        derived="read off the accuracy-vs-fraction-dropped curves; no number is printed",
    ),
    "gromov_robust_fraction": PaperValue(
        GROMOV,
        "Abstract; Fig. 1 / Fig. 2",
        0.5,
        "fraction of layers removed up to which QA accuracy barely drops (model-dependent; "
        "beyond it accuracy falls towards chance)",
        quote="minimal degradation of performance on different question-answering benchmarks "
        "until after a large fraction (up to half) of the layers are removed",
    ),
    "gromov_deep_block": PaperValue(
        GROMOV,
        "the angular distance d(x^l, x^(l+n)) over block start l and size n; the deepest-layers "
        "baseline",
        None,
        "the block of n layers whose input and output are closest lies in the deep layers (the "
        "final layer excepted), the observation behind the simple rule of dropping the deepest "
        "layers but the last",
        derived="read off the paper's heatmaps of the angular distance over l and n, whose "
        "minimum over l sits at deep l; no number is printed (not re-read here)",
    ),
    "gromov_qa_vs_math": PaperValue(
        GROMOV,
        "Abstract; Fig. 1-2 (QA: MMLU, BoolQ) and the GSM8K results",
        None,
        "QA-style accuracy holds until about half the layers are removed, while math (GSM8K) "
        "declines from the first layers removed",
        derived="the paper's QA curves against its GSM8K curve; no number is printed",
    ),
    # Csordás et al.
    "csordas_linear_maps": PaperValue(
        CSORDAS,
        "Sec. 5 (linear maps)",
        None,
        "a shallow model's layer maps best onto the deep model's layer at the same relative depth",
        derived="read off the map-error heatmaps (diagonal at equal relative depth)",
    ),
    "csordas_second_half": PaperValue(
        CSORDAS,
        "Abstract; Sec. 3 (relative contribution of each layer to the residual stream)",
        None,
        "pretrained LLMs: the layers of the second half contribute much less to the residual "
        "stream than those of the first half (first half > 0.15, second half < 0.05)",
        quote="layers in the second half contribute much less than those in the first half",
        derived="the sizes 0.15 / 0.05 as issue 43 quotes them from Sec. 3 (not re-read here)",
    ),
    "csordas_future_effect": PaperValue(
        CSORDAS,
        "Sec. 3 (layer-skip interventions, effect on future tokens' computation)",
        None,
        "skipping a second-half layer has almost no effect on the later layers' computation "
        "for future tokens, unlike a first-half layer",
        derived="read off the intervention heatmaps (future scope); no number is printed",
    ),
    "csordas_depth_score": PaperValue(
        CSORDAS,
        "Sec. 4 (depth score, MATH levels / MQuAKE hops)",
        None,
        "pretrained LLMs: the depth score does not increase with problem difficulty (harder "
        "problems do not use more layers)",
        derived="read off the depth-score-vs-difficulty plots of pretrained Llama / Qwen",
    ),
    "csordas_depth_score_scratch": PaperValue(
        CSORDAS,
        "Sec. on MoEUT (models trained from scratch on the task)",
        None,
        "models trained from scratch on the task do use more depth for more computation steps",
        derived="the MoEUT section's depth-score-vs-steps comparison",
    ),
    # Liu et al.: the decomposed law L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0. The data
    # exponent a_D is not stated in the paper's text and is not compared.
    "liu_a_l": PaperValue(
        LIU,
        "Sec. 4 (Chinchilla fit)",
        1.2,
        "depth exponent a_l ± bootstrap error on the Chinchilla points",
        error=0.3,
        derived="a_l = 1.2 ± 0.3 as printed in Sec. 4",
    ),
    "liu_a_m": PaperValue(
        LIU,
        "Sec. 4 (Chinchilla fit)",
        1.0,
        "width exponent a_m ≈ 1",
        derived="a_m ≈ 1 as printed in Sec. 4 (no error given)",
    ),
    "liu_update_orthogonal": PaperValue(
        LIU,
        "Sec. 3 (angles between successive updates)",
        math.pi / 2,
        "adjacent layer updates dh_l, dh_(l+1) are nearly orthogonal (angle ≈ pi/2 for 99.6% "
        "of tokens)",
        derived="the angle and the 99.6% as issue 43 quotes them (not re-read here)",
    ),
    "liu_toy_independent": PaperValue(
        LIU,
        "Sec. 5 (teacher-student)",
        1.0,
        "depth exponent a_l ≈ 1 for a teacher with independent layers",
        quote="loss scales inversely proportional to depth (abstract, for LLMs; the toy's "
        "independent teacher reproduces it)",
    ),
    "liu_toy_tied": PaperValue(
        LIU,
        "Sec. 5 (teacher-student)",
        3.0,
        "depth exponent a_l ≈ 3 for a teacher with tied layers, once converged",
        derived="a_l ≈ 3 for the tied teacher as printed in Sec. 5; the ratio tied / "
        "independent ≈ 3 follows from a_l ≈ 1 for the independent teacher",
    ),
    # Besiroglu et al. (Chinchilla replication): L = E + A/N^alpha + B/D^beta.
    "besiroglu_alpha": PaperValue(
        BESIROGLU,
        "Eq. 4 (replication fit)",
        BESIROGLU_ALPHA,
        "parameter exponent alpha of the refitted Chinchilla law",
        derived="alpha in their Eq. 4",
    ),
    "besiroglu_beta": PaperValue(
        BESIROGLU,
        "Eq. 4 (replication fit)",
        0.3658,
        "data exponent beta of the refitted Chinchilla law",
        derived="beta in their Eq. 4",
    ),
    "besiroglu_E": PaperValue(
        BESIROGLU,
        "Eq. 4 (replication fit)",
        1.8172,
        "irreducible loss E of the refitted Chinchilla law",
        derived="E in their Eq. 4",
    ),
}
