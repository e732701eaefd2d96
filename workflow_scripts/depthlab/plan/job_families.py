"""Every job family of the workflow, declared once: one rule, its script and what the rest of the
workflow needs to know about it.

A job family is a rule (`rules/<file>.smk`), its script (`workflow_scripts/<name>.py`) and the jobs
a stage resolver adds under that name (`Resolved.add(name, ...)`, which refuses an undeclared
name). Everything that used to keep its own list of families reads `FAMILIES`:

  the resource plan     which families load a model, on which stage's resources, GPU or not,
                        the cost model that sizes their jobs and the keys that shorten them
                        (depthlab.plan.resource_plan; rules/common.smk's job_resources)
  the stage targets     `snakemake <stage>` is the `targets` outputs of the stage's families
                        (rules/targets.smk); `snakemake figure_<name>` every figure they write
  the results page      the heading and caption of each family's figures
                        (depthlab.claims.results_page)

Adding a stage: its settings and resolver (depthlab/config/stages/<stage>.py, listed in
depthlab/config/stages/__init__.py's STAGE_RESOLVERS), its rule file and scripts, and one
JobFamily here per rule; tests/workflow/test_job_families.py fails while any of those disagree.

Torch-free: the Snakefile plans with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from depthlab.plan import job_costs as costs
from depthlab.plan import toy_costs, twin_costs
from depthlab.plan.job_costs import Work


@dataclass(frozen=True)
class JobInputs:
    """What a cost model reads of one job: its spec, the models that size it (first = the job's
    own), their shapes and hub downloads, and the run's config."""

    spec: dict
    names: tuple[str, ...]
    shapes: tuple
    downloads: tuple[float, ...]
    config: dict

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def shape(self):
        return self.shapes[0]

    @property
    def download(self) -> float:
        return self.downloads[0]


@dataclass(frozen=True)
class FigureGroup:
    """Where a family's figures lie (results/<run>/figures/<key>...: the first part of their
    path), the results page's heading for them and their caption template
    (rules/captions/<caption>.rst; None: one per figure, `<key>_<figure>.rst`)."""

    key: str
    heading: str
    caption: str | None = None


def _own_model(job: str, spec: dict) -> tuple[str, ...]:
    return (spec["model_name"],)


@dataclass(frozen=True)
class JobFamily:
    """One rule and its script (`workflow_scripts/<name>.py`).

    stage      the stage it belongs to: `snakemake <stage>` builds its `targets`
    resources  the `resources.<key>` its jobs request (threads, memory, runtime, GPUs)
    gpu        whether its jobs run on those resources' GPUs
    work       the cost model of one job (depthlab.plan.job_costs) for a family whose jobs load
               a model: its request is derived from the model's shape where `cluster.gpu` is
               given; None: the job keeps its stage's values
    estimate   for a GPU family without a model to size it from: (plan, spec, assumptions) ->
               None, sets the job plan's FLOPs and estimated hours (its request stays the stage's)
    models     (job, spec) -> the models that size the job (the first is its own)
    targets    the rule's named outputs that are its stage's targets (figures included)
    figures    the results page's heading and caption for the figures it writes
    shorten    the settings that shorten one job (named when it exceeds cluster.max_runtime)
    """

    name: str
    stage: str
    resources: str
    gpu: bool = False
    work: Callable[[JobInputs], Work] | None = None
    estimate: Callable | None = None
    models: Callable[[str, dict], tuple[str, ...]] = _own_model
    targets: tuple[str, ...] = ()
    figures: FigureGroup | None = None
    shorten: str | None = None

    @property
    def script(self) -> str:
        return f"{self.name}.py"


