# Pretraining stage: one LLaMA-style model per declared pretrain model, exported as an HF
# directory; the loss curves of every pretrained model (Curse of Depth, Fig. 1-style).


rule pretrain_model:
    input:
        unpack(lambda wildcards: RESOLVED.inputs_for("pretrain_model", wildcards)),
    output:
        # Resumable state lives in PATHS.train_state, outside the output, so Snakemake never
        # deletes it on failure.
        model=report(directory(PATHS.model("{job}")), patterns=["{table}.csv"],
                     category="Pretraining", subcategory="{job}",
                     caption="captions/table_pretrain.rst"),
    params:
        script=script("pretrain_model.py"),
        code=code_version("pretrain_model.py"),
        spec=job_spec("pretrain_model"),
        launcher=stage_launcher("pretrain"),
    wildcard_constraints:
        job=wildcard_alternatives(jobs("pretrain_model")),
    log:
        log_file("pretrain_model"),
    benchmark:
        benchmark_file("pretrain_model")
    conda:
        ENVIRONMENT
    priority: pruning_path_priority(30, "job")
    threads: stage_threads("pretrain")
    resources:
        **job_resources("pretrain_model"),
    shell:
        "{params.launcher:q} {params.script:q} --spec {params.spec:q} --threads {threads:q} "
        "> {log:q} 2>&1"


rule plot_loss_curves:
    input:
        models=[PATHS.model(name) for name in jobs("pretrain_model")],
    output:
        figure=report(PATHS.figure("loss_curves", FIGURE_FORMAT), category="Pretraining",
                      caption="captions/loss_curves.rst"),
    params:
        script=script("plot_loss_curves.py"),
        code=code_version("plot_loss_curves.py"),
        spec=job_spec("plot_loss_curves"),
    localrule: True
    log:
        log_file("plot_loss_curves", "loss_curves"),
    benchmark:
        benchmark_file("plot_loss_curves", "loss_curves")
    conda:
        ENVIRONMENT
    threads: stage_threads("figures")
    resources:
        **stage_resources("figures", gpu=False),
    shell:
        "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"


# A kind: gguf model: its GGUF file (or chunks, concatenated in order; sha256-checked) converted
# into a plain HF folder where a pretrained model's would be, read by later stages like a local
# kind: hf model.
# Defined only when such a model is declared (resources.convert is needed only then).
if jobs("convert_gguf"):

    rule convert_gguf:
        input:
            unpack(lambda wildcards: RESOLVED.inputs_for("convert_gguf", wildcards)),
        output:
            model=directory(PATHS.model("{job}")),
        params:
            script=script("convert_gguf.py"),
            code=code_version("convert_gguf.py"),
            spec=job_spec("convert_gguf"),
        wildcard_constraints:
            job=wildcard_alternatives(jobs("convert_gguf")),
        log:
            log_file("convert_gguf"),
        benchmark:
            benchmark_file("convert_gguf")
        conda:
            ENVIRONMENT
        # a converted model that is pruned heads the run's longest chain (see PRUNED_MODELS)
        priority: pruning_path_priority(35, "job")
        threads: stage_threads("convert")
        resources:
            **job_resources("convert_gguf"),
        shell:
            "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
