# Helpers shared by the rules: run paths, per-stage resources, model locations, stage settings.
import re
import shlex

RUN = config["run_name"]
RESULTS = f"results/{RUN}"
MODELS = config["resolved_models"]
PRETRAIN_MODELS = [name for name, model in MODELS.items() if model["kind"] == "pretrain"]
ENVIRONMENT = "../environment.yml"  # for --sdm conda; the default is the project venv


def script(name):
    """A stage script, as a rule input (a changed script marks its outputs for rerun)."""
    return str(Path(workflow.basedir) / "workflow_scripts" / name)

# Each stage's .smk appends the final outputs it contributes; `rule all` builds them all.
ALL_TARGETS = []


def stage_threads(stage):
    return config["resources"][stage]["threads"]


def stage_resources(stage):
    """Slurm-facing resources of a stage, from config (gpu_model only when a model is named)."""
    spec = config["resources"][stage]
    resources = {"mem_mb": spec["mem_mb"], "runtime": spec["runtime"]}
    if spec.get("gpu", 0) > 0:
        resources["gpu"] = spec["gpu"]
        if spec.get("gpu_model"):
            resources["gpu_model"] = spec["gpu_model"]
    return resources


def wildcard_alternatives(names):
    """A wildcard constraint matching exactly these names (nothing when there are none)."""
    return "|".join(re.escape(name) for name in names) or "^$"


def log_file(stage, name="{model}"):
    return f"{RESULTS}/logs/{stage}/{name}.log"


def benchmark_file(stage, name="{model}"):
    return f"{RESULTS}/benchmarks/{stage}/{name}.tsv"


def model_dir(name):
    """A model's HF directory: our pretrain output, or the declared local path / hub id."""
    model = MODELS[name]
    if model["kind"] == "pretrain":
        return f"{RESULTS}/models/{name}"
    return model["path"]


def model_input(name):
    """Snakemake input for a model: pretrain outputs are files to build; hub ids are not."""
    model = MODELS[name]
    if model["kind"] == "pretrain":
        return [model_dir(name)]
    return [model["path"]] if Path(model["path"]).exists() else []


def as_json(obj):
    import json

    return json.dumps(obj, sort_keys=True)


# --- analysis stage: which models and text sets, and analyze.py's flags per text set ---

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
