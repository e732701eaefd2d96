# Supervised fine-tuning (Curse of Depth Sec. 5): the fine-tuning pairs and held-out tasks, one
# fine-tuned model per parent and seed, each parent and its fine-tuned models scored on the same
# lm-eval tasks, and the before / after figure. Defined only when finetune.models names models.

from depthlab.config.stages.finetune import (
    finetune_data_dir,
    finetune_eval_dir,
    finetuned_model_dir,
)

if jobs("finetune_model"):

    rule build_finetune_data:
        input:
            unpack(lambda wildcards: RESOLVED.inputs_for("build_finetune_data", wildcards)),
        output:
            data=directory(finetune_data_dir(RESOLVED)),
        params:
            script=script("build_finetune_data.py"),
            code=code_version("build_finetune_data.py"),
            spec=job_spec("build_finetune_data"),
        localrule: True
        log:
            log_file("build_finetune_data", "data"),
        benchmark:
            benchmark_file("build_finetune_data", "data")
        conda:
            ENVIRONMENT
        threads: stage_threads("fits")
        resources:
            **stage_resources("fits", gpu=False),
        shell:
            "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"

    rule finetune_model:
        input:
            unpack(lambda wildcards: RESOLVED.inputs_for("finetune_model", wildcards)),
        output:
            # resumable state lives outside the output, so Snakemake never deletes it on failure
            model=directory(finetuned_model_dir(RESOLVED, "{job}")),
        params:
            script=script("finetune_model.py"),
            code=code_version("finetune_model.py"),
            spec=job_spec("finetune_model"),
        wildcard_constraints:
            job=wildcard_alternatives(jobs("finetune_model")),
        log:
            log_file("finetune_model"),
        benchmark:
            benchmark_file("finetune_model")
        conda:
            ENVIRONMENT
        threads: stage_threads("finetune")
        resources:
            **job_resources("finetune_model"),
        shell:
            "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"

    rule evaluate_finetuned:
        input:
            unpack(lambda wildcards: RESOLVED.inputs_for("evaluate_finetuned", wildcards)),
        output:
            scores=directory(finetune_eval_dir(RESOLVED, "{job}")),
        params:
            script=script("evaluate_finetuned.py"),
            code=code_version("evaluate_finetuned.py"),
            spec=job_spec("evaluate_finetuned"),
        wildcard_constraints:
            job=wildcard_alternatives(jobs("evaluate_finetuned")),
        log:
            log_file("evaluate_finetuned"),
        benchmark:
            benchmark_file("evaluate_finetuned")
        conda:
            ENVIRONMENT
        threads: stage_threads("finetune")
        resources:
            **job_resources("evaluate_finetuned"),
        shell:
            "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"

    rule plot_finetuning:
        input:
            scores=lambda wildcards: RESOLVED.jobs("plot_finetuning")["finetuning"]["scores"],
        output:
            figure=report(PATHS.figure("finetuning", FIGURE_FORMAT), category="Fine-tuning",
                          caption="captions/finetuning.rst"),
        params:
            script=script("plot_finetuning.py"),
            code=code_version("plot_finetuning.py"),
            spec=job_spec("plot_finetuning"),
        localrule: True
        log:
            log_file("plot_finetuning", "finetuning"),
        benchmark:
            benchmark_file("plot_finetuning", "finetuning")
        conda:
            ENVIRONMENT
        threads: stage_threads("figures")
        resources:
            **stage_resources("figures", gpu=False),
        shell:
            "python {params.script:q} --spec {params.spec:q} --threads {threads:q} > {log:q} 2>&1"
