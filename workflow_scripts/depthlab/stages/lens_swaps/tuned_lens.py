"""Tuned lens (Belrose et al. 2023, "Eliciting Latent Predictions from Transformers with the Tuned
Lens", arXiv 2303.08112) beside the logit lens, read the same way.

For every state h_l (the input of layer l, l = 0..L-1; docs/design.md) a translator
T_l(h) = A_l h + b_l, stored as A_l = I + W_l with W_l, b_l initialised at zero (the identity:
before training the tuned lens is the logit lens), is decoded by the model's own readout
(`readout`: final norm, OPT's project_out, LM head, then a config's `final_logit_softcapping` as
the model's forward applies it). T_l is trained with the model frozen to minimise
KL(p_L || q_l), p_L = softmax(readout(h_L)) the model's output distribution and q_l =
softmax(readout(T_l(h_l))), averaged over tokens of the TRAIN split only (the caller passes
train-split documents; the lens is evaluated on held-out ones). h_L itself is the output: its
lens is the identity, so state L has no translator and both lenses give KL 0 there.

Where this differs from the paper's defaults, and why:

  paper                                          here
  SGD, Nesterov momentum 0.9, lr 1.0             Adam (`lr`, default 1e-3), betas (0.9, 0.999)
  250 steps of 2^18 tokens, a fresh stream       `steps` steps of `batch_tokens` tokens drawn
                                                 (seeded) from a fixed pool of `train_tokens`
                                                 train-split tokens, re-used across steps
  linear decay of the lr to 0                    the same
  identity init                                  the same

The paper's budget is 65M tokens per layer. Here the vocabulary projection of every layer's
state, forward and backward to the state, dominates: ~0.11 GFLOP per token and layer for
SmolLM2-135M's 576 x 49152 head, so on one CPU thread the default suite trains on a few
thousand token-steps per layer. At that scale plain SGD at lr 1.0 with momentum barely leaves
the identity (its step is the raw gradient, small for most of W), while Adam's per-parameter
normalisation moves every entry at the rate `lr` from the first step; the linear decay keeps the
last steps small. All layers are trained at once: the loss is the sum over layers of each
layer's mean KL, and Adam is elementwise, so this is exactly L independent trainings sharing the
sampled tokens. The measures are in float64 sums over float32 (or wider) log-probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from depthlab.plan.engine_budgets import LOGIT_CHUNK_ELEMENTS

ACCUMULATE = torch.float64
LENS_MEASURES = ("kl", "cross_entropy", "top1_agreement")
LENSES = ("logit", "tuned")


def readout(adapter):
    """h -> the model's logits on h (cast to the head's dtype), at least float32: final norm,
    project_out, LM head and the config's final_logit_softcapping (Gemma 2/3:
    cap * tanh(logits / cap)) as its forward does."""
    cap = getattr(getattr(adapter.model, "config", None), "final_logit_softcapping", None)
    # the head reads states in its own dtype (a bf16 model's head would reject the float32 pool
    # of the lens' training); autograd flows through the cast
    dtype = getattr(getattr(getattr(adapter, "lm_head", None), "weight", None), "dtype", None)

    def read(hidden: torch.Tensor) -> torch.Tensor:
        logits = adapter.logits(hidden if dtype is None else hidden.to(dtype))
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return torch.tanh(logits / cap) * cap if cap else logits

    return read


class Translators(nn.Module):
    """One affine translator per state l = 0..L-1: T_l(h) = h + h W_l^T + b_l (A_l = I + W_l),
    W and b zero at initialisation, float32."""

    def __init__(self, num_layers: int, hidden_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_layers, hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.zeros(num_layers, hidden_size))

    @property
    def num_layers(self) -> int:
        return self.weight.shape[0]

    def forward(self, layer: int, hidden: torch.Tensor) -> torch.Tensor:
        h = hidden.to(self.weight.dtype)
        return h + h @ self.weight[layer].T + self.bias[layer]

    def matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(A, b): A[l] = I + W_l (L, d, d), b (L, d)."""
        eye = torch.eye(self.weight.shape[-1], dtype=self.weight.dtype, device=self.weight.device)
        return (self.weight.detach() + eye).clone(), self.bias.detach().clone()

    @classmethod
    def from_matrices(cls, A: torch.Tensor, b: torch.Tensor) -> Translators:
        translators = cls(A.shape[0], A.shape[-1])
        with torch.no_grad():
            translators.weight.copy_(A.float() - torch.eye(A.shape[-1]))
            translators.bias.copy_(b.float())
        return translators


@dataclass(frozen=True)
class LensSettings:
    """The tuned lens' training (see the module docstring for the paper's values)."""

    train_tokens: int = 2048  # train-split tokens captured once (the pool)
    steps: int = 32
    batch_tokens: int = 64  # tokens per step, drawn from the pool
    lr: float = 1.0e-3
    seed: int = 0


@dataclass
class TrainingLog:
    steps: int
    lr: float
    batch_tokens: int
    pool_tokens: int
    optimizer: str
    schedule: str
    loss: list[float]  # per step: the mean over layers of each layer's mean KL (nats)
    lr_per_step: list[float] = field(default_factory=list)  # the lr each step ran with
    final_layer_loss: list[float] = field(default_factory=list)  # per layer, the last step's
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(vars(self))


