# Final targets, built in one place from the job families' declarations
# (depthlab.plan.job_families): one named target per stage (`snakemake pretrain`: the `targets`
# outputs of the stage's families), one per figure (`snakemake figure_loss_curves`: every target
# under figures/, named by its path), `figures`, and `all`.


STAGE_TARGETS = {}
for _declared in FAMILIES:
    STAGE_TARGETS.setdefault(_declared.stage, []).extend(family_targets(_declared))

FIGURES = {
    figure_target_name(path): [path]
    for targets in STAGE_TARGETS.values()
    for path in targets
    if figure_target_name(path)
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
