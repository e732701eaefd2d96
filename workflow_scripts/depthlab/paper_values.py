"""Published values of the four papers that the workflow compares against (claims table,
figures). One entry per value: which paper, where in it, the value and what it means.

`value` is a number (with `error`, its ± when the paper gives one), a tuple of numbers (one per
model size) or, for a purely qualitative claim, None (the `note` says what the paper shows).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

COD = "Sun et al. 2025 (Curse of Depth)"
GROMOV = "Gromov et al. 2025"
CSORDAS = "Csordás et al. 2025"
LIU = "Liu et al. 2026"
BESIROGLU = "Besiroglu et al. 2024"


@dataclass(frozen=True)
class PaperValue:
    paper: str
    source: str  # figure / table / section
    value: Any
    note: str
    error: float | None = None

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


PAPER_VALUES: dict[str, PaperValue] = {
    # Curse of Depth: LLaMA-130M / 250M / 350M / 1B pretrained on C4.
    "cod_ppl_pre_ln": PaperValue(
        COD, "Table 1", (26.73, 21.92, 19.58, 17.02),
        "Pre-LN validation perplexity, LLaMA-130M / 250M / 350M / 1B on C4"),
    "cod_ppl_lns": PaperValue(
        COD, "Table 1", (25.76, 20.35, 18.20, 15.71),
        "LayerNorm Scaling validation perplexity, LLaMA-130M / 250M / 350M / 1B on C4"),
    "cod_variance_growth": PaperValue(
        COD, "Fig. 3 / Sec. 3", None,
        "Pre-LN hidden-state variance grows with depth (exponentially in the bound); LNS keeps "
        "it growing at most polynomially"),
    "cod_angular_distance": PaperValue(
        COD, "Fig. 1 / Sec. 2", None,
        "deep Pre-LN layers have small angular distance to the next layer (near identity); "
        "LNS keeps deep layers distinct"),
    "cod_delta_p": PaperValue(
        COD, "Fig. 1 / Fig. 4", None,
        "removing one deep Pre-LN layer barely changes the score (small ΔP); with LNS deep "
        "layers matter more"),
    # Gromov et al.: Llama-2-70B and smaller open models, MMLU / BoolQ / C4 loss.
    "gromov_block_vs_baseline": PaperValue(
        GROMOV, "Fig. 1 / Fig. 2", None,
        "the angular-distance block choice keeps accuracy better than dropping the deepest "
        "layers; QLoRA healing recovers most of the loss"),
    # Csordás et al.
    "csordas_linear_maps": PaperValue(
        CSORDAS, "Sec. 5 (linear maps)", None,
        "a shallow model's layer maps best onto the deep model's layer at the same relative "
        "depth"),
    "csordas_depth_score": PaperValue(
        CSORDAS, "Sec. 4 (depth score)", None,
        "the depth score does not increase with problem difficulty (harder problems do not use "
        "more layers)"),
    # Liu et al.: the decomposed law L = c_m/m^a_m + c_l/l^a_l + c_D/D^a_D + L0.
    "liu_a_l": PaperValue(LIU, "Sec. 4 (Chinchilla fit)", 1.2,
                          "depth exponent a_l ± bootstrap error on the Chinchilla points",
                          error=0.3),
    "liu_a_m": PaperValue(LIU, "Sec. 4 (Chinchilla fit)", 1.0, "width exponent a_m ≈ 1"),
    "liu_a_D": PaperValue(LIU, "Sec. 4 (Chinchilla fit)", 0.3, "data exponent a_D ≈ 0.3"),
    "liu_toy_independent": PaperValue(
        LIU, "Sec. 5 (teacher-student)", 1.0,
        "depth exponent a_l ≈ 1 for a teacher with independent layers"),
    "liu_toy_tied": PaperValue(
        LIU, "Sec. 5 (teacher-student)", 3.0,
        "depth exponent a_l ≈ 3 for a teacher with tied layers, once converged"),
    # Besiroglu et al. (Chinchilla replication): L = E + A/N^alpha + B/D^beta.
    "besiroglu_alpha": PaperValue(BESIROGLU, "Eq. 4 (replication fit)", 0.3478,
                                  "parameter exponent alpha of the refitted Chinchilla law"),
    "besiroglu_beta": PaperValue(BESIROGLU, "Eq. 4 (replication fit)", 0.3658,
                                 "data exponent beta of the refitted Chinchilla law"),
    "besiroglu_E": PaperValue(BESIROGLU, "Eq. 4 (replication fit)", 1.8172,
                              "irreducible loss E of the refitted Chinchilla law"),
}
