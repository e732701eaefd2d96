# Toy stage: teacher-student residual networks (Liu et al. 2026). One job per teacher kind and
# temperature trains every student depth; one job fits the depth exponents and plots them.


rule train_toy:
    input:
    output:
        run=directory(PATHS.toy_run("{kind}", "{index}")),
    params:
        script=script("train_toy.py"),
        code=code_version("train_toy.py"),
        spec=job_spec("train_toy"),
    wildcard_constraints:
        kind="independent|tied",
        index=r"\d+",
    log:
        log_file("train_toy", "{kind}_T{index}"),
    benchmark:
        benchmark_file("train_toy", "{kind}_T{index}")
    conda:
        ENVIRONMENT
    threads: stage_threads("toy")
    resources:
        **stage_resources("toy"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


rule fit_toy:
    input:
        runs=lambda wildcards: RESOLVED.jobs("fit_toy")["toy"]["runs"],
    output:
        fit=report(PATHS.toy_fit, category="Toy models", caption="captions/table_toy_fit.rst"),
        figure=report(PATHS.figure("toy_loss_vs_depth", FIGURE_FORMAT), category="Toy models",
                      caption="captions/toy.rst"),
    params:
        script=script("fit_toy.py"),
        code=code_version("fit_toy.py"),
        spec=job_spec("fit_toy"),
    localrule: True
    log:
        log_file("fit_toy", "toy"),
    benchmark:
        benchmark_file("fit_toy", "toy")
    conda:
        ENVIRONMENT
    threads: stage_threads("fits")
    resources:
        **stage_resources("fits", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
