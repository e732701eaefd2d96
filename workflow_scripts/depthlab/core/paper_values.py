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
# "Removable at a fixed loss": the angular block of n layers costs at most this much validation
# loss (nats) over the intact model: a tenth of a nat, under 11% in perplexity.
COD_REMOVABLE_LOSS = 0.1
# Two models' removable shares of their layers differ when the larger's exceeds the smaller's by
# more than this (one layer of SmolLM2's 30 is 0.033).
COD_REMOVABLE_SHARE_NEGLIGIBLE = 0.02
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
# COD_DELTA_P_NEGLIGIBLE.
COD_SFT_GAIN_NEGLIGIBLE = 0.005
# v1 Table 3: average accuracy over its tasks after the same supervised fine-tuning, Pre-LN vs
# LNS, for LLaMA-250M and LLaMA-1B (in points).
COD_SFT_PRE_LN = (36.93, 43.01)
COD_SFT_LNS = (43.14, 44.87)
# The gain per size as a fraction of accuracy (0.0621, 0.0186), and the size band: the range of
# the two gains widened by a factor 2 on each side, as COD_LNS_GAIN_BAND is.
COD_SFT_GAINS = tuple((q - p) / 100 for p, q in zip(COD_SFT_PRE_LN, COD_SFT_LNS))
COD_SFT_GAIN_BAND = (min(COD_SFT_GAINS) / 2, max(COD_SFT_GAINS) * 2)
# Table 2 (LLaMA-130M, perplexity) compares LNS with schemes beyond Table 1's. Sandwich-LN
# (CogView) normalises each sub-layer's input and its output before the residual add, which is
# this code's peri_ln placement (Kim et al.'s Peri-LN); the two papers' recipes differ elsewhere
# (initialisation, learning rate), so the row compares the ranking, never the digits.
# The schemes the paper compares LNS with, by this code's name, and where (cod_lns_best compares
# only these; a scheme the paper did not train with LNS is no test of "LNS beats the others").
COD_COMPARED_SCHEMES = {
    "pre_ln": "Table 1",
    "post_ln": "Table 1",
    "deepnorm": "Table 1",
    "mix_ln": "Table 1",
    "scaled_init": "Table 2",
    "peri_ln": "Table 2, as Sandwich-LN",
}
COD_TABLE2_PPL_130M = {
    "lns": 25.76,
    "sandwich_ln": 26.51,
    "admin": 27.91,
    "group_ln": 28.01,
}

# ---------------------------------------------------------------------------------------------
# Gromov et al. 2025 (arXiv 2403.17887)

