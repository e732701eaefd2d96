# Helpers shared by the rules: run paths, per-stage resources, model locations. Nothing else.

RUN = config["run_name"]
RESULTS = f"results/{RUN}"
MODELS = config["resolved_models"]
PRETRAIN_MODELS = [name for name, model in MODELS.items() if model["kind"] == "pretrain"]
PYTHON = sys.executable  # legacy; rules call `python {input.script}` instead
SCRIPTS = Path(workflow.basedir) / "workflow_scripts"
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
