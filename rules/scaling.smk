# Scaling stage: the decomposed width/depth/data law (Liu et al. 2026) and the reference form
# (Hoffmann et al. 2022; Besiroglu et al. 2024) fitted on the project's own depth x width sweep
# and on CSV points (the Chinchilla models), with bootstrap intervals and held-out validation.


rule collect_sweep:
    input:
        models=lambda wildcards: RESOLVED.jobs("collect_sweep")["sweep_points"]["models"],
    output:
        points=PATHS.sweep_points,
    params:
        script=script("collect_sweep.py"),
        code=code_version("collect_sweep.py"),
        spec=job_spec("collect_sweep"),
    localrule: True
    log:
        log_file("collect_sweep", "sweep_points"),
    benchmark:
        benchmark_file("collect_sweep", "sweep_points")
    conda:
        ENVIRONMENT
    threads: stage_threads("fits")
    resources:
        **stage_resources("fits", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule fit_scaling:
    input:
        points=lambda wildcards: RESOLVED.jobs("fit_scaling")[wildcards.job]["points"],
    output:
        fit=report(PATHS.fit("{job}"), category="Scaling laws", subcategory="{job}",
                   caption="captions/table_fit.rst"),
        samples=PATHS.fit_samples("{job}"),
    params:
        script=script("fit_scaling.py"),
        code=code_version("fit_scaling.py"),
        spec=job_spec("fit_scaling"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("fit_scaling")),
    localrule: True
    log:
        log_file("fit_scaling"),
    benchmark:
        benchmark_file("fit_scaling")
    conda:
        ENVIRONMENT
    threads: stage_threads("fits")
    resources:
        **stage_resources("fits", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule plot_scaling:
    input:
        fit=report(PATHS.fit("{job}"), category="Scaling laws", subcategory="{job}",
                   caption="captions/table_fit.rst"),
        samples=PATHS.fit_samples("{job}"),
    output:
        figure=report(PATHS.figure("scaling/{job}", FIGURE_FORMAT), category="Scaling laws",
                      subcategory="{job}", caption="captions/scaling.rst"),
    params:
        script=script("plot_scaling.py"),
        code=code_version("plot_scaling.py"),
        spec=job_spec("plot_scaling"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("plot_scaling")),
    localrule: True
    log:
        log_file("plot_scaling"),
    benchmark:
        benchmark_file("plot_scaling")
    conda:
        ENVIRONMENT
    threads: stage_threads("figures")
    resources:
        **stage_resources("figures", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
