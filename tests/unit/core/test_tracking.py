"""Progress output (bar on a terminal, plain lines in a log), TensorBoard event files, offline
W&B runs, healing's curves in the pruning output, library progress bars kept out of job logs,
and the per-layer statistics of pretraining."""

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from depthlab.config import resolve
from depthlab.core.tracking import Progress
from depthlab.data.prepare import load_tokens, read_meta
from depthlab.models.decoders import build_model, make_config
from depthlab.stages.pretrain.training import (
    TrainSettings,
    language_model_loss,
    train_batch,
    validation_batches,
)
from requirements_helpers import require_pinned
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_models import tiny_pretrain_model, train_tiny

ROOT = Path(__file__).resolve().parents[3]


def tiny_model(test_config, norm_scheme="pre_ln", **train) -> dict:
    return tiny_pretrain_model(test_config, norm_scheme, **train)


class Terminal(io.StringIO):
    def isatty(self):
        return True


class FakeClock:
    def __init__(self, step_s: float):
        self.now, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.now += self.step_s  # each reading: one more step's time
        return self.now


def test_progress_prints_plain_lines_in_a_log_and_a_bar_on_a_terminal():
    log = io.StringIO()
    progress = Progress(10, "m", every=4, file=log, clock=FakeClock(1.0))
    for step in range(10):
        progress.update(1, loss=float(step), lr=3e-3)
    progress.close()
    assert "\r" not in log.getvalue()
    # each line with its elapsed time and the ETA at the pace so far (1 s a step)
    assert log.getvalue().splitlines() == [
        "[m] step 4/10 loss 3.000 lr 3.00e-03, 4.0 s elapsed, ETA 6.0 s",
        "[m] step 8/10 loss 7.000 lr 3.00e-03, 8.0 s elapsed, ETA 2.0 s",
        "[m] step 10/10 loss 9.000 lr 3.00e-03, done in 10.0 s",
    ]
    # a resumed run counts from its step, its ETA from this process's steps; without `every`
    # about 20 lines per run
    log = io.StringIO()
    progress = Progress(100, "m", initial=50, file=log, clock=FakeClock(0.1))
    for _ in range(50):
        progress.update(1)
    assert log.getvalue().splitlines()[0] == "[m] step 55/100, 0.5 s elapsed, ETA 4.5 s"
    assert len(log.getvalue().splitlines()) == 10


def test_slow_steps_get_a_line_every_ten_seconds_without_stale_values():
    """Issue 51: a run whose 5% of steps takes minutes was silent that long. Lines come at
    least every EVERY_S seconds; between the scheduled steps they carry no loss (the loop reads
    it only at scheduled steps)."""
    log = io.StringIO()
    progress = Progress(100, "m", every=50, file=log, clock=FakeClock(4.0))
    for step in range(100):
        progress.update(1, loss=float(step))
    lines = log.getvalue().splitlines()
    assert lines[0] == "[m] step 3/100, 12.0 s elapsed, ETA 6 min 28 s"
    assert "[m] step 50/100 loss 49.000, 3 min 20 s elapsed, ETA 3 min 20 s" in lines
    assert all(
        "loss" not in line for line in lines if "step 50/" not in line and "100/" not in line
    )
    assert lines[-1] == "[m] step 100/100 loss 99.000, done in 6 min 40 s"
    # never more than 10 s of the fake clock between two lines
    assert len(lines) == 34

    terminal = Terminal()
    progress = Progress(10, "m", file=terminal)
    for _ in range(10):
        progress.update(1, loss=1.0)
    progress.close()
    assert "\r" in terminal.getvalue() and "10/10" in terminal.getvalue()

    quiet = io.StringIO()
    Progress(10, "m", enabled=False, file=quiet).update(10)
    assert quiet.getvalue() == ""


def scalars(folder: Path, tag: str) -> dict:
    events = EventAccumulator(str(folder))
    events.Reload()
    return {event.step: event.value for event in events.Scalars(tag)}


def test_tensorboard_events_hold_the_train_log_losses_and_live_in_the_model_folder(
    tmp_path, test_config, data_dir
):
    model = tiny_model(test_config, steps=8, eval_every=4, checkpoint_every=2)
    train_tiny(
        model, data_dir, tmp_path / "out", tmp_path / "state", tracking={"tensorboard": True}
    )
    log = pd.read_csv(tmp_path / "out" / "train_log.csv")
    events = tmp_path / "out" / "tensorboard"
    for split, tag in (("train", "loss/train"), ("val", "loss/val")):
        rows = log[log.split == split]
        logged = scalars(events, tag)
        assert sorted(logged) == rows.step.tolist()
        # event files store float32
        np.testing.assert_allclose([logged[s] for s in rows.step], rows.loss, rtol=1e-6)
    assert not (tmp_path / "state" / "tensorboard").exists()  # moved with the checkpoint

    stats = pd.read_csv(tmp_path / "out" / "layer_stats.csv")
    final = stats[stats.step == 8].sort_values("layer")
    logged = scalars(events, "output_variance/layer_02")
    assert logged[8] == pytest.approx(final.output_variance.iloc[2], rel=1e-6)


