"""One resolver per stage (config section): `resolve_<stage>(resolved[, base_dir])` adds its
jobs, each under a family declared in depthlab.plan.job_families.

STAGE_RESOLVERS is the one list of them, in the order they run: a resolver reads the jobs of the
ones before it (analysis reads the pretrained models, claims every stage's jobs and adds the
untrained twins' measure_twin jobs it compares with)."""

from __future__ import annotations

from depthlab.config.stages.analysis import resolve_analysis
from depthlab.config.stages.claims import resolve_claims
from depthlab.config.stages.data import resolve_data
from depthlab.config.stages.depth_use import resolve_depth_use
from depthlab.config.stages.finetune import resolve_finetune
from depthlab.config.stages.lens_swaps import resolve_lens_swaps
from depthlab.config.stages.pretrain import resolve_pretrain
from depthlab.config.stages.pruning import resolve_pruning
from depthlab.config.stages.scaling import resolve_scaling
from depthlab.config.stages.toy import resolve_toy

# (config section, resolver(resolved, base_dir)); base_dir: where relative paths are read from
STAGE_RESOLVERS = (
    ("data", resolve_data),
    ("pretrain", lambda resolved, base_dir: resolve_pretrain(resolved)),
    ("analysis", resolve_analysis),
    ("lens_swaps", resolve_lens_swaps),
    ("scaling", resolve_scaling),
    ("toy", lambda resolved, base_dir: resolve_toy(resolved)),
    ("pruning", resolve_pruning),
    ("depth_use", resolve_depth_use),
    ("finetune", lambda resolved, base_dir: resolve_finetune(resolved)),
    ("claims", lambda resolved, base_dir: resolve_claims(resolved)),
)