def _chunk_layers(num_layers: int, tokens: int, vocab: int, device: torch.device) -> int:
    budget = LOGIT_CHUNK_ELEMENTS.get(device.type, LOGIT_CHUNK_ELEMENTS["cpu"])
    return max(1, min(num_layers, budget // max(1, tokens * vocab)))


def train_translators(
    adapter, pool: torch.Tensor, settings: LensSettings, log=None
) -> tuple[Translators, TrainingLog]:
    """Train one translator per state l < L on `pool` (L+1, N, d): the states of N train-split
    tokens, pool[L] the last layer's output. The model is frozen (its parameters stop asking
    for gradients). Deterministic for a seed on CPU."""
    import time

    start = time.perf_counter()
    num_states, tokens, hidden = pool.shape
    L = num_states - 1
    if tokens == 0:
        raise ValueError("tuned lens: no training tokens")
    adapter.model.requires_grad_(False)
    read = readout(adapter)
    device = pool.device
    translators = Translators(L, hidden).to(device)
    optimizer = torch.optim.Adam(translators.parameters(), lr=settings.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, 1.0 - step / settings.steps)
    )
    generator = torch.Generator().manual_seed(settings.seed)
    batch = min(settings.batch_tokens, tokens)
    losses, lrs, layer_losses = [], [], np.zeros(L)
    vocab = None
    for step in range(settings.steps):
        index = torch.randperm(tokens, generator=generator)[:batch].to(device)
        states = pool.index_select(1, index)
        with torch.no_grad():
            final = torch.log_softmax(read(states[L]), dim=-1)
            p_final = final.exp()
        vocab = final.shape[-1]
        optimizer.zero_grad(set_to_none=True)
        chunk = _chunk_layers(L, batch, vocab, device)
        total = 0.0
        for first in range(0, L, chunk):
            layers = range(first, min(L, first + chunk))
            translated = torch.stack([translators(l, states[l]) for l in layers])
            logq = torch.log_softmax(read(translated.to(pool.dtype)), dim=-1)
            kl = (p_final * (final - logq)).sum(-1).mean(-1)  # per layer
            kl.sum().backward()
            layer_losses[first : first + len(layers)] = kl.detach().double().cpu().numpy()
            total += float(kl.detach().sum())
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
        losses.append(total / max(L, 1))
        if log is not None and (step % 10 == 0 or step == settings.steps - 1):
            log(f"tuned lens step {step}: mean KL over layers {losses[-1]:.4f}")
    training = TrainingLog(
        steps=settings.steps,
        lr=settings.lr,
        batch_tokens=batch,
        pool_tokens=tokens,
        optimizer="adam",
        schedule="linear decay to 0",
        loss=losses,
        lr_per_step=lrs,
        final_layer_loss=layer_losses.tolist(),
        seconds=round(time.perf_counter() - start, 3),
    )
    translators.requires_grad_(False)
    return translators, training


# ---------------------------------------------------------------------------------------------
# The measures of both lenses


def lens_measures(logp_lens: torch.Tensor, logp_final: torch.Tensor, targets: torch.Tensor):
    """Per token (..., n): KL(p_final || q), -log q(target), [argmax q == argmax p_final]."""
    kl = (logp_final.exp() * (logp_final - logp_lens)).sum(-1)
    ce = -logp_lens.gather(-1, targets.expand(*logp_lens.shape[:-1]).unsqueeze(-1)).squeeze(-1)
    agree = (logp_lens.argmax(-1) == logp_final.argmax(-1)).to(kl.dtype)
    return kl, ce, agree


class LensStatistics:
    """Sums of the LENS_MEASURES of both lenses per state l = 0..L (float64)."""

    def __init__(self, num_layers: int, translators: Translators | None):
        self.L = num_layers
        self.translators = translators
        self.sums = {
            (lens, m): torch.zeros(num_layers + 1, dtype=ACCUMULATE)
            for lens in LENSES
            for m in LENS_MEASURES
        }
        self.tokens = 0

    def add(self, read, states: torch.Tensor, targets: torch.Tensor) -> None:
        """states (L+1, n, d): the states of n tokens; targets (n,): each token's next token."""
        n = states.shape[1]
        if n == 0:
            return
        targets = targets.to(states.device)
        logp_final = torch.log_softmax(read(states[self.L]), dim=-1)
        vocab = logp_final.shape[-1]
        chunk = _chunk_layers(self.L + 1, n, vocab, states.device)
        for lens in LENSES:
            if lens == "tuned" and self.translators is None:
                continue
            for first in range(0, self.L + 1, chunk):
                layers = range(first, min(self.L + 1, first + chunk))
                if lens == "tuned":
                    stacked = torch.stack(
                        [
                            self.translators(l, states[l]).to(states.dtype) if l < self.L
                            else states[l]
                            for l in layers
                        ]
                    )  # fmt: skip
                else:
                    stacked = states[first : first + len(layers)]
                logp = torch.log_softmax(read(stacked), dim=-1)
                for name, value in zip(LENS_MEASURES, lens_measures(logp, logp_final, targets)):
                    self.sums[(lens, name)][first : first + len(layers)] += (
                        value.to(ACCUMULATE).sum(-1).cpu()
                    )
        self.tokens += n

    def frame(self, **labels):
        """Tidy: lens, measure, layer (state l), value (mean over tokens), count."""
        import pandas as pd

        rows = []
        for (lens, name), sums in self.sums.items():
            if lens == "tuned" and self.translators is None:
                continue
            for l, total in enumerate(sums.tolist()):
                value = total / self.tokens if self.tokens else math.nan
                rows.append((lens, name, l, value, self.tokens))
        frame = pd.DataFrame(rows, columns=["lens", "measure", "layer", "value", "count"])
        for key, value in reversed(labels.items()):
            frame.insert(0, key, value)
        return frame
