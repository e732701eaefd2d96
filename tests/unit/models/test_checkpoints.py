"""Checkpoints written by depthlab.models.decoders.save_checkpoint load where depthlab is not installed:
plain `LlamaForCausalLM` for pre_ln / lns / scaled_init, and for post_ln / mix_ln / deepnorm
the transformers custom-code convention (modeling file beside the weights, config.auto_map,
`trust_remote_code=True`), both with transformers' Auto classes and with lm-eval's HFLM.

Every load runs in a subprocess with PYTHONPATH cleared and its working directory outside the
repository, which first asserts that `depthlab` cannot be imported there at all.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from depthlab.models import decoders as models
from test_models import ARCHS
from tiny_models import large_weights

VOCAB = 40
# test_models.py's GQA architecture (rope_theta 500, 4 layers); Mix-LN's fraction per case below
ARCH = {k: v for k, v in ARCHS["gqa"].items() if k != "mix_ln_post_fraction"}
# One case per scheme, plus DeepNorm's LayerNorm-Scaling-reference variant.
CASES = {scheme: (scheme, {}) for scheme in models.NORM_SCHEMES}
CASES["mix_ln"] = ("mix_ln", {"mix_ln_post_fraction": 0.25})
CASES["deepnorm_lns_reference"] = ("deepnorm", {"deepnorm_variant": "lns_reference"})
TOL = 1e-5  # float32; max |logit| is ~5 with the weights below

# One subprocess (one start of torch and transformers) loads every case with the Auto
# classes, then one custom-code case with lm-eval.
LOADER = textwrap.dedent("""
    import importlib.util, json, sys
    # depthlab is installed in the venv (editable): hide it, as on a machine without it
    sys.modules["depthlab"] = None
    try:
        import depthlab  # noqa: F401
    except ImportError:
        pass
    else:
        raise AssertionError("depthlab is importable here")
    import numpy as np
    import torch
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM
    job = json.loads(sys.argv[1])
    ids = torch.tensor(np.load(job["ids"]))
    report = {"auto": {}}
    for name, case in job["cases"].items():
        extra = {"trust_remote_code": True} if case["custom_code"] else {}
        model, info = AutoModelForCausalLM.from_pretrained(case["dir"], output_loading_info=True,
                                                           **extra)
        with torch.no_grad():
            logits = model.eval()(ids).logits
        np.save(case["logits"], logits.numpy())
        report["auto"][name] = {
            "class": type(model).__name__, "module": type(model).__module__,
            "loading_problems": {k: sorted(map(str, v)) for k, v in info.items() if v}}

    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    request = job["lm_eval"]
    lm = HFLM(pretrained=request["dir"], trust_remote_code=True, device="cpu", batch_size=1,
              dtype="float32")
    (loglikelihood, _), = lm.loglikelihood(
        [Instance(request_type="loglikelihood", doc={}, idx=0,
                  arguments=(request["context"], request["continuation"]))], disable_tqdm=True)
    report["lm_eval"] = {"class": type(lm.model).__name__, "loglikelihood": loglikelihood}

    assert not any(name.split(".")[0] == "depthlab" and sys.modules[name] is not None for name in sys.modules)
    print(json.dumps(report))
""")
LM_EVAL_CASE, CONTEXT, CONTINUATION = "mix_ln", "w3 w17 w5 w9", " w22 w1 w30"


def word_tokenizer():
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tokenizer_models
    from transformers import PreTrainedTokenizerFast

    words = ["<eos>", *(f"w{i}" for i in range(VOCAB - 1))]
    tokenizer = Tokenizer(
        tokenizer_models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<eos>")
    )
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", pad_token="<eos>")


def isolated_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_MODULES_CACHE=str(tmp_path / "hf_modules"),
    )
    return env


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Each case: a seeded model with large weights, saved by save_checkpoint with a tokenizer."""
    root = tmp_path_factory.mktemp("checkpoints")
    tokenizer = word_tokenizer()
    out = {}
    for index, (name, (scheme, extra)) in enumerate(CASES.items()):
        config = models.make_config(
            {**ARCH, **extra},
            scheme,
            vocab_size=VOCAB,
            max_positions=32,
            eos_token_id=0,
            pad_token_id=0,
        )
        model = models.build_model(config, seed=index).eval()
        model.load_state_dict(large_weights(model, seed=100 + index))
        models.save_checkpoint(model, tokenizer, root / name)
        out[name] = dict(model=model, dir=root / name, scheme=scheme)
    return out


