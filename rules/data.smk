# Data stage: offline corpus (or local files / a streamed hub dataset), BPE tokenizer, token arrays.


rule prepare_data:
    input:
        script=script("prepare_data.py"),
    output:
        directory(f"{RESULTS}/data"),
    params:
        data=lambda wildcards: as_json(config["data"]),
        seed=config["seed"],
    log:
        log_file("data", "prepare_data"),
    benchmark:
        benchmark_file("data", "prepare_data")
    conda:
        ENVIRONMENT
    threads: stage_threads("data")
    resources:
        **stage_resources("data"),
    shell:
        "python {input.script} --data-config {params.data:q} --seed {params.seed}"
        " --threads {threads} --out {output} > {log} 2>&1"


ALL_TARGETS.append(f"{RESULTS}/data")
