"""The cluster path: the users' literal `snakemake --profile slurm ...` planned from a fresh
copy of the checkout (the paper config's jobs, each with its stage's GPUs, partition, account
and QoS), and the workflow run for real on a one-node Slurm cluster.

The cluster (2 CPUs, 2 fake h100 GPUs) comes from `.ci/setup_slurm.sh`; when it is not up, the
fixture starts it (root: apt-get install + daemons) and stops it afterwards. Where that is
impossible (no root or no apt-get) the cluster tests are skipped with the reason, except under
DEPTHLAB_REQUIRE_SLURM=1 (set by .ci/run), where they fail: CI must run them.

The Slurm run mostly waits (the executor polls Slurm at growing intervals, +10 s a round), so
when its tests are selected, conftest.py starts it in the background as soon as the session has
collected them (`start_in_background`) and the `slurm_run` fixture collects it; run alone, the
fixture starts it itself.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from local_snakemake import fresh_checkout, local_env

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
CONFIG = ROOT / "config" / "test.yaml"
SETUP_SCRIPT = ROOT / ".ci" / "setup_slurm.sh"
SETUP_HINT = "start it with `bash .ci/setup_slurm.sh` (as root)"
RUN_NAME = "slurm_test"
TARGET = f"results/{RUN_NAME}/models/pre_ln"
# Distinct values per stage, so a resource taken from the wrong stage (or a default) shows.
RESOURCES = {
    "data": {"threads": 1, "mem_mb": 900, "runtime": 3, "gpu": 0, "gpu_model": ""},
    "pretrain": {"threads": 2, "mem_mb": 1500, "runtime": 7, "gpu": 1, "gpu_model": "h100"},
}
# Slurm jobs' comments, as the executor plugin names them: rule and wildcards.
EXPECTED_JOBS = {"rule_prepare_data": "data", "rule_pretrain_model_wildcards_pre_ln": "pretrain"}
TIMEOUT_S = 180  # a healthy run takes 25-50 s; a hung one (polling sacct) must not wedge CI
REQUIRE_SLURM = os.environ.get("DEPTHLAB_REQUIRE_SLURM") == "1"
# The paper config's rules by what they need: GPU stages request GPUs, the rest never do.
GPU_RULES = {
    "pretrain_model",
    "analyse_model",
    "lens_swaps",
    "prune_model",
    "heal_pruned",
    "evaluate_pruned",
    "skip_interventions",
    "linear_maps",
    "measure_twin",
    "train_toy",
    "finetune_model",
    "evaluate_finetuned",
}
CPU_RULES = {
    "prepare_data",
    "build_lm_tasks",
    "choose_depth",
    "gather_pruning",
    "export_pruned",
    "make_problems",
    "collect_sweep",
    "fit_scaling",
    "fit_toy",
    "plot_loss_curves",
    "plot_analysis",
    "plot_lens_swaps",
    "plot_scaling",
    "plot_pruning",
    "plot_depth_use",
    "build_finetune_data",
    "plot_finetuning",
    "make_claims",
    "all",
}

pytestmark = pytest.mark.workflow


def sinfo_localhost() -> subprocess.CompletedProcess:
    """`sinfo`'s state of the node localhost (the single-node test cluster)."""
    return subprocess.run(
        ["sinfo", "-h", "-N", "-n", "localhost", "-o", "%t"],
        capture_output=True,
        text=True,
        timeout=30,
    )


def require_cluster() -> None:
    if shutil.which("sinfo") is None:
        pytest.fail(f"no Slurm here (`sinfo` is not on PATH); {SETUP_HINT}", pytrace=False)
    try:
        probe = sinfo_localhost()
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"`sinfo` hung for 30 s: slurmctld is not answering; {SETUP_HINT}", pytrace=False
        )
    state = probe.stdout.strip()
    if probe.returncode != 0 or state not in {"idle", "mix", "alloc"}:
        said = (probe.stdout + probe.stderr).strip() or "nothing"
        pytest.fail(
            f"the Slurm node `localhost` is not up (sinfo said: {said}); {SETUP_HINT}",
            pytrace=False,
        )


