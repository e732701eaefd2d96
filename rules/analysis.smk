# Analysis stage: one streamed pass per (text set, model) computes every hidden-state measure of
# the four papers (angular distance, variance growth, relative contributions, logit lens, angles);
# one figure set per text set compares the models.

rule analyze:
    input:
        model=lambda wildcards: model_input(wildcards.model),
        texts=analysis_text_input,
        script=script("analyze.py"),
    output:
        analysis=directory(analysis_dir("{text_set}", "{model}")),
    params:
        model_path=lambda wildcards: model_dir(wildcards.model),
        flags=analysis_flags,
    wildcard_constraints:
        model=wildcard_alternatives(ANALYSIS_MODELS),
        text_set=wildcard_alternatives(ANALYSIS_TEXT_SETS),
    log:
        log_file("analysis", "{text_set}/{model}"),
    benchmark:
        benchmark_file("analysis", "{text_set}/{model}")
    conda:
        ENVIRONMENT
    threads: stage_threads("analysis") if ANALYSIS else 1
    resources:
        **(stage_resources("analysis") if ANALYSIS else {}),
    shell:
        "python {input.script} --model {params.model_path:q} --model-name {wildcards.model}"
        " --text-set {wildcards.text_set} {params.flags} --threads {threads}"
        " --out {output.analysis} > {log} 2>&1"


rule plot_analysis:
    input:
        analyses=lambda wildcards: [analysis_dir(wildcards.text_set, name)
                                    for name in ANALYSIS_MODELS],
        script=script("plot_analysis.py"),
    output:
        figures=[report(path, category="Analysis", subcategory="{text_set}",
                        caption="captions/analysis.rst")
                 for path in expand(f"{RESULTS}/figures/analysis/{{{{text_set}}}}/{{figure}}.{config['figures']['format']}",
                       figure=["angular_distance", "variance_growth", "contributions",
                               "logit_lens", "angles"])],
    params:
        out_dir=lambda wildcards: f"{RESULTS}/figures/analysis/{wildcards.text_set}",
        format=config["figures"]["format"],
    wildcard_constraints:
        text_set=wildcard_alternatives(ANALYSIS_TEXT_SETS),
    log:
        log_file("figures", "analysis_{text_set}"),
    benchmark:
        benchmark_file("figures", "analysis_{text_set}")
    conda:
        ENVIRONMENT
    threads: stage_threads("figures")
    resources:
        **stage_resources("figures"),
    shell:
        "python {input.script} --analyses {input.analyses} --out-dir {params.out_dir}"
        " --format {params.format} > {log} 2>&1"


if ANALYSIS_MODELS:
    for _text_set in ANALYSIS_TEXT_SETS:
        ALL_TARGETS.extend(expand(rules.plot_analysis.output.figures, text_set=_text_set))