def test_no_event_files_when_tensorboard_is_off(tmp_path, test_config, data_dir):
    model = tiny_model(test_config, steps=2, eval_every=2)
    train_tiny(
        model, data_dir, tmp_path / "out", tmp_path / "state", tracking={"tensorboard": False}
    )
    assert not (tmp_path / "out" / "tensorboard").exists()
    assert not (tmp_path / "state" / "tensorboard").exists()


def reference_variances(model, batches) -> list[float]:
    """Variance of every element of each layer's output, the last one before the final norm,
    from output_hidden_states (whose last entry is after the final norm, so it is hooked)."""
    before_norm = []
    handle = model.model.norm.register_forward_pre_hook(
        lambda module, args: before_norm.append(args[0].double())
    )
    outputs = [[] for _ in model.model.layers]
    with torch.no_grad():
        for batch in batches:
            hidden = model(input_ids=batch[:, :-1], output_hidden_states=True).hidden_states
            for layer in range(len(outputs) - 1):
                outputs[layer].append(hidden[layer + 1].double())
    handle.remove()
    outputs[-1] = before_norm
    return [torch.cat([h.flatten() for h in layer]).var(unbiased=False).item() for layer in outputs]


def test_layer_stats_match_an_independent_computation(tmp_path, test_config, data_dir):
    decl = tiny_model(test_config, steps=3, eval_every=1, log_spaced_evals=0)
    train_tiny(decl, data_dir, tmp_path / "out", tmp_path / "state", seed=3)
    stats = pd.read_csv(tmp_path / "out" / "layer_stats.csv")
    assert stats.step.unique().tolist() == [0, 1, 2, 3]
    assert stats[stats.step == 0].grad_norm.isna().all()

    settings = TrainSettings.from_dict(decl["train"])
    meta = read_meta(data_dir)
    config = make_config(
        decl["architecture"],
        decl["norm_scheme"],
        vocab_size=meta["vocab_size"],
        max_positions=settings.seq_len,
        init_std=settings.init_std,
    )
    initial = build_model(config, 3).eval()
    batches = validation_batches(load_tokens(data_dir, "val"), settings)
    np.testing.assert_allclose(
        stats[stats.step == 0].sort_values("layer").output_variance,
        reference_variances(initial, batches),
        rtol=1e-9,
    )

    # step 1's gradient: batch 0 at the initial weights
    window = train_batch(
        load_tokens(data_dir, "train"), 0, 3, settings.batch_size, settings.seq_len
    )
    initial.train()
    language_model_loss(initial, window, None).backward()
    layer_norms = [
        torch.cat([p.grad.flatten() for p in layer.parameters()]).norm().item()
        for layer in initial.model.layers
    ]
    total = torch.cat([p.grad.flatten() for p in initial.parameters()]).norm().item()
    first = stats[stats.step == 1].sort_values("layer")
    np.testing.assert_allclose(first.grad_norm, layer_norms, rtol=1e-5)
    np.testing.assert_allclose(first.total_grad_norm, total, rtol=1e-5)

    # the last evaluation, against the exported checkpoint
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    np.testing.assert_allclose(
        stats[stats.step == 3].sort_values("layer").output_variance,
        reference_variances(trained, batches),
        rtol=1e-6,
    )
    assert math.isfinite(stats.output_variance.sum())


def test_healing_logs_progress_lines_and_tensorboard_losses(tmp_path, data_dir):
    from depthlab.stages.pruning.healing import HealSettings, heal

    settings = HealSettings.from_dict(
        {
            "method": "lora",
            "rank": 2,
            "alpha": 4,
            "dropout": 0.0,
            "target_modules": ["down_proj"],
            "steps": 8,
            "batch_size": 2,
            "seq_len": 8,
            "lr": 1e-3,
            "warmup_steps": 1,
            "min_lr_ratio": 0.1,
            "schedule": "cosine",
            "weight_decay": 0.0,
        }
    )
    config = make_config(
        {"hidden_size": 16, "num_layers": 2, "num_heads": 2, "intermediate_size": 32},
        "pre_ln",
        vocab_size=read_meta(data_dir)["vocab_size"],
        max_positions=16,
        init_std=0.02,
    )
    lines = []
    _, record = heal(
        build_model(config, 0),
        load_tokens(data_dir, "train"),
        settings,
        seed=0,
        log=lines.append,
        tensorboard_dir=tmp_path / "tb",
    )
    progress = [line for line in lines if line.startswith("[healing] step")]
    assert [line.split()[2] for line in progress] == ["2/8", "4/8", "6/8", "8/8"]
    logged = scalars(tmp_path / "tb", "heal/loss")
    assert sorted(logged) == list(range(1, 9))
    assert logged[1] == pytest.approx(record["first_train_loss"], rel=1e-6)
    assert float(progress[-1].split()[4]) == pytest.approx(logged[8], abs=5e-4)