def slurm_jobs(workdir: Path) -> list[dict]:
    """Every job Slurm still knows (MinJobAge=300 keeps finished ones) that ran in `workdir`."""
    shown = subprocess.run(
        ["scontrol", "show", "job", "--details", "--oneliner"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    jobs = [dict(re.findall(r"(\S+?)=(\S*)", line)) for line in shown.splitlines()]
    return [job for job in jobs if job.get("WorkDir") and Path(job["WorkDir"]) == workdir]


def slurm_minutes(limit: str) -> float:
    """Slurm's [D-]HH:MM:SS time limit in minutes."""
    days, _, clock = limit.rpartition("-")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    return (int(days or 0) * 24 + hours) * 60 + minutes + seconds / 60


def cluster_is_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        probe = sinfo_localhost()
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0 and probe.stdout.strip() in {"idle", "mix", "alloc"}


def planned_jobs(dry_run_output: str) -> list[tuple[str, dict]]:
    """(rule, resources) of every job a dry run prints (`rule NAME:` ... `resources: k=v, ...`)."""
    jobs = []
    for block in re.split(r"^(?:local)?rule ", dry_run_output, flags=re.MULTILINE)[1:]:
        rule = block.split(":", 1)[0]
        found = re.search(r"^\s+resources: (.*)$", block, flags=re.MULTILINE)
        pairs = [item.split("=", 1) for item in found.group(1).split(", ")] if found else []
        jobs.append((rule, dict(pairs)))
    return jobs


def test_the_literal_profile_name_plans_the_paper_config_with_each_stages_slurm_resources(tmp_path):
    """`snakemake --profile slurm` (the name, not the path) from the root of a fresh copy; the
    cluster section's partition and account reach every job, a stage's own QoS its jobs."""
    checkout = fresh_checkout(tmp_path / "clone")
    command = [
        str(Path(sys.executable).with_name("snakemake")),
        "--profile",
        "slurm",
        "--configfile=config/paper.yaml",
        "--config",
        "cluster={partition: gpu_p, account: proj1}",
        "resources={pretrain: {qos: long}}",
        "-n",
        "--",
        "all",
    ]
    # the paper config plans one job per healed variant and lm-eval set: thousands of jobs
    result = subprocess.run(
        command, cwd=checkout, capture_output=True, text=True, timeout=300, env=local_env()
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "Using profiles slurm and workflow specific profile profiles/default" in output, output[
        -1000:
    ]
    jobs = planned_jobs(result.stdout)
    rules = {rule for rule, _ in jobs}
    assert GPU_RULES <= rules, sorted(rules)
    assert rules <= GPU_RULES | CPU_RULES, (
        f"classify new rules: {sorted(rules - GPU_RULES - CPU_RULES)}"
    )
    for rule, resources in jobs:
        if rule == "all":
            continue
        if rule in GPU_RULES:
            assert int(resources.get("gpu", 0)) >= 1, (rule, resources)
        else:
            assert "gpu" not in resources and "gpu_model" not in resources, (rule, resources)
        assert resources.get("slurm_partition") == "gpu_p", (rule, resources)
        assert resources.get("slurm_account") == "proj1", (rule, resources)
        assert resources.get("qos") == ("long" if rule == "pretrain_model" else None), (
            rule,
            resources,
        )


def cluster_unavailable(reason: str) -> None:
    """Fail where the cluster is required (CI), else skip with the reason."""
    message = f"{reason}; {SETUP_HINT}"
    if REQUIRE_SLURM:
        pytest.fail(f"DEPTHLAB_REQUIRE_SLURM=1: {message}", pytrace=False)
    pytest.skip(message)


def bring_up_cluster() -> dict:
    """Start the cluster unless it is up: {started_here, unavailable (why it cannot be used, or
    None), error (the setup script's failure, or None)}."""
    state = {"started_here": False, "unavailable": None, "error": None}
    if cluster_is_up():
        return state
    if os.geteuid() != 0:
        state["unavailable"] = "no Slurm cluster is up and starting one needs root"
    elif shutil.which("apt-get") is None and shutil.which("sinfo") is None:
        state["unavailable"] = "no Slurm cluster is up and installing one needs apt-get"
    else:
        setup = subprocess.run(
            ["bash", str(SETUP_SCRIPT), "start"], capture_output=True, text=True, timeout=600
        )
        if setup.returncode != 0:
            state["error"] = f"{SETUP_SCRIPT} failed:\n{setup.stdout}{setup.stderr}"
        state["started_here"] = True
    return state


def launch_run(workdir: Path) -> subprocess.Popen:
    """The workflow's target through the real profile on the cluster, in `workdir`; its output
    goes to workdir/snakemake.out."""
    config = yaml.safe_load(CONFIG.read_text())
    config["run_name"] = RUN_NAME
    config["resources"].update(RESOURCES)
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    # Test-only knobs on the command line, the profile stays a real cluster's: poll Slurm after
    # 1 s instead of 40 s; keep the jobs' Slurm logs to read them below.
    command = [
        "timeout",
        "-k",
        "10",
        str(TIMEOUT_S),
        SNAKEMAKE,
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--profile",
        str(ROOT / "profiles" / "slurm"),
        "--slurm-init-seconds-before-status-checks",
        "1",
        "--slurm-keep-successful-logs",
        TARGET,
    ]
    with open(workdir / "snakemake.out", "w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def cancel_leftovers(workdir: Path) -> None:
    """A killed run leaves its jobs queued or running on the cluster; cancel them."""
    leftover = [
        job["JobId"]
        for job in slurm_jobs(workdir)
        if job.get("JobState") in {"PENDING", "RUNNING", "CONFIGURING"}
    ]
    if leftover:
        subprocess.run(["scancel", *leftover], timeout=30)


def finish_run(process: subprocess.Popen, workdir: Path) -> list[dict]:
    """Wait for the run; its jobs as Slurm lists them right after it (Slurm forgets finished
    jobs after MinJobAge, 300 s); leftovers of a killed run are cancelled."""
    try:
        process.wait(timeout=TIMEOUT_S + 30)
        return slurm_jobs(workdir)
    finally:
        if process.poll() is None:
            process.kill()
        cancel_leftovers(workdir)


BACKGROUND: dict = {}  # start_in_background: bring_up_cluster's state, workdir, process, watcher


def start_in_background(workdir: Path) -> None:
    """Called by conftest.py once the session's tests are collected, if they use slurm_run: the
    run starts now and a thread records its jobs the moment it ends."""
    BACKGROUND.update(bring_up_cluster())
    if BACKGROUND["unavailable"] is None and BACKGROUND["error"] is None and cluster_is_up():
        workdir = workdir.resolve()
        process = launch_run(workdir)

        def watch():
            try:
                BACKGROUND["jobs"] = finish_run(process, workdir)
            except Exception as error:  # noqa: BLE001 - re-raised by the fixture
                BACKGROUND["watch_error"] = error

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        BACKGROUND.update(workdir=workdir, process=process, watcher=watcher)


def stop_background() -> None:
    """Session end: a run nobody collected (e.g. an interrupted session) is killed."""
    process = BACKGROUND.get("process")
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()
        cancel_leftovers(BACKGROUND["workdir"])


@pytest.fixture(scope="module")
def local_cluster():
    """The one-node cluster: reuse a running one, else start it here and stop it afterwards."""
    state = (
        {k: BACKGROUND[k] for k in ("started_here", "unavailable", "error")}
        if BACKGROUND
        else bring_up_cluster()
    )
    if state["error"]:
        pytest.fail(state["error"], pytrace=False)
    if state["unavailable"]:
        cluster_unavailable(state["unavailable"])
    require_cluster()
    yield
    if state["started_here"]:
        subprocess.run(["bash", str(SETUP_SCRIPT), "stop"], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory, local_cluster):
    if BACKGROUND.get("process") is not None:
        workdir, process = BACKGROUND["workdir"], BACKGROUND["process"]
        BACKGROUND["watcher"].join(timeout=TIMEOUT_S + 60)
        if "watch_error" in BACKGROUND:
            raise BACKGROUND["watch_error"]
        jobs = BACKGROUND["jobs"]
    else:
        workdir = tmp_path_factory.mktemp("slurm").resolve()
        process = launch_run(workdir)
        jobs = finish_run(process, workdir)
    output = (workdir / "snakemake.out").read_text()[-6000:]
    assert process.returncode == 0, f"snakemake exited {process.returncode}:\n{output}"
    return workdir, jobs, output


def test_every_job_ran_through_slurm_with_its_stages_resources(slurm_run):
    workdir, jobs, output = slurm_run
    by_comment = {job.get("Comment"): job for job in jobs}
    assert sorted(by_comment) == sorted(EXPECTED_JOBS), f"Slurm jobs in {workdir}: {jobs}\n{output}"
    for comment, stage in EXPECTED_JOBS.items():
        job, spec = by_comment[comment], RESOURCES[stage]
        assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", (comment, job)
        assert job["NodeList"] == "localhost", (comment, job)
        assert int(job["CPUs/Task"]) == spec["threads"], (comment, job)
        assert int(job["NumCPUs"]) == spec["threads"], (comment, job)
        assert job["MinMemoryNode"] == f"{spec['mem_mb']}M", (comment, job)
        assert slurm_minutes(job["TimeLimit"]) == spec["runtime"], (comment, job)
        # The job's own Slurm log: Snakemake ran the rule inside the allocation.
        slurm_log = Path(job["StdOut"])
        assert slurm_log.is_relative_to(workdir / ".snakemake" / "slurm_logs"), slurm_log
        assert (
            f"rule {comment.split('_wildcards')[0].removeprefix('rule_')}:" in slurm_log.read_text()
        ), slurm_log


def test_only_the_gpu_stage_gets_a_gpu_of_its_model(slurm_run):
    _, jobs, _ = slurm_run
    by_comment = {job.get("Comment"): job for job in jobs}
    pretrain, data = (
        by_comment["rule_pretrain_model_wildcards_pre_ln"],
        by_comment["rule_prepare_data"],
    )
    # Requested (TresPerJob from --gpus, or TresPerNode from --gres) and allocated (JOB_GRES).
    requested = pretrain.get("TresPerJob", "") + pretrain.get("TresPerNode", "")
    assert requested == "gres:gpu:h100:1", pretrain
    assert pretrain["JOB_GRES"] == "gpu:h100:1", pretrain
    assert "gpu" not in data.get("TresPerJob", "") + data.get("TresPerNode", ""), data
    assert data["JOB_GRES"] == "(null)", data


def test_outputs_and_provenance_exist(slurm_run):
    workdir, _, _ = slurm_run
    results = workdir / "results" / RUN_NAME
    data, model = results / "data", results / "models" / "pre_ln"
    for name in ("train.bin", "val.bin", "val.jsonl", "meta.json", "tokenizer"):
        assert (data / name).exists(), name
    for name in ("config.json", "model.safetensors", "train_log.csv"):
        assert (model / name).exists(), name
    data_provenance = json.loads((data / "provenance.json").read_text())
    model_provenance = json.loads((model / "provenance.json").read_text())
    assert data_provenance["stage"] == "data"
    assert model_provenance["stage"] == "pretrain"
    assert model_provenance["config"]["model_name"] == "pre_ln"
    assert model_provenance["inputs"], model_provenance  # sha256 of the data it trained on
    for rule, name in (("prepare_data", "data"), ("pretrain_model", "pre_ln")):
        assert (results / "logs" / rule / f"{name}.log").exists(), rule
        assert (results / "benchmarks" / rule / f"{name}.tsv").exists(), rule
    # Only the target and what it needs were built.
    assert not (results / "models" / "lns").exists()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_controller_stops_the_run_before_any_job_with_one_line(tmp_path):
    """The cluster's real Slurm client, pointed at a controller port nobody listens on: the run
    stops with one line and a non-zero status, and no job (local ones included) ran. Before,
    sbatch said "Unable to contact slurm controller" ten times, local rules ran, and the run took
    100 s to give up."""
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    if shutil.which("scontrol") is None or not conf.is_file():
        cluster_unavailable(f"no Slurm client (`scontrol`) or no {conf}")
    lines = [line for line in conf.read_text().splitlines() if not line.startswith("SlurmctldPort")]
    unreachable = tmp_path / "slurm.conf"
    unreachable.write_text("\n".join([*lines, f"SlurmctldPort={free_port()}", ""]))
    checkout = fresh_checkout(tmp_path / "clone")
    result = subprocess.run(
        [SNAKEMAKE, "--profile", "slurm", "--configfile=config/test.yaml", "--", "all"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SLURM_CONF": str(unreachable)},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    ours = [line for line in output.splitlines() if line.startswith("depthlab:")]
    assert len(ours) == 1 and "the controller is unreachable" in ours[0], output[-3000:]
    assert "Submitted" not in output and "Unable to contact" not in output, output[-3000:]
    assert not (checkout / "results").exists(), "a job ran before the check"
