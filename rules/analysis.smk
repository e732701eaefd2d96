# Analysis stage: one streamed pass per (text set, model) computes every hidden-state measure of
# the four papers (angular distance, variance growth, relative contributions, logit lens, angles);
# one figure set per text set compares the models.


rule analyse_model:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("analyse_model", wildcards)),
    output:
        analysis=report(directory(PATHS.analysis("{text_set}", "{model}")),
                        patterns=["{table}.csv"], category="Analysis tables",
                        subcategory="{text_set}/{model}", caption="captions/table_analysis.rst"),
    params:
        script=script("analyse_model.py"),
        code=code_version("analyse_model.py"),
        spec=job_spec("analyse_model"),
    wildcard_constraints:
        text_set=wildcard_alternatives(set(RESOLVED.wildcard_values("analyse_model", "text_set"))),
        model=wildcard_alternatives(set(RESOLVED.wildcard_values("analyse_model", "model"))),
    log:
        log_file("analyse_model", "{text_set}/{model}"),
    benchmark:
        benchmark_file("analyse_model", "{text_set}/{model}")
    conda:
        ENVIRONMENT
    priority: pruning_path_priority(20, "model")
    threads: stage_threads("analysis")
    resources:
        **job_resources("analyse_model"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule plot_analysis:
    input:
        analyses=lambda wildcards: RESOLVED.jobs("plot_analysis")[wildcards.job]["analyses"],
    output:
        figures=[report(PATHS.figure(f"analysis/{{job}}/{figure}", FIGURE_FORMAT),
                        category="Analysis", subcategory="{job}",
                        caption=f"captions/analysis_{figure}.rst")
                 for figure in ANALYSIS_FIGURES],
    params:
        script=script("plot_analysis.py"),
        code=code_version("plot_analysis.py"),
        spec=job_spec("plot_analysis"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("plot_analysis")),
    localrule: True
    log:
        log_file("plot_analysis"),
    benchmark:
        benchmark_file("plot_analysis")
    conda:
        ENVIRONMENT
    threads: stage_threads("figures")
    resources:
        **stage_resources("figures", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
