# Tuned lens and layer swaps (Belrose et al. 2023, Lad et al. 2024): one job per model trains its
# lens and scores its swaps and deletions on the analysis text sets; a local plot job per model
# draws the figure from those tables, so redrawing the figures never retrains a lens.


rule lens_swaps:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("lens_swaps", wildcards)),
    output:
        lens_swaps=directory(PATHS.lens_swaps("{model}")),
    params:
        script=script("lens_swaps.py"),
        code=code_version("lens_swaps.py"),
        spec=job_spec("lens_swaps"),
    wildcard_constraints:
        model=wildcard_alternatives(set(RESOLVED.wildcard_values("lens_swaps", "model"))),
    log:
        log_file("lens_swaps", "{model}"),
    benchmark:
        benchmark_file("lens_swaps", "{model}")
    conda:
        ENVIRONMENT
    threads: stage_threads("analysis")
    resources:
        **job_resources("lens_swaps"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule plot_lens_swaps:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("plot_lens_swaps", wildcards)),
    output:
        figure=report(PATHS.figure("lens_swaps/{model}", FIGURE_FORMAT), category="Analysis",
                      subcategory="lens and swaps", caption="captions/lens_swaps.rst"),
    params:
        script=script("plot_lens_swaps.py"),
        code=code_version("plot_lens_swaps.py"),
        spec=job_spec("plot_lens_swaps"),
    wildcard_constraints:
        model=wildcard_alternatives(set(RESOLVED.wildcard_values("plot_lens_swaps", "model"))),
    localrule: True
    log:
        log_file("plot_lens_swaps", "{model}"),
    benchmark:
        benchmark_file("plot_lens_swaps", "{model}")
    conda:
        ENVIRONMENT
    threads: stage_threads("figures")
    resources:
        **stage_resources("figures", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
