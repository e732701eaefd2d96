"""A job's progress lines (depthlab.core.tracking: `<what> i/n, elapsed, ETA` at most every ~10 s)
and the third-party messages kept out of job logs (depthlab.core.tracking)."""

import logging
import re
import time
import warnings

import pytest
from depthlab.core.tracking import (
    DropMessages,
    ProgressLog,
    duration_text,
    heartbeat,
    progress_text,
    quiet_library_messages,
)


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_long_loop_logs_every_ten_seconds_with_its_eta():
    clock, lines = FakeClock(), []
    progress = ProgressLog("[m] loss sweep", 10, lines.append, unit="sets", clock=clock)
    for seconds in (4, 4, 4, 4, 4, 30, 1, 1, 1, 1):  # one slow step, then quick ones
        clock.now += seconds
        progress.step()
    assert lines == [
        "[m] loss sweep 3/10 sets, 12.0 s elapsed, ETA 28.0 s",  # 10 s passed at step 3
        "[m] loss sweep 6/10 sets, 50.0 s elapsed, ETA 33.3 s",  # the pace so far: 50 s / 6
        "[m] loss sweep 10/10 sets, done in 54.0 s",  # an end line, after earlier lines
    ]


def test_a_short_loop_stays_silent():
    clock, lines = FakeClock(), []
    progress = ProgressLog("[m] lm-eval", 5, lines.append, clock=clock)
    for _ in range(5):
        clock.now += 1.9
        progress.step()
    assert lines == []  # 9.5 s in all: the job's own summary line says enough


def test_steps_of_several_at_once_and_the_texts():
    clock, lines = FakeClock(), []
    progress = ProgressLog("x", 100, lines.append, every_s=5, clock=clock)
    clock.now += 5
    progress.step(25)
    assert lines == ["x 25/100, 5.0 s elapsed, ETA 15.0 s"]
    assert duration_text(75) == "1 min 15 s" and duration_text(3725) == "1 h 2 min"
    assert progress_text("x", 0, 4, 3.0) == "x 0/4, 3.0 s elapsed, ETA unknown"


def test_a_heartbeat_says_a_long_call_is_still_running_and_stops_with_it():
    lines = []
    with heartbeat("[m] loading the model", lines.append, every_s=0.05):
        time.sleep(0.3)
    after = len(lines)
    time.sleep(0.15)
    assert len(lines) == after  # the thread stopped with the block
    assert 1 <= after <= 7  # about 6; fewer on a loaded machine
    assert all(re.fullmatch(r"\[m\] loading the model: still running, [\d.]+ s elapsed", line)
               for line in lines)  # fmt: skip
    with heartbeat("quick", lines.append, every_s=5):
        pass
    assert len(lines) == after  # a block shorter than the interval: no line


def record(name: str, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, message, None, None)


def test_the_bitsandbytes_kernel_notice_is_dropped_and_its_other_messages_kept(caplog):
    """Issue 51: every heal and fine-tune log began with bitsandbytes' `Failed to load CPU
    gemm_4bit_forward ... pip install kernels`. The filter drops that one message; the same
    logger's other warnings still reach the log."""
    quiet_library_messages()
    quiet_library_messages()  # twice: one filter, not two
    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    assert sum(isinstance(f, DropMessages) for f in logger.filters) == 1
    with caplog.at_level(logging.WARNING):
        logger.warning(
            "Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please make sure "
            "you already `pip install kernels` and the kernels >= 0.11.1",
            "No module named 'kernels'",
        )
        logger.warning("CPU 4-bit matmul fell back to the slow path")
        logging.getLogger("some.other.library").warning("Failed to load CPU gemm_4bit_forward")
    assert [r.getMessage() for r in caplog.records] == [
        "CPU 4-bit matmul fell back to the slow path",
        "Failed to load CPU gemm_4bit_forward",  # the same words from another logger: kept
    ]


@pytest.mark.parametrize(
    "message, kept",
    [
        ("Passed an already-initialized model through `pretrained`, assuming ...", False),
        ("`pretrained` model kwarg is not of type `str`. Many other ...", False),
        ("Task depthlab_word_order: no documents", True),
    ],
)
def test_lm_evals_model_object_notices_are_dropped(message, kept):
    quiet_library_messages()
    logger = logging.getLogger("lm_eval.models.huggingface")
    assert logger.filter(record(logger.name, message)) is kept


def test_only_the_named_deprecation_warning_is_ignored():
    quiet_library_messages()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        quiet_library_messages()  # catch_warnings reset the filters: install them again
        warnings.warn(
            "`is_gradient_checkpointing` is deprecated and will be removed in v6.",
            FutureWarning,
            stacklevel=1,
        )
        warnings.warn("`something_else` is deprecated", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["`something_else` is deprecated"]
