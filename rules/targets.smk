# Final targets, built in one place from the rules' outputs: one named target per stage
# (`snakemake pretrain`), one per figure (`snakemake figure_loss_curves`), `figures`, and `all`.


FIGURES = {}
if jobs("plot_loss_curves"):
    FIGURES["loss_curves"] = [rules.plot_loss_curves.output.figure]
for _text_set in jobs("plot_analysis"):
    for _figure, _path in zip(ANALYSIS_FIGURES,
                              expand(rules.plot_analysis.output.figures, job=_text_set)):
        FIGURES[f"analysis_{_text_set}_{_figure}"] = [_path]
for _model in jobs("lens_swaps"):
    FIGURES[f"lens_swaps_{_model}"] = expand(rules.lens_swaps.output.figure, model=_model)
for _fit in jobs("plot_scaling"):
    FIGURES[f"scaling_{_fit}"] = expand(rules.plot_scaling.output.figure, job=_fit)
if jobs("fit_toy"):
    FIGURES["toy_loss_vs_depth"] = [rules.fit_toy.output.figure]
if jobs("plot_pruning"):
    for _figure, _path in zip(PRUNING_FIGURES, rules.plot_pruning.output.figures):
        FIGURES[f"pruning_{_figure}"] = [_path]
if jobs("plot_finetuning"):
    FIGURES["finetuning"] = [rules.plot_finetuning.output.figure]
if jobs("plot_depth_use"):
    for _figure, _path in zip(DEPTH_USE_FIGURES, rules.plot_depth_use.output.figures):
        FIGURES[f"depth_use_{_figure}"] = [_path]

STAGE_TARGETS = {
    "data": expand(rules.prepare_data.output.data),
    "pretrain": expand(rules.pretrain_model.output.model, job=jobs("pretrain_model"))
    + FIGURES.get("loss_curves", []),
    "analysis": expand(rules.analyse_model.output.analysis, zip,
             text_set=RESOLVED.wildcard_values("analyse_model", "text_set"),
             model=RESOLVED.wildcard_values("analyse_model", "model"))
    + expand(rules.plot_analysis.output.figures, job=jobs("plot_analysis"))
    + expand(rules.lens_swaps.output, model=jobs("lens_swaps")),
    "scaling": expand(rules.fit_scaling.output, job=jobs("fit_scaling"))
    + expand(rules.plot_scaling.output.figure, job=jobs("plot_scaling")),
    "pruning": (list(rules.build_lm_tasks.output) if jobs("build_lm_tasks") else [])
    + expand(rules.gather_pruning.output.pruning, job=jobs("gather_pruning"))
    + expand(rules.choose_depth.output.choice, job=jobs("choose_depth"))
    + expand(rules.export_pruned.output.models, job=jobs("export_pruned"))
    + (list(rules.plot_pruning.output.figures) if jobs("plot_pruning") else []),
    "depth_use": (list(rules.make_problems.output) if jobs("make_problems") else [])
    + expand(rules.skip_interventions.output.skip, job=jobs("skip_interventions"))
    + expand(rules.linear_maps.output.maps, job=jobs("linear_maps"))
    + (list(rules.plot_depth_use.output.figures) if jobs("plot_depth_use") else []),
    "toy": expand(rules.train_toy.output.run, zip, kind=RESOLVED.wildcard_values("train_toy", "kind"),
             index=RESOLVED.wildcard_values("train_toy", "index"))
    + (list(rules.fit_toy.output) if jobs("fit_toy") else []),
    "finetune": (
        expand(rules.finetune_model.output.model, job=jobs("finetune_model"))
        + expand(rules.evaluate_finetuned.output.scores, job=jobs("evaluate_finetuned"))
        + [rules.plot_finetuning.output.figure]
    )
    if jobs("finetune_model")
    else [],
    "claims": list(rules.make_claims.output) if jobs("make_claims") else [],
}

for _stage, _targets in STAGE_TARGETS.items():

    rule:
        name:
            _stage
        input:
            _targets,
        localrule: True
        default_target: False


for _name, _targets in FIGURES.items():

    rule:
        name:
            f"figure_{_name}"
        input:
            _targets,
        localrule: True


rule figures:
    input:
        [path for paths in FIGURES.values() for path in paths],
    localrule: True


# `snakemake audit`: the run's results, then every provenance record of the run checked against
# the files on disk (workflow_scripts/audit.py on results/<run>/; one line per problem, one summary
# line; fails when a result was edited since its job wrote it, which a dry run does not notice).
AUDITED_RUN = RESOLVED.paths.root


rule audit:
    input:
        [path for targets in STAGE_TARGETS.values() for path in targets],
    params:
        run=lambda wildcards: AUDITED_RUN,
    log:
        f"{AUDITED_RUN}/logs/audit/audit.log",
    localrule: True
    conda:
        ENVIRONMENT
    shell:
        "python workflow_scripts/audit.py {params.run:q} 2>&1 | tee {log:q}"