@pytest.fixture(scope="module")
def loaded(saved, tmp_path_factory):
    """What the isolated subprocess saw: its report, the input ids, the folder of its logits."""
    work = tmp_path_factory.mktemp("isolated")
    ids = torch.randint(1, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    np.save(work / "ids.npy", ids.numpy())
    job = {
        "ids": str(work / "ids.npy"),
        "cases": {
            name: {
                "dir": str(item["dir"]),
                "logits": str(work / f"{name}.npy"),
                "custom_code": item["scheme"] not in models.PLAIN_LLAMA_SCHEMES,
            }
            for name, item in saved.items()
        },
        "lm_eval": {
            "dir": str(saved[LM_EVAL_CASE]["dir"]),
            "context": CONTEXT,
            "continuation": CONTINUATION,
        },
    }
    env = isolated_env(work)
    result = subprocess.run(
        [sys.executable, "-c", LOADER, json.dumps(job)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), ids, work


def test_every_scheme_loads_without_depthlab_with_identical_logits(saved, loaded):
    report, ids, work = loaded
    for name, item in saved.items():
        entry = report["auto"][name]
        assert entry["loading_problems"] == {}, name
        config = json.loads((item["dir"] / "config.json").read_text())
        if item["scheme"] not in models.PLAIN_LLAMA_SCHEMES:
            assert entry["class"] == "DepthlabForCausalLM", name
            assert entry["module"].startswith("transformers_modules."), name  # the saved copy
            assert config["auto_map"] == {
                "AutoConfig": "modeling_depthlab.DepthlabConfig",
                "AutoModelForCausalLM": "modeling_depthlab.DepthlabForCausalLM",
            }, name
            assert (item["dir"] / "modeling_depthlab.py").is_file(), name
        else:
            assert entry["class"] == "LlamaForCausalLM", name
            assert "auto_map" not in config and not list(item["dir"].glob("*.py")), name
        with torch.no_grad():
            want = item["model"](ids).logits.numpy()
        got = np.load(work / f"{name}.npy")
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.abs(got - want).max() <= TOL, f"{name}: logits differ after loading"
    # the variant is recorded and loaded, not recomputed as DeepNet's alpha
    variant = json.loads((saved["deepnorm_lns_reference"]["dir"] / "config.json").read_text())
    assert variant["deepnorm_variant"] == "lns_reference"
    assert (
        np.abs(np.load(work / "deepnorm_lns_reference.npy") - np.load(work / "deepnorm.npy")).max()
        > 1e-2
    )


def test_lm_eval_loads_a_custom_code_checkpoint_by_path(saved, loaded):
    report = loaded[0]["lm_eval"]
    assert report["class"] == "DepthlabForCausalLM"
    # independent: sum over the continuation of log p(token | everything before it); the
    # tokenizer maps word w<i> to id i + 1
    context_ids = [int(w[1:]) + 1 for w in CONTEXT.split()]
    continuation_ids = [int(w[1:]) + 1 for w in CONTINUATION.split()]
    ids = torch.tensor([context_ids + continuation_ids])
    with torch.no_grad():
        log_probs = torch.log_softmax(saved[LM_EVAL_CASE]["model"](ids).logits[0].double(), -1)
    want = sum(
        log_probs[len(context_ids) - 1 + i, token].item()
        for i, token in enumerate(continuation_ids)
    )
    assert abs(report["loglikelihood"] - want) <= 1e-4
