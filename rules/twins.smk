# Untrained twins: each model trained here that a claim compares with its initialisation, rebuilt
# from its seed and measured with the trained model's own measures (depthlab.stages.twins), one
# job per shape and data set (depthlab.config.stages.twins.twin_group); the claims read the tables.


rule measure_twin:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("measure_twin", wildcards)),
    output:
        twins=directory(PATHS.twins("{group}")),
    params:
        script=script("measure_twin.py"),
        code=code_version("measure_twin.py"),
        spec=job_spec("measure_twin"),
    wildcard_constraints:
        group=wildcard_alternatives(jobs("measure_twin")),
    log:
        log_file("measure_twin", "{group}"),
    benchmark:
        benchmark_file("measure_twin", "{group}")
    conda:
        ENVIRONMENT
    threads: stage_threads("analysis")
    resources:
        **job_resources("measure_twin"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
