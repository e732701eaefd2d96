"""Tiny randomly initialised models of every architecture family the analysis adapter supports,
built from configs (no download). Shared by test_architectures.py and test_analysis.py; and Oracle,
a causal LM stub that continues known sequences (test_problem_sets.py, test_benchmark_problems.py)."""

from __future__ import annotations

import math

import torch
import transformers as tf
from depthlab.core import norm_schemes

VOCAB = 96
HIDDEN = 32
LAYERS = 3
HEADS = 4
FFN = 48
POSITIONS = 64

_DECODER = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=FFN,
    max_position_embeddings=POSITIONS,
)

HF_FAMILIES = {
    # name: (config class, kwargs, model class)
    "llama": (tf.LlamaConfig, dict(_DECODER, num_key_value_heads=2), tf.LlamaForCausalLM),
    "mistral": (
        tf.MistralConfig,
        dict(_DECODER, num_key_value_heads=2, sliding_window=None),
        tf.MistralForCausalLM,
    ),
    "qwen2": (tf.Qwen2Config, dict(_DECODER, num_key_value_heads=2), tf.Qwen2ForCausalLM),
    "qwen3": (
        tf.Qwen3Config,
        dict(_DECODER, num_key_value_heads=2, head_dim=8),
        tf.Qwen3ForCausalLM,
    ),
    "olmo": (tf.OlmoConfig, dict(_DECODER, bos_token_id=1, eos_token_id=2), tf.OlmoForCausalLM),
    "olmo2": (tf.Olmo2Config, dict(_DECODER), tf.Olmo2ForCausalLM),
    "gpt_neox": (
        tf.GPTNeoXConfig,
        dict(_DECODER, rotary_pct=0.5, use_parallel_residual=True),
        tf.GPTNeoXForCausalLM,
    ),
    "gpt_neox_sequential": (
        tf.GPTNeoXConfig,
        dict(_DECODER, rotary_pct=0.5, use_parallel_residual=False),
        tf.GPTNeoXForCausalLM,
    ),
    "gpt2": (
        tf.GPT2Config,
        dict(
            vocab_size=VOCAB,
            n_embd=HIDDEN,
            n_layer=LAYERS,
            n_head=HEADS,
            n_positions=POSITIONS,
            bos_token_id=1,
            eos_token_id=2,
        ),
        tf.GPT2LMHeadModel,
    ),
    # word_embed_proj_dim != hidden_size: the readout runs norm -> project_out -> lm_head
    "opt": (
        tf.OPTConfig,
        dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            ffn_dim=FFN,
            max_position_embeddings=POSITIONS,
            word_embed_proj_dim=16,
        ),
        tf.OPTForCausalLM,
    ),
    "opt_post_ln": (
        tf.OPTConfig,
        dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            ffn_dim=FFN,
            max_position_embeddings=POSITIONS,
            do_layer_norm_before=False,
        ),
        tf.OPTForCausalLM,
    ),
    "bert": (tf.BertConfig, dict(_DECODER), tf.BertModel),
}
DEPTHLAB_SCHEMES = norm_schemes.names()
FAMILIES = tuple(HF_FAMILIES) + tuple(f"depthlab_{s}" for s in DEPTHLAB_SCHEMES)
EXPECTED_LAYOUT = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "qwen3": "llama",
    "olmo": "llama",
    "olmo2": "olmo2",
    "gpt_neox": "gpt_neox",
    "gpt_neox_sequential": "gpt_neox",
    "gpt2": "gpt2",
    "opt": "opt",
    "opt_post_ln": "opt",
    "bert": "bert",
    **{f"depthlab_{s}": "llama" for s in DEPTHLAB_SCHEMES},
}


def causal_lm(config_class, model_class, seed: int = 0, eager: bool = True, **fields):
    """A tiny causal LM of `config_class`: the shared sizes (vocabulary VOCAB, hidden 32, 3 layers,
    4 heads and 2 key/value heads, MLP 48, 64 positions) overridden by `fields`, weights seeded,
    eval mode, eager attention unless `eager` is false."""
    torch.manual_seed(seed)
    config = config_class(**{**_DECODER, "num_key_value_heads": 2, **fields})
    if eager:
        config._attn_implementation = "eager"
    return model_class(config).eval()


def llama(layers: int = LAYERS, seed: int = 0, **fields):
    """A tiny LlamaForCausalLM (causal_lm) of `layers` layers."""
    return causal_lm(tf.LlamaConfig, tf.LlamaForCausalLM, seed, num_hidden_layers=layers, **fields)


