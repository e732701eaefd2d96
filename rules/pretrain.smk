# Pretraining stage: one LLaMA-style model per declared pretrain model, exported as an HF directory.


rule pretrain:
    input:
        data=f"{RESULTS}/data",
        script=script("pretrain.py"),
    output:
        model=directory(f"{RESULTS}/models/{{model}}"),
    params:
        model=lambda wildcards: as_json(MODELS[wildcards.model]),
        seed=config["seed"],
        # Resumable state lives outside the output so Snakemake never deletes it on failure.
        state=lambda wildcards: f"{RESULTS}/train_state/{wildcards.model}",
    wildcard_constraints:
        model=wildcard_alternatives(PRETRAIN_MODELS),
    log:
        log_file("pretrain"),
    benchmark:
        benchmark_file("pretrain")
    conda:
        ENVIRONMENT
    threads: stage_threads("pretrain")
    resources:
        **stage_resources("pretrain"),
    shell:
        "python {input.script} --model-name {wildcards.model} --model-config {params.model:q}"
        " --data {input.data} --state-dir {params.state} --seed {params.seed}"
        " --threads {threads} --out {output.model} > {log} 2>&1"


ALL_TARGETS.extend(model_dir(name) for name in PRETRAIN_MODELS)
