# Figures that compare pretraining runs: loss curves of the norm schemes (Curse of Depth, Fig. 1-style).


rule plot_loss_curves:
    input:
        models=[model_dir(name) for name in PRETRAIN_MODELS],
        script=script("plot_loss_curves.py"),
    output:
        figure=report(f"{RESULTS}/figures/loss_curves.{config['figures']['format']}",
                      category="Pretraining", caption="captions/loss_curves.rst"),
    log:
        log_file("figures", "loss_curves"),
    benchmark:
        benchmark_file("figures", "loss_curves")
    conda:
        ENVIRONMENT
    threads: stage_threads("figures")
    resources:
        **stage_resources("figures"),
    shell:
        "python {input.script} --models {input.models} --out {output.figure}"
        " > {log} 2>&1"


if PRETRAIN_MODELS:
    ALL_TARGETS.append(rules.plot_loss_curves.output.figure)