def _randomise_gains(model: torch.nn.Module, seed: int) -> None:
    """Random norm gains and biases, so no norm is an identity and every bias matters."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.ndim == 1:
                centre = 1.0 if name.endswith("weight") else 0.0
                param.copy_(centre + 0.3 * torch.randn(param.shape, generator=generator))


def build(family: str, seed: int = 0, dtype=torch.float32, attn_implementation: str = "eager"):
    """A tiny model of `family` in eval mode."""
    torch.manual_seed(seed)
    if family.startswith("depthlab_"):
        from depthlab.models.decoders import build_model, make_config

        scheme = family[len("depthlab_") :]
        architecture = dict(
            hidden_size=HIDDEN,
            num_layers=LAYERS,
            num_heads=HEADS,
            intermediate_size=FFN,
            mix_ln_post_fraction=0.34,
        )
        config = make_config(architecture, scheme, vocab_size=VOCAB, max_positions=POSITIONS)
        config._attn_implementation = attn_implementation
        model = build_model(config, seed)
    else:
        config_class, kwargs, model_class = HF_FAMILIES[family]
        config = config_class(**kwargs)
        config._attn_implementation = attn_implementation
        model = model_class(config)
    _randomise_gains(model, seed)
    return model.to(dtype).eval()


def random_batch(lengths, padding_side: str = "right", seed: int = 0, vocab: int = VOCAB):
    """input_ids / attention_mask for sequences of the given lengths (pad id 0)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        tokens = torch.randint(1, vocab, (length,), generator=generator)
        span = slice(0, length) if padding_side == "right" else slice(width - length, width)
        ids[row, span] = tokens
        mask[row, span] = 1
    return {"input_ids": ids, "attention_mask": mask}


def large_weights(model: torch.nn.Module, seed: int) -> dict:
    """Weights far from the 0.02 init (O(1) attention logits, residual updates comparable to the
    stream) and norm gains in [0.5, 1.5], so that a dropped residual factor, LNS scale or Post-LN
    placement shows by far more than any tolerance."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith("norm.weight"):
            state[name] = 0.5 + torch.rand(tensor.shape, generator=gen)
        elif name == "model.embed_tokens.weight":
            state[name] = torch.randn(tensor.shape, generator=gen)
        else:
            fan_in = tensor.shape[1]
            state[name] = torch.randn(tensor.shape, generator=gen) * 1.5 / math.sqrt(fan_in)
    return state


class Oracle(torch.nn.Module):
    """A causal LM stub without `generate`: predicts the next token of whichever known sequence
    the row continues (or `constant` when given)."""

    def __init__(self, sequences, vocab, constant=None):
        super().__init__()
        self.sequences, self.vocab, self.constant = sequences, vocab, constant
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask, position_ids=None):
        logits = torch.zeros(*input_ids.shape, self.vocab)
        for row in range(input_ids.shape[0]):
            length = int(attention_mask[row].sum())
            prefix = input_ids[row, :length].tolist()
            for sequence in self.sequences:
                if sequence[:length] == prefix and len(sequence) > length:
                    token = sequence[length] if self.constant is None else self.constant
                    logits[row, length - 1, token] = 1.0
        return type("Out", (), {"logits": logits})()


def byte_level_tokenizer(texts: list[str], vocab_size: int = 400, split_digits: bool = False):
    """A lossless byte-level BPE tokenizer (as Llama 3 / Qwen / GPT-2 use) trained on `texts`;
    split_digits: every digit its own piece, as SmolLM2's and Gemma 3's (" 127" -> " ", "1",
    "2", "7")."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits
        else byte_level
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<pad>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        clean_up_tokenization_spaces=False,
    )


# --------------------------------------------------------------------- a tiny pretraining run


def tiny_pretrain_model(test_config, norm_scheme: str = "pre_ln", num_layers: int = 3, **train):
    """The resolved declaration of a tiny model `tiny` (16 wide, 2 heads) trained on the test
    config's data, with the test config's pretrain defaults updated by `train`."""
    import copy

    from depthlab.config import resolve

    config = copy.deepcopy(test_config)
    for stage in ("pruning", "depth_use", "analysis", "lens_swaps", "scaling", "sweeps"):
        config.pop(stage, None)  # only the tiny model's own resolution matters here
    architecture = {"hidden_size": 16, "num_layers": num_layers, "num_heads": 2,
                    "intermediate_size": 32}  # fmt: skip
    config["models"] = {
        "tiny": {"kind": "pretrain", "norm_scheme": norm_scheme, "architecture": architecture}
    }
    config["pretrain"].update({"seq_len": 16, "batch_size": 4, "log_every": 1, **train})
    return resolve(config).models["tiny"]


def train_tiny(model: dict, data_dir, out, state, seed: int = 0, **options) -> dict:
    """depthlab's pretrain() of a tiny declaration `tiny` on one thread, without progress bars."""
    from depthlab.stages.pretrain.training import pretrain

    return pretrain("tiny", model, data_dir, out, state, seed=seed, threads=1, progress=False,
                    **options)  # fmt: skip