# In the order the stages run (the results page groups figures in this order).
FAMILIES: tuple[JobFamily, ...] = (
    JobFamily("prepare_data", "data", "data", targets=("data",)),
    JobFamily(
        "pretrain_model", "pretrain", "pretrain", gpu=True,
        work=lambda j: costs.pretrain_work(j.name, j.spec, j.shape),
        models=lambda job, spec: (job,),
        targets=("model",),
        shorten="resources.pretrain.gpu (its DDP processes share the tokens)",
    ),
    JobFamily(
        "plot_loss_curves", "pretrain", "figures", targets=("figure",),
        figures=FigureGroup("loss_curves", "Pretraining", "loss_curves"),
    ),
    JobFamily(
        "convert_gguf", "pretrain", "convert",
        work=lambda j: costs.host_copy_work(j.name, j.spec, j.shape, 1, 0),
    ),
    JobFamily(
        "analyse_model", "analysis", "analysis", gpu=True,
        work=lambda j: costs.analysis_work(j.name, j.spec, j.shape, j.download),
        targets=("analysis",),
    ),
    JobFamily(
        "plot_analysis", "analysis", "figures", targets=("figures",),
        figures=FigureGroup("analysis", "Analysis"),
    ),
    JobFamily(
        "lens_swaps", "analysis", "analysis", gpu=True,
        work=lambda j: costs.lens_swaps_work(j.name, j.spec, j.shape, j.download),
        targets=("lens_swaps",),
    ),
    JobFamily(
        "plot_lens_swaps", "analysis", "figures", targets=("figure",),
        figures=FigureGroup("lens_swaps", "Analysis: tuned lens and layer swaps", "lens_swaps"),
    ),
    JobFamily("collect_sweep", "scaling", "fits"),
    JobFamily("fit_scaling", "scaling", "fits", targets=("fit", "samples")),
    JobFamily(
        "plot_scaling", "scaling", "figures", targets=("figure",),
        figures=FigureGroup("scaling", "Scaling laws", "scaling"),
    ),
    JobFamily(
        "train_toy", "toy", "toy", gpu=True, targets=("run",), estimate=toy_costs.estimate_toy_job
    ),
    JobFamily(
        "fit_toy", "toy", "fits", targets=("fit", "figure"),
        figures=FigureGroup("toy_loss_vs_depth", "Toy models", "toy"),
    ),
    JobFamily("build_lm_tasks", "pruning", "fits", targets=("tasks",)),
    JobFamily(
        "prune_model", "pruning", "pruning", gpu=True,
        work=lambda j: costs.pruning_work(
            j.name, j.spec, j.shape, j.config["pruning"]["tasks"], j.download
        ),
        shorten="pruning.lm_eval.per_set_jobs (its lm-eval as one job per removal set), "
        "pruning.n_grid or pruning.val.windows",
    ),
    JobFamily(
        "heal_pruned", "pruning", "pruning", gpu=True,
        work=lambda j: costs.heal_work(
            j.name, j.spec, j.shape, j.config["pruning"]["tasks"], j.download
        ),
        shorten="pruning.healing.steps (or healing.batch_size, seq_len)",
    ),
    JobFamily(
        "evaluate_pruned", "pruning", "pruning", gpu=True,
        work=lambda j: costs.evaluate_work(
            j.name, j.spec, j.shape, j.config["pruning"]["tasks"], j.download
        ),
        shorten="pruning.lm_eval.harness_tasks",
    ),
    JobFamily("gather_pruning", "pruning", "fits", targets=("pruning",)),
    JobFamily("choose_depth", "pruning", "fits", targets=("choice",)),
    JobFamily(
        "export_pruned", "pruning", "pruning",
        work=lambda j: costs.host_copy_work(
            j.name, j.spec, j.shape, len(j.spec["export"]), j.download
        ),
        targets=("models",),
    ),
    JobFamily(
        "plot_pruning", "pruning", "figures", targets=("figures",),
        figures=FigureGroup("pruning", "Pruning"),
    ),
    JobFamily("make_problems", "depth_use", "fits", targets=("problems",)),
    JobFamily(
        "skip_interventions", "depth_use", "depth_use", gpu=True,
        work=lambda j: costs.skip_work(j.name, j.spec, j.shape, j.config["depth_use"], j.download),
        targets=("skip",),
    ),
    JobFamily(
        "linear_maps", "depth_use", "depth_use", gpu=True,
        work=lambda j: costs.linear_maps_work(j.names, j.spec, j.shapes, j.downloads),
        models=lambda job, spec: (spec["source_name"], spec["target_name"]),
        targets=("maps",),
    ),
    JobFamily(
        "plot_depth_use", "depth_use", "figures", targets=("figures",),
        figures=FigureGroup("depth_use", "Depth use"),
    ),
    JobFamily("build_finetune_data", "finetune", "fits"),
    JobFamily(
        "finetune_model", "finetune", "finetune", gpu=True,
        work=lambda j: costs.finetune_work(j.name, j.spec, j.shape),
        models=lambda job, spec: (spec["parent_name"],),  # a fine-tuned model has its parent's shape
        targets=("model",),
    ),
    JobFamily(
        "evaluate_finetuned", "finetune", "finetune", gpu=True,
        work=lambda j: costs.finetune_eval_work(
            j.name, j.spec, j.shape, j.config["finetune"]["data"].get("tasks")
        ),
        models=lambda job, spec: (spec["parent_name"],),
        targets=("scores",),
    ),
    JobFamily(
        "plot_finetuning", "finetune", "figures", targets=("figure",),
        figures=FigureGroup("finetuning", "Fine-tuning", "finetuning"),
    ),
    JobFamily(
        "measure_twin", "twins", "analysis", gpu=True,
        work=lambda j: twin_costs.twins_work(j.names, j.spec["twins"], j.shapes),
        models=lambda job, spec: tuple(spec["twins"]),
        targets=("twins",),
    ),
    JobFamily("make_claims", "claims", "fits", targets=("table", "markdown")),
)  # fmt: skip

BY_NAME: dict[str, JobFamily] = {family.name: family for family in FAMILIES}


def family(name: str) -> JobFamily:
    """The declaration of job family `name` (a KeyError names the declared ones)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(
            f"job family {name!r} is not declared in depthlab/plan/job_families.py "
            f"(declared: {', '.join(BY_NAME)})"
        ) from None


def stages() -> list[str]:
    """Every stage with a job family, in the order the stages run."""
    return list(dict.fromkeys(family.stage for family in FAMILIES))
