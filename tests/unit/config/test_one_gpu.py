"""config/one_gpu.yaml: the Curse of Depth's 130M shape at 20 tokens per parameter, four schemes
x three seeds, and a 1.5B hub model, planned and dry-run on the CPU without the network (no
download: the plan sizes the hub model from depthlab/plan/hub_architectures.yaml)."""

import re
import subprocess
import sys
from pathlib import Path

from depthlab.config import resolve
from depthlab.data.pretrain_runs import non_embedding_params
from local_snakemake import local_env
from test_config import dry_run, load

ROOT = Path(__file__).resolve().parents[3]


def test_one_gpu_trains_the_cod_shape_to_20_tokens_per_parameter_in_four_schemes_x_three_seeds():
    resolved = resolve(load("one_gpu.yaml"))
    trained = {n: m for n, m in resolved.models.items() if m["kind"] == "pretrain"}
    schemes = {}
    for name, model in trained.items():
        schemes.setdefault(model["norm_scheme"], []).append(name)
        arch, train = model["architecture"], model["train"]
        assert (arch["hidden_size"], arch["num_layers"], arch["intermediate_size"]) == (
            768,
            12,
            2048,
        )
        params = non_embedding_params(
            {"hidden_size": 768, "num_attention_heads": arch["num_heads"],
             "intermediate_size": 2048, "num_hidden_layers": 12}
        )  # fmt: skip
        tokens = train["steps"] * train["batch_size"] * train["seq_len"]
        assert tokens / params >= 20, (name, tokens / params)
    assert {k: len(v) for k, v in schemes.items()} == {"pre_ln": 3, "lns": 3, "mix_ln": 3,
                                                        "post_ln": 3}  # fmt: skip
    hub = [n for n, m in resolved.models.items() if m["kind"] == "hf"]
    assert hub == ["qwen25_1.5b"]
    claims = resolved.jobs("make_claims")["claims"]
    # every trained model's untrained twin is measured inside make_claims: no extra jobs
    assert set(claims["initial"]) >= set(trained)
    assert [s[2] for s in claims["schemes"]] == ["pre_ln", "lns", "mix_ln", "post_ln"]


def test_one_gpu_dry_run_builds_the_dag(tmp_path):
    result = dry_run(load("one_gpu.yaml"), tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for rule in ("prepare_data", "pretrain_model", "prune_model", "heal_pruned", "make_claims"):
        assert rule in result.stdout, rule


def test_one_gpu_plan_estimates_its_wall_time_on_one_h100():
    result = subprocess.run(
        [sys.executable, str(ROOT / "workflow_scripts" / "plan.py"), "config/one_gpu.yaml",
         "--summary"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=local_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout
    assert "H100-SXM5-80GB" in text and "40% utilisation" in text
    pretrain = re.search(r"^\| `pretrain_model` \| 12 \| 1 \|", text, re.M)
    assert pretrain, text[-2000:]
    total = re.search(
        r"^\| \*\*total\*\* \| \d+ \| \| \| \| \*\*([\d,.]+)\*\* \| ([\d,.]+) \|", text, re.M
    )
    # 12 x 6 x 85M x 1.70B FLOP at 40% of 989 TFLOP/s: 7.3 h of training at the least; the
    # plan adds the head, evaluations and the other stages
    assert 7.3 <= float(total.group(2)) <= 12, total.group(0)