# ------------------------------------------------------------------ W&B (offline) and wiring

WANDB = Path(sys.executable).with_name("wandb")


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """W&B offline, silent, and its user folders in tmp. WANDB_DIR points elsewhere than the
    configured folder, so a run found there proves the configured `dir` is used."""
    require_pinned("wandb")
    for name, value in {
        "WANDB_SILENT": "true",
        "WANDB_MODE": "offline",
        "WANDB_DIR": tmp_path / "env_dir",
        "WANDB_CONFIG_DIR": tmp_path / "cfg",
        "WANDB_CACHE_DIR": tmp_path / "cache",
        "WANDB_DATA_DIR": tmp_path / "data_dir",
    }.items():
        monkeypatch.setenv(name, str(value))
    return {
        "project": "depthlab-test",
        "mode": "offline",
        "entity": None,
        "dir": str(tmp_path / "run"),
    }


def wandb_runs(root: Path) -> dict:
    """{run name: (config, {step: history row})} of the offline runs in `root`/wandb, read back
    from their .wandb record logs with wandb's own reader (`wandb leet inspect --json`)."""
    runs = {}
    for log in sorted((root / "wandb").glob("offline-run-*/run-*.wandb")):
        printed = subprocess.run(
            [str(WANDB), "leet", "inspect", "--json", str(log)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        records = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
        run = next(r["run"] for r in records if r["type"] == "run")
        history = {
            r["history"]["step"].get("num", 0): r["history"]["item"]
            for r in records
            if r["type"] == "history"
        }
        runs[run["display_name"]] = (run["config"]["update"], history)
    return runs


def test_wandb_offline_run_holds_the_train_log_and_leaves_results_unchanged(
    tmp_path, test_config, data_dir, wandb_env
):
    model = tiny_model(test_config, steps=4, eval_every=2)
    tracked = {"tensorboard": False, "progress_every": None, "wandb": wandb_env}
    train_tiny(model, data_dir, tmp_path / "out", tmp_path / "state", tracking=tracked)
    train_tiny(
        model,
        data_dir,
        tmp_path / "plain",
        tmp_path / "state_plain",
        tracking={"tensorboard": False},
    )
    log = pd.read_csv(tmp_path / "out" / "train_log.csv")
    pd.testing.assert_frame_equal(
        log.drop(columns="wall_s"),
        pd.read_csv(tmp_path / "plain" / "train_log.csv").drop(columns="wall_s"),
    )
    assert not (tmp_path / "env_dir").exists()

    runs = wandb_runs(Path(wandb_env["dir"]))
    assert list(runs) == ["tiny"]
    config, history = runs["tiny"]
    assert config["model_name"] == "tiny" and config["model"]["train"]["steps"] == 4
    assert config["tracking"]["wandb"]["project"] == "depthlab-test"
    for split, tag in (("train", "loss/train"), ("val", "loss/val")):
        rows = log[log.split == split]
        assert [history[s][tag] for s in rows.step] == rows.loss.tolist()
    stats = pd.read_csv(tmp_path / "out" / "layer_stats.csv")
    assert (
        history[0]["output_variance/layer_01"]
        == stats[(stats.step == 0) & (stats.layer == 1)].output_variance.item()
    )


def test_wandb_online_without_a_login_stops_the_job_with_one_line_naming_the_key(
    tmp_path, test_config, data_dir, wandb_env, monkeypatch, capsys
):
    from depthlab.cli import main_guard
    from depthlab.core.tracking import TrackingError

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")
    model = tiny_model(test_config, steps=4, eval_every=2)
    online = {"tensorboard": False, "wandb": {**wandb_env, "mode": "online"}}

    def run():
        return train_tiny(model, data_dir, tmp_path / "out", tmp_path / "state", tracking=online)

    with pytest.raises(TrackingError, match=r"^tracking\.wandb\.mode: 'online'.*wandb login"):
        run()
    assert not (tmp_path / "out").exists()  # stopped before training wrote anything
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main_guard(run)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert stop.value.code == 2 and "Traceback" not in err
    assert len(errors) == 1 and errors[0].startswith("error: tracking.wandb.mode: 'online'")


def test_healing_curves_land_in_the_pruning_output_and_in_wandb(tmp_path, wandb_env, test_config):
    from depthlab.stages.pruning import stage as pruning_stage
    from depthlab.stages.pruning.tables import gather
    from depthlab.stages.pruning.variants import heal_variant
    from test_lm_tasks import make_run, run_prune_spec

    run = make_run(tmp_path / "run", train_steps=0, layers=3, documents=150)
    out = tmp_path / "pruning" / "m"
    healing = {
        "enabled": True,
        "strategies": ["deepest"],
        "n_grid": [1, 2],
        "method": "lora",
        "rank": 2,
        "alpha": 4,
        "dropout": 0.0,
        "target_modules": ["down_proj"],
        "steps": 3,
        "batch_size": 2,
        "seq_len": 16,
        "lr": 1e-3,
        "warmup_steps": 1,
        "min_lr_ratio": 0.1,
        "schedule": "cosine",
        "weight_decay": 0.0,
    }
    (resolved,) = resolve(test_config).jobs("prune_model").values()
    measured = tmp_path / "pruning_jobs" / "m" / "measured"
    spec = run_prune_spec(
        resolved,
        run,
        tmp_path,
        strategies=["deepest"],
        n_grid=[1, 2],
        val={"windows": 2, "seq_len": 16, "batch_size": 2},
        lm_eval={**resolved["lm_eval"], "enabled": False},
        speed={**resolved["speed"], "enabled": False},
    )
    pruning_stage.run(spec, log=lambda message: None)
    # each healed variant is a heal_pruned job of its own; gather_pruning copies its curves
    heals = []
    for n in (1, 2):
        heal_spec = {
            **{key: spec[key] for key in ("model_name", "model_kind", "model", "revision", "data",
                                         "tasks", "datasets_cache", "seed", "device", "dtype",
                                         "val", "lm_eval")},
            "measured": str(measured),
            "strategy": "deepest",
            "n": n,
            "healing": {k: v for k, v in healing.items() if k not in ("strategies", "n_grid")},
            "tracking": {"tensorboard": True, "progress_every": None, "wandb": wandb_env},
            "out": str(tmp_path / "pruning_jobs" / "m" / "heal" / f"deepest_n{n}"),
        }  # fmt: skip
        heal_variant(heal_spec, log=lambda message: None)
        heals.append(heal_spec["out"])
    gather({"model_name": "m", "measured": str(measured), "heals": heals, "evaluations": [],
            "seed": 0, "out": str(out)})  # fmt: skip
    healed = pd.read_csv(out / "healing.csv")
    runs = wandb_runs(Path(wandb_env["dir"]))
    assert sorted(runs) == ["m-heal-deepest_n1", "m-heal-deepest_n2"]
    for record in healed.itertuples():
        variant = f"{record.strategy}_n{record.n}"
        logged = scalars(out / "tensorboard" / variant, "heal/loss")
        assert sorted(logged) == [1, 2, 3]
        assert logged[1] == pytest.approx(record.first_train_loss, rel=1e-6)  # float32 events
        config, history = runs[f"m-heal-{variant}"]
        assert history[1]["heal/loss"] == record.first_train_loss
        assert config["variant"]["n"] == record.n and config["healing"]["steps"] == 3
    # no live folder beside the outputs once they are complete
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]
    assert sorted(
        p.name for p in (out.parent.parent / "pruning_jobs" / "m" / "heal").iterdir()
    ) == [
        "deepest_n1",
        "deepest_n2",
    ]


def test_library_progress_bars_stay_out_of_a_job_log():
    """In a process whose stderr is a file (a job log), the bars of libraries imported after
    the switch and of those imported before it print nothing; a re-enabled bar prints."""
    code = """
import sys
from depthlab.cli import quiet_library_progress_bars
quiet_library_progress_bars()
from transformers.utils import logging
from datasets.utils import tqdm as datasets_tqdm
from tqdm import tqdm as plain_tqdm
def bars(label):
    for bar in (logging.tqdm, datasets_tqdm):
        for _ in bar(range(3), desc=label, mininterval=0, disable=False):
            pass
    # a bare tqdm (lm-eval's request building, transformers' GGUF de-quantising)
    for _ in plain_tqdm(range(3), desc=label + "-plain", mininterval=0):
        pass
bars("after-import")
logging.enable_progress_bar()
bars("re-enabled")
quiet_library_progress_bars()
bars("told")
"""
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "workflow_scripts")},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "re-enabled: 100%" in result.stderr  # the control prints
    assert "after-import" not in result.stderr and "told" not in result.stderr