# 0.005 nats of validation loss (0.5% perplexity): far below the accuracy collapse of Fig. 1-2
# (published LMs; models trained here use LEARNED_SHARE_NEGLIGIBLE of what they learned).
GROMOV_GAP_NEGLIGIBLE = 0.005
# The block sizes the paper's comparison covers: up to about half the layers (its QA accuracy
# collapses near there; beyond it every strategy is at chance). The block rows average over
# n = 1 .. L * GROMOV_MAX_FRACTION.
GROMOV_MAX_FRACTION = 0.5
# QA holds while HellaSwag and math decline: over the removal fractions up to
# GROMOV_MAX_FRACTION, the mean normalised drop of the early-degrading tasks minus that of the QA
# tasks exceeds 5% of the tasks' margin above chance (a drop as a share of intact - chance, so a
# task near chance and one far above it are on one scale).
GROMOV_QA_MATH_NEGLIGIBLE = 0.05
# The angular block lies deep: the mean over n = 1 .. GROMOV_MAX_FRACTION * L of where the block
# of n layers with the smallest d(x^l, x^(l+n)) starts, l* / (L - n) (0: at the front, 1: ending
# at the last layer), above the middle of the places it can start.
GROMOV_DEEP_BLOCK_ABOVE = 0.5
# The paper's grouping of its lm-eval tasks (a task counts by its name or an lm-eval subtask
# `<name>_...`; other tasks are in neither group): QA that holds until a model-dependent fraction
# of the layers is removed and then collapses (MMLU, BoolQ), and the tasks that degrade from
# the first layers removed (HellaSwag, GSM8K).
GROMOV_QA_HOLD_TASKS = ("mmlu", "boolq")
GROMOV_EARLY_DROP_TASKS = ("hellaswag", "gsm8k")
# Chance accuracy per lm-eval task (its name or `<name>_...`): what a model scores that does
# not use the input, from the task's format. MMLU and HellaSwag: one of four choices. BoolQ: the
# majority answer ("yes") of its 3,270 validation questions, 62.2% (Clark et al. 2019's majority
# baseline; uniform guessing, 50%, would put a pruned model that always says "yes" a quarter of
# the way back to the intact one). GSM8K: exact match of a free-form number, 0. A task not named
# here has no known chance: rows that need it say so and are not testable.
GROMOV_TASK_CHANCE = {"mmlu": 0.25, "hellaswag": 0.25, "boolq": 0.622, "gsm8k": 0.0}
# QA holds, then collapses (gromov_qa_collapse): the normalised QA score (score - chance) /
# (intact - chance), 1 intact and 0 at chance, "holds" while its interval lies above
# GROMOV_QA_HOLD_LEVEL (it keeps 90% of its margin above chance) and has "collapsed" once its
# interval lies below GROMOV_QA_CHANCE_LEVEL (within a quarter of that margin of chance).
# Reproduced: it holds at every scored n up to at least GROMOV_QA_HOLD_MIN_FRACTION of the
# layers (the paper's "large fraction", model-dependent: up to half) and has collapsed at a larger
# scored n; not reproduced: it fails to hold at a scored n below that fraction, or has not
# collapsed at a scored n past GROMOV_QA_COLLAPSE_BY of the layers (past the paper's transitions,
# where its QA curves sit at chance).
GROMOV_QA_HOLD_LEVEL = 0.9
GROMOV_QA_CHANCE_LEVEL = 0.25
GROMOV_QA_HOLD_MIN_FRACTION = 0.2
GROMOV_QA_COLLAPSE_BY = 0.75
# After healing the loss degrades smoothly while QA jumps (gromov_healed_loss_smooth): over the
# healed n (the intact model first), the steepness of a curve is its largest step's share of the
# whole change divided by that step's share of the n span (1: a straight line; a step function
# over one gap of k equal gaps: k). Smooth at most GROMOV_SMOOTH_MAX_STEEPNESS, a jump above it.
GROMOV_SMOOTH_MAX_STEEPNESS = 2.0
# the healed n a smoothness claim needs (with the intact model: three steps)
GROMOV_SMOOTH_MIN_HEALED = 3

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
# relative change under 0.05, while first-half skips exceed it. The change is the paper's
# maximum (over the later layers, the future positions and the prompts: the skip stage's `max`),
# not a mean; 0.05 is this table's size for "barely" (the paper prints no number).
CSORDAS_FUTURE_EFFECT_SMALL = 0.05
# From-scratch models "use more depth": a slope under 0.01 of the depth per level (4% over
# 4 levels) is no more depth at all.
CSORDAS_DEPTH_SCORE_SLOPE_NEGLIGIBLE = 0.01
# The mid-depth phase transition: the layer of the logit lens' largest KL drop and the layer
# where the residual cosine changes sign lie "at the same depth" when they are within 10% of
# the model's depth (3 of SmolLM2-135M's 30 layers): the paper reads both off per-layer plots of
# 32-80-layer models, where a few layers' difference is not visible as a different place.
CSORDAS_PHASE_TOLERANCE = 0.1

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
# A toy exponent counts as learned when its interval lies above this: as large as the no-gap
# margin, since two exponents that both lie below the margin are within it of each other whatever
# the teachers (a toy that learned no depth dependence would pass "no gap"); half the independent
# teacher's a_l ≈ 1.
LIU_TOY_LEARNED_MIN = LIU_TOY_UNCONVERGED_MARGIN
# The converged toy's a_l ≈ 3 (tied) and ≈ 1 (independent), Sec. 5, printed without an error:
# read within a factor 1.5 either side, as the ratio band (each is a fit over a few depths).
LIU_TOY_EXPONENT_FACTOR = 1.5
LIU_TOY_EXPONENT_BAND_SOURCE = "our tolerance: a factor 1.5 either side; the paper prints ≈"
# A fitted value against the paper's a ± s (liu.py: Liu's a_l and a_m, Besiroglu's alpha, the
# toy's exponents) is reproduced when the two agree both ways (a inside our interval, our
# estimate inside a ± s), so a refit as precise as the paper's own is not held to a band the paper
# itself would not meet (the refit of the paper's own Chinchilla points is wider than its ± 0.3).
# An interval more than this many times as wide as the band would contain a whatever the data:
# it decides nothing (too wide).
LIU_FIT_MAX_INTERVAL_WIDTH = 2.0
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
    "cod_removable_grows": PaperValue(
        COD,
        "Sec. 2 (layer pruning of pretrained LLMs of several sizes)",
        None,
        "the larger the pretrained Pre-LN LLM, the larger the share of its layers that can be "
        "removed at a fixed loss (more of its deep layers are near identity)",
        derived="Sec. 2's pruning curves of published models of several sizes; no number is "
        "printed",
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
        "Sec. 5 (Table 1; Table 2 at LLaMA-130M)",
        None,
        "LNS reaches a lower perplexity than every other scheme it is compared with (Table 1: "
        "Post-LN, DeepNorm, Mix-LN, Pre-LN, scaled initialisation; Table 2, 130M: Sandwich-LN "
        "26.51, Admin 27.91, Group-LN 28.01 vs LNS 25.76; Peri-LN's placement is "
        "Sandwich-LN's)",
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
        "downstream tasks (v1 Table 3, average accuracy: 250M Pre-LN 36.93 vs LNS 43.14; 1B "
        "43.01 vs 44.87)",
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
        "Abstract; Fig. 1-2 (QA: MMLU, BoolQ) and the HellaSwag and GSM8K results",
        None,
        "QA accuracy (MMLU, BoolQ) holds until a model-dependent fraction of the layers is "
        "removed, while HellaSwag and math (GSM8K) degrade from the first layers removed",
        derived="the paper's QA curves against its HellaSwag and GSM8K curves; no number is "
        "printed",
    ),
    "gromov_healed_loss_smooth": PaperValue(
        GROMOV,
        "Sec. 4 (C4 validation loss with and without healing) against Fig. 1-2 (QA accuracy)",
        None,
        "after healing, the language-modelling loss grows slowly and smoothly with the fraction "
        "of layers removed, while QA accuracy stays flat and then collapses to chance in a sharp "
        "transition",
        derived="the paper's healed-loss curves against its QA curves; no number is printed "
        "(not re-read here)",
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
    "csordas_phase_transition": PaperValue(
        CSORDAS,
        "Sec. 3 (residual cosines and logit lens of Llama 3.1 / Qwen 3)",
        None,
        "pretrained LLMs: a phase transition in the middle of the network: the logit lens' KL "
        "to the final distribution drops sharply at the depth where the cosine of the "
        "sublayers' outputs with the residual stream changes sign",
        quote="layers in the second half contribute much less than those in the first half, "
        "with a clear phase transition between the two halves",
        derived="the common depth is read off the paper's per-layer cosine and logit-lens plots; "
        "no layer number is printed (the quote is the abstract's)",
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
