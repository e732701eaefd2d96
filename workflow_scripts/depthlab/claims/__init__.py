"""The claims table: each testable claim of the four papers, the paper's value, what this run
measured (with an interval), a verdict on the paper's statement and a verdict on its size.

Verdicts: `reproduced`, `not reproduced`, `not testable at this scale` (with the reason: a model
that did not learn beyond the unigram loss, a fit parameter at its bound, an interval too wide to
decide, the initialisation already showing (or contradicting) it unmoved by training, one layer
deciding a per-layer profile, removals that cost less than the threshold, too few training
tokens for a final-loss claim), `not testable on these data` (the
same about published data points) and `one seed: indicative` (a claim about a model trained
here, healing included, measured on fewer than MIN_SEEDS seeds: the row shows what the
within-model interval says, and never decides).

Every row is decided on the paper's statement about the trained model. A claim about a model
trained here shows its untrained twin beside it (`initial`: the same seed's initial weights, in
the training precision, measured on the same inputs): the twins' value and trained - untrained
with its paired interval and where training moved it (columns untrained, training_effect*,
training_moved). What the twin may block follows the claim's kind (Claim.kind, rows.TRAINING or
rows.ARCHITECTURE): a claim about training is not testable when the twins already lie past the
threshold on the trained verdict's side (the effect for a pass, the opposite effect for a fail)
and training did not move it; a claim about the architecture is decided on the trained model,
the twin a note (rows.against_initialisation). Every row read off a per-layer profile is
recomputed with each layer left out; a layer that flips the verdict makes the row not decided
(rows.layer_check; column layer_check).
Loss thresholds of models trained here are a share of what the model learned
(rows.learned_threshold); block choices average over n up to about half the layers. The rules,
per claim kind (margins and bands are named constants in paper_values.py):

  effect > x ("LNS grows less", "angular beats deepest"; x the claim's threshold, named in
      paper_values.py and in each row's claim and reason): reproduced when the interval lies
      above x, not reproduced when it lies below x, not testable when it straddles x: decided
      symmetrically, so "not reproduced" is as reachable as "reproduced"
  no rise ("pretrained LLMs: the depth score does not rise with difficulty"), an equivalence
      test over every level: each level-k - easiest-level difference (normalised depth score,
      Bonferroni-adjusted intervals) must lie wholly inside [-margin, margin] to reproduce; one
      lying wholly outside is not reproduced; otherwise not testable (too wide)
  paper value ("a_l = 1.2 +- 0.3", liu.verdict_consistent): reproduced when the two agree both
      ways (the paper's value inside the interval and the estimate inside the paper's band: its
      stated uncertainty, or a tolerance stated in paper_values.py where it gives none) or the
      whole interval lies inside the band; not reproduced when the interval lies wholly
      outside the band; not testable otherwise, when the interval is more than
      LIU_FIT_MAX_INTERVAL_WIDTH band widths wide, or when the estimate or interval touches a
      fit bound (a refit as uncertain as the paper's own fit could never lie wholly inside its
      band)
  size (`size_verdict`, where the paper states a size: the band each claim's declaration names
      in its rule): size reproduced when the interval lies inside the paper's band, size not
      reproduced when it lies wholly outside, not testable otherwise; decided whenever it is
      decidable, also when the main verdict is only too wide (verdicts.verdict_size); "no size
      stated" where the paper gives none

Seeds: a claim about a model trained here is decided over >= MIN_SEEDS seeds, on the mean of the
per-seed values with a t-interval over seeds (n - 1 df), which carries the seed-to-seed variance.
With one seed the row shows that model's own interval (bootstrap, OLS, over layers or n) and with
two the mean; both are `one seed: indicative`. The same gate holds for every claim about models
trained here: a scaling fit of the project's own sweep counts the sweep's seeds, a fine-tuning
claim its pretrained parents (one fine-tuning per pretraining seed; fine-tuning seeds of one
parent are not pretraining seeds). Models not trained here (published checkpoints, published
data points) are decided on their own interval, which must carry the sampling variance of the
documents, windows or items it was measured on (never layers as samples). The toy's replicates
(one teacher seed and fresh students each) are its seeds.

`read_run_data(spec)` reads a run's outputs into `RunData`; `build_claims(data)` is pure, so the
tests plant tables directly. `compare_claims(a, b)` lists what changed between two tables.

Layout: `verdicts` holds the number-only estimates and verdict rules, `measures` the
measurements (pure functions of the stages' tables), `rows` the table's columns, the declaration
of a claim (`Claim`) and the helpers every builder shares; one module per paper (`cod`, `gromov`,
`csordas`, `liu`, `lens`, `pruning_methods`) and one for the published LMs (`pretrained`) keep
each claim's declaration, measurement and rule side by side in its `CLAIMS`, so a reviewer reads
one claim's test in one place and adding a claim touches its module, its test and, for a new
paper value or threshold, paper_values; `table` lists the modules' declarations (`CLAIMS`, the
table's order), runs their builders, renders the table (the docs' table of every claim is
generated from the same declarations) and compares two tables; `run_data` reads a run.
"""

from __future__ import annotations

from depthlab.claims.cod import (
    sft_gains,
)
from depthlab.claims.liu import (
    SIZE_BANDS,
    VALUE_BANDS,
)
from depthlab.claims.measures import (
    block_choice_gap,
    block_gap_of_means,
    bonferroni,
    deep_layer_gap,
    deep_layers,
    delta_p_half_gap,
    depth_score_trend,
    final_val_loss,
    fit_parameter,
    half_gap,
    hardest_level_solved,
    healing_gap_change,
    healing_gap_of_means,
    log_variance_slope,
    map_error_advantage,
    next_layer_distance,
    over_shards,
    single_layer_drop,
    toy_exponent_gaps,
    unigram_entropy,
    window_bootstrap,
)
from depthlab.claims.rows import (
    COLUMNS,
)
from depthlab.claims.run_data import (
    RunData,
    input_files,
    read_run_data,
)
from depthlab.claims.table import (
    build_claims,
    claims_table_path,
    compare_claims,
    render_comparison,
    render_markdown,
    verdicts_changed,
)
from depthlab.core import paper_values as pv

__all__ = [
    "pv",
    "unigram_entropy",
    "final_val_loss",
    "log_variance_slope",
    "deep_layers",
    "deep_layer_gap",
    "next_layer_distance",
    "single_layer_drop",
    "block_choice_gap",
    "healing_gap_change",
    "half_gap",
    "window_bootstrap",
    "delta_p_half_gap",
    "block_gap_of_means",
    "healing_gap_of_means",
    "over_shards",
    "bonferroni",
    "depth_score_trend",
    "hardest_level_solved",
    "map_error_advantage",
    "fit_parameter",
    "toy_exponent_gaps",
    "RunData",
    "input_files",
    "read_run_data",
    "COLUMNS",
    "build_claims",
    "render_markdown",
    "compare_claims",
    "verdicts_changed",
    "render_comparison",
    "claims_table_path",
    "VALUE_BANDS",
    "SIZE_BANDS",
    "sft_gains",
]
