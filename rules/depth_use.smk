# Depth-use stage (Csordás et al.): synthetic problems of graded difficulty (a model is trained on
# them by pretrain_model); layer-skip interventions and the depth score per model; cross-model
# linear maps per declared pair; figures.


rule make_problems:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("make_problems", wildcards)),
    output:
        problems=directory(PATHS.problems),
    params:
        script=script("make_problems.py"),
        code=code_version("make_problems.py"),
        spec=job_spec("make_problems"),
    localrule: True
    log:
        log_file("make_problems", "problems"),
    benchmark:
        benchmark_file("make_problems", "problems")
    conda:
        ENVIRONMENT
    threads: stage_threads("fits")
    resources:
        **stage_resources("fits", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule skip_interventions:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("skip_interventions", wildcards)),
    output:
        skip=report(directory(PATHS.skip("{job}")), patterns=["{table}.csv"],
                    category="Depth use tables", subcategory="skip {job}",
                    caption="captions/table_skip.rst"),
    params:
        script=script("skip_interventions.py"),
        code=code_version("skip_interventions.py"),
        spec=job_spec("skip_interventions"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("skip_interventions")),
    log:
        log_file("skip_interventions"),
    benchmark:
        benchmark_file("skip_interventions")
    conda:
        ENVIRONMENT
    # a pruned model's skip job (a real LM's: minutes) starts early, not last and alone
    priority: pruning_path_priority(20, "job")
    threads: stage_threads("depth_use")
    resources:
        **job_resources("skip_interventions"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule linear_maps:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("linear_maps", wildcards)),
    output:
        maps=report(directory(PATHS.linear_map("{job}")), patterns=["{table}.csv"],
                    category="Depth use tables", subcategory="linear maps {job}",
                    caption="captions/table_linear_maps.rst"),
    params:
        script=script("linear_maps.py"),
        code=code_version("linear_maps.py"),
        spec=job_spec("linear_maps"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("linear_maps")),
    log:
        log_file("linear_maps"),
    benchmark:
        benchmark_file("linear_maps")
    conda:
        ENVIRONMENT
    threads: stage_threads("depth_use")
    resources:
        **job_resources("linear_maps"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule plot_depth_use:
    input:
        skip=[PATHS.skip(name) for name in jobs("skip_interventions")],
        maps=[PATHS.linear_map(name) for name in jobs("linear_maps")],
    output:
        figures=[report(PATHS.figure(f"depth_use/{figure}", FIGURE_FORMAT), category="Depth use",
                        caption=f"captions/depth_use_{figure}.rst")
                 for figure in DEPTH_USE_FIGURES],
    params:
        script=script("plot_depth_use.py"),
        code=code_version("plot_depth_use.py"),
        spec=job_spec("plot_depth_use"),
    localrule: True
    log:
        log_file("plot_depth_use", "depth_use"),
    benchmark:
        benchmark_file("plot_depth_use", "depth_use")
    conda:
        ENVIRONMENT
    threads: stage_threads("figures")
    resources:
        **stage_resources("figures", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
