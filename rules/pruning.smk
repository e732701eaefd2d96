# Pruning stage (Gromov et al.; Curse of Depth Fig. 2): offline lm-eval tasks from the held-out
# corpus; per model, single-layer removal, block removal by the strategies over n, lm-eval
# scores and measured speed-up (prune_model), healing per variant (heal_pruned), the tables
# gathered (gather_pruning); then, as their own seconds-long jobs on those tables, the
# choices made after measuring (auto depth, the export of its pruned models), so changing a
# tolerance or an export never reruns the measurements; figures across models.


rule build_lm_tasks:
    input:
        data=PATHS.data,
    output:
        tasks=directory(PATHS.lm_tasks),
    params:
        script=script("build_lm_tasks.py"),
        code=code_version("build_lm_tasks.py"),
        spec=job_spec("build_lm_tasks"),
    localrule: True
    log:
        log_file("build_lm_tasks", "tasks"),
    benchmark:
        benchmark_file("build_lm_tasks", "tasks")
    conda:
        ENVIRONMENT
    priority: 20  # prune_model reads the tasks
    threads: stage_threads("fits")
    resources:
        **stage_resources("fits", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule prune_model:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("prune_model", wildcards)),
    output:
        measured=directory(PATHS.pruning_measured("{job}")),
    params:
        script=script("prune_model.py"),
        code=code_version("prune_model.py"),
        spec=job_spec("prune_model"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("prune_model")),
    log:
        log_file("prune_model"),
    benchmark:
        benchmark_file("prune_model")
    conda:
        ENVIRONMENT
    priority: 20
    threads: stage_threads("pruning")
    resources:
        **job_resources("prune_model"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


# One job per healed variant (model, strategy, n) and, with pruning.lm_eval.per_set_jobs, per
# removal set lm-eval scores: each depends only on the model and prune_model's removal sets, so
# a cluster runs them side by side, each within its own time limit (workflow_scripts/plan.py).
rule heal_pruned:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("heal_pruned", wildcards)),
    output:
        heal=directory(PATHS.pruning_heal("{model}", "{variant}")),
    params:
        script=script("heal_pruned.py"),
        code=code_version("heal_pruned.py"),
        spec=job_spec("heal_pruned"),
    wildcard_constraints:
        model=wildcard_alternatives(set(RESOLVED.wildcard_values("heal_pruned", "model"))),
        variant=wildcard_alternatives(set(RESOLVED.wildcard_values("heal_pruned", "variant"))),
    log:
        log_file("heal_pruned", "{model}/{variant}"),
    benchmark:
        benchmark_file("heal_pruned", "{model}/{variant}")
    conda:
        ENVIRONMENT
    priority: 20
    threads: stage_threads("pruning")
    resources:
        **job_resources("heal_pruned"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule evaluate_pruned:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("evaluate_pruned", wildcards)),
    output:
        tasks=directory(PATHS.pruning_evaluation("{model}", "{variant}")),
    params:
        script=script("evaluate_pruned.py"),
        code=code_version("evaluate_pruned.py"),
        spec=job_spec("evaluate_pruned"),
    wildcard_constraints:
        model=wildcard_alternatives(set(RESOLVED.wildcard_values("evaluate_pruned", "model"))),
        variant=wildcard_alternatives(set(RESOLVED.wildcard_values("evaluate_pruned", "variant"))),
    log:
        log_file("evaluate_pruned", "{model}/{variant}"),
    benchmark:
        benchmark_file("evaluate_pruned", "{model}/{variant}")
    conda:
        ENVIRONMENT
    priority: 20
    threads: stage_threads("pruning")
    resources:
        **job_resources("evaluate_pruned"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


# The tables every later job reads (sweep, single layers, window losses, healing), from the
# parts above; torch-free and seconds long.
rule gather_pruning:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("gather_pruning", wildcards)),
    output:
        pruning=report(directory(PATHS.pruning("{job}")), patterns=["{table}.csv"],
                       category="Pruning tables", subcategory="{job}",
                       caption="captions/table_pruning.rst"),
    params:
        script=script("gather_pruning.py"),
        code=code_version("gather_pruning.py"),
        spec=job_spec("gather_pruning"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("gather_pruning")),
    localrule: True
    log:
        log_file("gather_pruning"),
    benchmark:
        benchmark_file("gather_pruning")
    conda:
        ENVIRONMENT
    priority: 20
    threads: stage_threads("fits")
    resources:
        **stage_resources("fits", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule choose_depth:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("choose_depth", wildcards)),
    output:
        choice=directory(PATHS.auto_depth("{job}")),
    params:
        script=script("choose_depth.py"),
        code=code_version("choose_depth.py"),
        spec=job_spec("choose_depth"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("choose_depth")),
    localrule: True
    log:
        log_file("choose_depth"),
    benchmark:
        benchmark_file("choose_depth")
    conda:
        ENVIRONMENT
    threads: stage_threads("fits")
    resources:
        **stage_resources("fits", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


# Loads and writes the model on the CPU: the pruning stage's memory, no GPU; not a localrule, so
# a cluster does not load a large model on its login node.
rule export_pruned:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("export_pruned", wildcards)),
    output:
        models=directory(PATHS.pruned_models("{job}")),
    params:
        script=script("export_pruned.py"),
        code=code_version("export_pruned.py"),
        spec=job_spec("export_pruned"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("export_pruned")),
    log:
        log_file("export_pruned"),
    benchmark:
        benchmark_file("export_pruned")
    conda:
        ENVIRONMENT
    threads: stage_threads("pruning")
    resources:
        **job_resources("export_pruned"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule plot_pruning:
    input:
        prunings=[PATHS.pruning(name) for name in jobs("prune_model")],
    output:
        figures=[report(PATHS.figure(f"pruning/{figure}", FIGURE_FORMAT), category="Pruning",
                        caption=f"captions/pruning_{figure}.rst")
                 for figure in PRUNING_FIGURES],
    params:
        script=script("plot_pruning.py"),
        code=code_version("plot_pruning.py"),
        spec=job_spec("plot_pruning"),
    localrule: True
    log:
        log_file("plot_pruning", "pruning"),
    benchmark:
        benchmark_file("plot_pruning", "pruning")
    conda:
        ENVIRONMENT
    threads: stage_threads("figures")
    resources:
        **stage_resources("figures", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
