# Analysis stage: one streamed pass per (text set, model) computes every hidden-state measure of
# the four papers (angular distance, variance growth, relative contributions, logit lens, angles);
# one figure set per text set compares the models.

import re

ANALYSIS = config.get("analysis")
ANALYSIS_MODELS = (list(MODELS) if ANALYSIS and ANALYSIS["models"] is None
                   else (ANALYSIS or {}).get("models") or [])
ANALYSIS_TEXT_SETS = (ANALYSIS or {}).get("text_sets") or {}
ANALYSIS_SETTINGS = ("text_field", "max_samples", "max_tokens", "max_length")


def analysis_dir(text_set, model):
    return f"{RESULTS}/analysis/{text_set}/{model}"


def analysis_text_input(wildcards):
    spec = ANALYSIS_TEXT_SETS[wildcards.text_set]
    if spec["source"] == "val":
        return [f"{RESULTS}/data"]
    if spec["source"] == "jsonl":
        return [spec["path"]]
    return []  # a hub dataset, streamed by the script


def analysis_flags(wildcards):
    """Command-line flags of analyze.py for one text set: its texts and its settings (a text
    set's own keys override the analysis defaults)."""
    import shlex

    spec = ANALYSIS_TEXT_SETS[wildcards.text_set]
    settings = {key: spec.get(key, ANALYSIS[key]) for key in ANALYSIS_SETTINGS}
    if spec["source"] == "val":
        flags = ["--texts-jsonl", f"{RESULTS}/data/val.jsonl"]
    elif spec["source"] == "jsonl":
        flags = ["--texts-jsonl", spec["path"]]
    else:
        flags = ["--dataset", spec["name"], "--split", spec["split"]]
        if spec.get("config_name"):
            flags += ["--dataset-config", spec["config_name"]]
    flags += ["--text-field", settings["text_field"], "--max-samples", settings["max_samples"],
              "--max-length", settings["max_length"], "--batch-size", ANALYSIS["batch_size"],
              "--logit-lens-stride", ANALYSIS["logit_lens_stride"], "--device", ANALYSIS["device"],
              "--logit-lens" if ANALYSIS["logit_lens"] else "--no-logit-lens",
              "--all-token-distance" if ANALYSIS["all_token_distance"]
              else "--no-all-token-distance"]
    if settings["max_tokens"] is not None:
        flags += ["--max-tokens", settings["max_tokens"]]
    model = MODELS[wildcards.model]
    if model["kind"] == "hf":
        flags += ["--dtype", model.get("dtype", "float32")]
        if model.get("revision"):
            flags += ["--revision", model["revision"]]
    return " ".join(shlex.quote(str(flag)) for flag in flags)


def _alternatives(names):
    return "|".join(re.escape(name) for name in names) or "^$"


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
        model=_alternatives(ANALYSIS_MODELS),
        text_set=_alternatives(ANALYSIS_TEXT_SETS),
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
        figures=expand(f"{RESULTS}/figures/analysis/{{{{text_set}}}}/{{figure}}.{config['figures']['format']}",
                       figure=["angular_distance", "variance_growth", "contributions",
                               "logit_lens", "angles"]),
    params:
        out_dir=lambda wildcards: f"{RESULTS}/figures/analysis/{wildcards.text_set}",
        format=config["figures"]["format"],
    wildcard_constraints:
        text_set=_alternatives(ANALYSIS_TEXT_SETS),
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
