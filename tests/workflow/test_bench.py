"""Smoke runs of every script in bench/, at tiny sizes, so that a library change that breaks one
fails here instead of in the next person's benchmark session.

The benchmarks are not imported by the workflow or by any other test, so nothing else notices
when a name they import moves or a signature changes. Each script runs as its users run it (a
subprocess of this interpreter, one thread) with its own size options turned down to seconds; the
test asserts it exits 0 and still prints the line(s) it exists for (the ratio, the comparison).
The sizes make the timings meaningless: only that they are printed is checked; the differences
between a fast path and its reference are not, and must be small (SMALL). A path given to a
benchmark that does not exist is refused, naming it, before anything runs.
compare_results.py runs on two tiny results folders built here: an equal pair (timing column
aside) and one with a changed number. test_every_bench_script_has_a_smoke_case makes a new
bench script without a case here fail.

Left out for time: bench_analysis.py's memory part (--skip-memory: six fresh processes, ~40 s),
the default-run inputs of bench_linear_maps.py and bench_skip_interventions.py (--random: the
random-weight models run whatever results/default/ holds).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# the criteria bench_pruning_criteria.py ranks (those read before the validation sweep)
from depthlab.stages.pruning.criteria import CRITERIA as RANKED_CRITERIA

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
NUMBER = r"-?\d+(\.\d+)?(e[-+]\d+)?"

# script[:case]: (arguments, regexes each of which must match a whole line of the output)
SMOKE = {
    "bench_pretrain_throughput.py": (
        ["--steps", "2", "--warmup", "1", "--repeats", "1"],
        [
            rf"repeat 0: depthlab \((\w+)\) {NUMBER} tok/s, plain \(\1\) {NUMBER} tok/s"
            rf"(, plain fp32 {NUMBER} tok/s)?",
            r"pre_ln_s0 \(pre_ln, 12x64\), batch \d+x\d+, vocab \d+, device cpu, .*",
            rf"ratio depthlab/plain \(same precision\): depthlab \(\w+\) {NUMBER}",
            rf"share of the measured \w+ matmul peak \({NUMBER} TFLOP/s\): plain \(\w+\) {NUMBER}",
        ],
    ),
    "bench_pretrain_throughput.py:loss_check": (
        ["--loss-seeds", "0", "1", "--loss-steps", "2"],
        [
            rf"seed 1 fp32: final val loss {NUMBER}",
            rf"loss check, pre_ln_s0, 2 seeds, \w+ vs fp32: final val loss mean {NUMBER} vs "
            rf"{NUMBER}; paired difference [-+]{NUMBER} \[[-+]{NUMBER}, [-+]{NUMBER}\] .*; seed "
            rf"std of the fp32 final loss {NUMBER}; largest .* {NUMBER}",
            r"within seed noise: .*: (yes|no)",
        ],
    ),
    "bench_analysis.py": (
        ["--tokens", "100", "--seq-len", "16", "--batch-size", "8", "--repeats", "1"]
        + ["--skip-memory"],
        [
            rf"{name}\s+{NUMBER}\s+{NUMBER}x\s+{NUMBER}x"
            for name in (
                "plain_forward_causal_lm",
                "plain_forward_backbone",
                "pass_logit_lens_off",
                "pass_logit_lens_on",
                "pass_logit_lens_stride8",
                "pass_all_token_distance",
            )
        ],
    ),
    "bench_linear_maps.py": (
        # --random: the random-weight pair, even where results/default/ exists
        ["--random", "--alphas", "0", "1e-2", "--adamw-steps", "2", "--adamw-batch", "64"],
        [
            rf"closed form \(alphas .*\): {NUMBER} s, mean held-out relative error {NUMBER}",
            rf"AdamW per pair .*: {NUMBER} s, mean held-out relative error {NUMBER}",
            rf"closed form at least as good on {NUMBER}% of pairs; largest excess {NUMBER}; "
            rf"time ratio x{NUMBER} \(goal >= 10\)",
            r'\{"closed_form_s": .*"ratio": .*\}',
        ],
    ),
    "bench_pruning_sweep.py": (
        ["--windows", "2", "--seq-len", "8", "--batch-size", "2"],
        [
            rf"distinct removal sets: \d+; losses identical to rebuilding \(max \|diff\| {NUMBER}\)",
            rf"layer calls: sweep \d+ vs rebuild \d+ \({NUMBER}x fewer\)",
            rf"wall: sweep {NUMBER} s vs rebuild {NUMBER} s -> ratio {NUMBER}x \(goal >= 2x\)",
        ],
    ),
    "bench_pruning_criteria.py": (
        ["--windows", "2", "--seq-len", "8", "--batch-size", "2", "--n", "2"],
        [
            rf"{strategy}: calibration passes \d+, backward passes \d+, layer calls \d+, "
            rf"seconds {NUMBER}"
            for strategy in RANKED_CRITERIA
        ]
        + [r"removed at n = 2: sleb \[\d+, \d+\]"],
    ),
    "bench_scaling_fit.py": (
        ["--resamples", "3", "--lbfgsb-resamples", "2", "--refit-resamples", "2"],
        [
            r"liu \(decomposed, LSQ, drop 40 incl\. ties\): \d+ points",
            r"besiroglu \(reference, Huber, drop 5\): \d+ points",
            rf"\s+least_squares: fit {NUMBER} s \+ 3 resamples {NUMBER} s = {NUMBER} s .*",
            rf"\s+lbfgsb: .*\(lbfgsb / least_squares = {NUMBER}\)",
            rf"\s+bootstrap refits, 2 resamples: .*; full / warm = {NUMBER}x",
        ],
    ),
    "bench_planning.py": (
        ["--configfile", str(ROOT / "config" / "test.yaml"), "--repeats", "1"],
        [
            rf"repeat 0 +(off|warm): cpu {NUMBER} s, wall {NUMBER} s",
            rf"test\.yaml: \d+ planned jobs; median dry run cache off cpu {NUMBER} s wall "
            rf"{NUMBER} s, cache warm cpu {NUMBER} s wall {NUMBER} s -> cpu ratio {NUMBER}x",
            # the fingerprints from the cache must be the parsed ones
            r"same planned commands \(specs and code fingerprints\): yes",
        ],
    ),
    "bench_skip_interventions.py": (
        # --random: the custom case on a random model, never results/default/'s models
        ["--random", "4x64", "--prompts", "4", "--length", "12", "--future-min-position", "3"]
        + ["--variants", "layer_all", "layer_future", "attention_all", "mlp_all"]
        + ["--repeats", "1"],
        [
            rf"\[custom\] batched .*: {NUMBER} s;  one prompt per pass: {NUMBER} s;  "
            rf"speed-up x{NUMBER} \(goal >= 5\)",
            rf"\[custom\] largest relative difference of the effects \(float32\): {NUMBER}",
        ],
    ),
}
COMPARE = "compare_results.py"  # its own tests below: it needs two results folders
# case: (a regex of one output line whose group "value" is a fast path's difference from its
# reference, the largest allowed). The sweep's losses (~8.4 nats) repeat a rebuilt copy's layer
# calls: 0.0 measured, 1e-5 is the bench's own 1e-6 relative, a wrong removal set moves a loss by
# far more. The batched skip effects are float32 sums in another order than the one-prompt
# loop: 6e-7 measured (relative); a wrong position or layer is O(1), bf16 arithmetic ~1e-2.
SMALL = {
    "bench_pruning_sweep.py": (
        rf"distinct removal sets: \d+; .*\(max \|diff\| (?P<value>{NUMBER})\)",
        1e-5,
    ),
    "bench_skip_interventions.py": (
        rf"\[custom\] largest relative difference of the effects \(float32\): "
        rf"(?P<value>{NUMBER})",
        1e-4,
    ),
}


def run_bench(script: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def assert_lines(output: str, patterns: list[str]) -> None:
    lines = output.splitlines()
    for pattern in patterns:
        assert any(re.fullmatch(pattern, line) for line in lines), (pattern, output[-4000:])


def test_every_bench_script_has_a_smoke_case():
    scripts = {path.name for path in BENCH.glob("*.py")}
    assert scripts == {case.split(":")[0] for case in SMOKE} | {COMPARE}


@pytest.mark.parametrize("case", sorted(SMOKE))
def test_bench_script_runs(case, tmp_path):
    script, args, patterns = case.split(":")[0], *SMOKE[case]
    done = run_bench(script, args, tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert_lines(done.stdout, patterns)
    if case in SMALL:
        pattern, largest = SMALL[case]
        values = [
            float(match["value"])
            for match in map(re.compile(pattern).fullmatch, done.stdout.splitlines())
            if match
        ]
        assert values and max(values) <= largest, (pattern, values, done.stdout[-4000:])


# case: (script, arguments, the option refused); "{absent}" is a path that does not exist,
# "{folder}" one that does (the test's folder)
MISSING_PATHS = {
    "linear maps source": ("bench_linear_maps.py", ["--source", "{absent}"], "--source"),
    "linear maps target": (
        "bench_linear_maps.py",
        ["--source", "{folder}", "--target", "{absent}"],
        "--target",
    ),
    "linear maps texts": ("bench_linear_maps.py", ["--texts", "{absent}"], "--texts"),
    "skip model": ("bench_skip_interventions.py", ["--model", "{absent}"], "--model"),
    "skip texts": (
        "bench_skip_interventions.py",
        ["--model", "{folder}", "--texts", "{absent}"],
        "--texts",
    ),
}


@pytest.mark.parametrize("case", sorted(MISSING_PATHS))
def test_a_given_path_that_does_not_exist_is_refused_naming_it(case, tmp_path):
    # never a silent fall-back to random models: their numbers would pass for the asked ones
    script, args, option = MISSING_PATHS[case]
    absent = tmp_path / "absent" / "val.jsonl"
    done = run_bench(script, [arg.format(absent=absent, folder=tmp_path) for arg in args], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr  # argparse's usage error
    assert f"error: {option}: {absent} is not a" in done.stderr, done.stderr
    assert done.stdout == ""


def results_folder(root: Path) -> Path:
    """A tiny results/<run>/ folder with one file of every kind compare_results.py reads."""
    files = {
        "analysis/corpus/m/measures.csv": "layer,angular_distance,name\n0,0.5,a\n1,0.25,b\n",
        "models/m/train_log.csv": "step,loss,wall_s\n1,7.5,0.1\n2,7.25,0.2\n",
        "scaling/sweep_points.csv": "depth,loss\n4,3.5\n8,3.25\n",
        "scaling/depth/fit.json": '{"estimates": {"a": 0.5}, "intervals": {"a": {"low": 0.25,'
        ' "high": 0.75}}, "seconds": 1.0}',
        "toy/fit.json": '{"form": "power", "fits": [{"teacher_kind": "linear", "temperature":'
        ' 1.0, "exponent": 0.5}], "teacher_angles_deg": [30.0]}',
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "models/m/model.safetensors").write_bytes(b"weights")
    return root


def test_compare_results_equal(tmp_path):
    before = results_folder(tmp_path / "before")
    after = tmp_path / "after"
    shutil.copytree(before, after)
    # wall-clock seconds and fit.json's other numbers are not results: still equal
    log = after / "models/m/train_log.csv"
    log.write_text(log.read_text().replace("0.2\n", "9.5\n"))
    fit = after / "scaling/depth/fit.json"
    fit.write_text(fit.read_text().replace('"seconds": 1.0', '"seconds": 2.0'))
    done = run_bench(COMPARE, [str(before), str(after)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_lines(done.stdout, [r"6 files compared, 6 equal, 0 differing, missing or unreadable .*"])


def test_compare_results_reports_a_changed_number(tmp_path):
    before = results_folder(tmp_path / "before")
    after = tmp_path / "after"
    shutil.copytree(before, after)
    measures = after / "analysis/corpus/m/measures.csv"
    measures.write_text(measures.read_text().replace("0.25", "0.375"))
    done = run_bench(COMPARE, [str(before), str(after)], tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert_lines(
        done.stdout,
        [
            r"analysis/corpus/m/measures\.csv\s+csv\s+DIFFERENT\s+0\.125",
            r"6 files compared, 5 equal, 1 differing, missing or unreadable .*",
        ],
    )
