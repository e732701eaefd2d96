# Data stage: offline corpus (or local files / a streamed hub dataset), BPE tokenizer, token arrays.


rule prepare_data:
    input:
    output:
        data=directory(PATHS.data),
    params:
        script=script("prepare_data.py"),
        code=code_version("prepare_data.py"),
        spec=job_spec("prepare_data"),
    log:
        log_file("prepare_data", "data"),
    benchmark:
        benchmark_file("prepare_data", "data")
    conda:
        ENVIRONMENT
    priority: 40  # every stage reads it (see PRUNED_MODELS in rules/common.smk)
    threads: stage_threads("data")
    resources:
        **stage_resources("data"),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
