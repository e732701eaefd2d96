"""The training loop shared by pretraining and fine-tuning (depthlab.stages.train_loop), on a toy
regression: a run killed right after a saved state and resumed ends bit-identical (weights, logs,
extra row lists) to one never interrupted; a state of another run is ignored; the log has the
train rows of log_every and the val rows of eval_at; losses reach the host only at check steps,
and a non-finite loss stops the run at the next one, naming its step and the range."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from depthlab.stages.train_loop import NonFiniteLossCheck, TrainingLoop, load_state

SETTINGS = SimpleNamespace(steps=12, log_every=2, checkpoint_every=3, grad_clip=1.0)


class Killed(Exception):
    pass


class ToyLoop(TrainingLoop):
    """Linear regression; batches drawn from (seed, step) like the real loops'."""

    extra_rows = ("notes",)

    def __init__(self, state_path, fingerprint="toy", kill_at=None, settings=SETTINGS):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
        super().__init__(
            "toy",
            model,
            optimizer,
            scheduler,
            settings,
            eval_at={4, 8, settings.steps},
            tokens_per_step=8,
            state_path=state_path,
            fingerprint=fingerprint,
            device=torch.device("cpu"),
            process_start=time.perf_counter(),
        )
        data = np.random.default_rng(0)
        self.inputs = torch.from_numpy(data.normal(size=(64, 4)).astype(np.float32))
        self.targets = self.inputs @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
        self.kill_at = kill_at

    def train_loss(self, step):
        rows = torch.from_numpy(np.random.default_rng([7, step]).integers(0, 48, size=8))
        # dropout-like noise from torch's RNG: a resume must restore that generator too
        noise = 1 + 0.1 * torch.rand(8, 1)
        loss = ((self.model(self.inputs[rows]) - self.targets[rows] * noise) ** 2).mean()
        loss.backward()
        return loss.item()

    def validate(self, step):
        with torch.no_grad():
            return ((self.model(self.inputs[48:]) - self.targets[48:]) ** 2).mean().item()

    def validated(self, step, val, tokens_per_s):
        self.notes.append([step, val])

    def write_state(self, path, state):
        super().write_state(path, state)
        if state["step"] == self.kill_at:
            raise Killed(f"killed right after the step-{self.kill_at} state was saved")


def without_wall(rows):
    return [row[:5] for row in rows]


def test_a_killed_run_resumes_bit_identical(tmp_path):
    reference = ToyLoop(tmp_path / "a" / "state.pt")
    reference.run(progress=False)

    killed = ToyLoop(tmp_path / "b" / "state.pt", kill_at=6)
    with pytest.raises(Killed):
        killed.run(progress=False)
    saved = load_state(tmp_path / "b" / "state.pt", "cpu")
    assert saved["step"] == 6 and saved["processes"] == 1 and len(saved["notes"]) == 1

    resumed = ToyLoop(tmp_path / "b" / "state.pt")
    resumed.resume()
    assert (resumed.step, resumed.resumed_from, resumed.earlier_processes) == (6, 6, 1)
    resumed.run(progress=False)
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    assert without_wall(resumed.log_rows) == without_wall(reference.log_rows)
    assert resumed.notes == reference.notes
    record = resumed.record()
    assert record["resumed"] and record["resumed_from_step"] == 6 and record["processes"] == 2


def test_a_state_of_another_run_is_ignored(tmp_path, capsys):
    killed = ToyLoop(tmp_path / "state.pt", fingerprint="one", kill_at=3)
    with pytest.raises(Killed):
        killed.run(progress=False)
    other = ToyLoop(tmp_path / "state.pt", fingerprint="two")
    other.resume()
    assert other.step == 0 and other.resumed_from is None
    assert "saved by a different run configuration" in capsys.readouterr().err


def test_log_rows_follow_log_every_and_eval_at(tmp_path):
    loop = ToyLoop(tmp_path / "state.pt")
    loop.run(progress=False)
    train = [row[0] for row in loop.log_rows if row[2] == "train"]
    val = [row[0] for row in loop.log_rows if row[2] == "val"]
    assert train == [2, 4, 6, 8, 10, 12] and val == [4, 8, 12]
    assert all(row[1] == row[0] * 8 for row in loop.log_rows)  # tokens of step * tokens_per_step
    # the lr logged at a step is the one its update used: the schedule's value before stepping
    assert [row[4] for row in loop.log_rows if row[2] == "train"] == pytest.approx(
        [0.05 / step for step in (2, 4, 6, 8, 10, 12)]
    )
    assert load_state(tmp_path / "state.pt", "cpu")["step"] == 9  # the last before the end
    loop.discard_state()
    assert not (tmp_path / "state.pt").exists()


SPARSE_CHECKS = SimpleNamespace(steps=12, log_every=5, checkpoint_every=12, grad_clip=1.0)


class Exploding(ToyLoop):
    """A NaN loss planted at update `nan_at` (1-based, as logged)."""

    loss_hint = "lower toy.lr"

    def __init__(self, state_path, nan_at, settings=SPARSE_CHECKS):
        super().__init__(state_path, settings=settings)
        self.nan_at = nan_at

    def train_loss(self, step):
        loss = super().train_loss(step)
        return torch.tensor(float("nan")) if step + 1 == self.nan_at else loss


def test_a_non_finite_loss_stops_at_the_next_check_naming_the_range(tmp_path):
    # Checks after updates 4, 8 (evaluations) and 5, 10 (log_every): a NaN at update 6 is found
    # at the check of update 8, and the message names the update and the range 6..8.
    loop = Exploding(tmp_path / "state.pt", nan_at=6)
    with pytest.raises(
        FloatingPointError,
        match=r"loss is nan at step 6; stopping at the check of steps 6\.\.8 \(lower toy\.lr\)",
    ):
        loop.run(progress=False)
    assert loop.step == 8  # it stopped at that check, not later
    assert not (tmp_path / "state.pt").exists()  # no state saved after the NaN

    # a NaN exactly at a check step is named at that step
    with pytest.raises(
        FloatingPointError, match=r"at step 5; stopping at the check of steps 5\.\.5"
    ):
        Exploding(tmp_path / "other.pt", nan_at=5).run(progress=False)


def test_losses_reach_the_host_only_at_check_steps(tmp_path, monkeypatch):
    # Each step's loss stays a tensor; the loop reads them (one transfer) only at log,
    # evaluation, checkpoint and last steps, and the logged loss is that step's own loss.
    checked, losses = [], {}
    original = NonFiniteLossCheck.check

    def recording_check(self, step):
        checked.append(step)
        return original(self, step)

    class Recording(ToyLoop):
        def train_loss(self, step):
            loss = super().train_loss(step)
            losses[step + 1] = loss
            return torch.tensor(loss)

    monkeypatch.setattr(NonFiniteLossCheck, "check", recording_check)
    loop = Recording(tmp_path / "state.pt", settings=SPARSE_CHECKS)
    loop.run(progress=False)
    assert checked == [4, 5, 8, 10, 12]
    train_rows = {row[0]: row[3] for row in loop.log_rows if row[2] == "train"}
    assert train_rows == pytest.approx({5: losses[5], 10: losses[10], 12: losses[12]})
