"""Hidden-state measures of the four papers, accumulated while the residual stream streams past.

One pass computes, for h_l = input of layer l (h_L = last layer output before the final norm),
a_l / m_l = attention / MLP update (see depthlab.models.architectures for their meaning per block type):

  Gromov et al. / Curse of Depth
    angular_distance_last   d(x^l, x^{l+n}) = arccos(cos(x^l, x^{l+n})) / pi on the last non-pad
                            token, averaged over samples (the mean of d, as in Gromov Eq. 7)
    angular_distance_all    the same over every real token (option)
  Curse of Depth (variance growth)
    h_norm, h_mean, h_var   mean ||h_l||; mean and variance of h_l's elements
  Csordas et al. (relative contributions, averaged over tokens)
    attn_rel_norm ||a_l||/||h_l||     mlp_rel_norm ||m_l||/||h_l + a_l||
    block_rel_norm ||h_{l+1} - h_l||/||h_l||
    cos_attn_residual cos(a_l, h_l)   cos_mlp_residual cos(m_l, h_l + a_l)
    cos_update_residual cos(h_{l+1} - h_l, h_l)   cos_adjacent cos(h_{l+1}, h_l)
    logit_lens_kl KL(p_l || p_L), logit_lens_top5 |top5(p_l) & top5(p_L)| / 5,
                  p_l = softmax(lm_head(norm(h_l))); on every k-th real token (k =
                  logit_lens_stride, 1: all), since it costs a vocabulary projection per layer
  Liu et al. (angles, radians, over tokens)
    angle_adjacent theta(h_l, h_{l+1})   angle_update theta(dh_l, dh_{l+1}), dh_l = h_{l+1} - h_l

Everything per token is computed in float64 (at least fp32, as docs/design.md asks; float64 keeps
arccos accurate for nearly parallel states) and summed in float64 on the model's device; means are
sums over counts, the element variance is merged batch by batch (Chan et al.), so the result is
exact and memory is flat in the number of tokens. Cosines are clamped to [-1, 1] before arccos.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from depthlab.plan.engine_budgets import LOGIT_CHUNK_ELEMENTS

STATE_MEASURES = ("h_norm", "h_mean", "h_var")  # per state l = 0..L
LAYER_MEASURES = (  # per layer l = 0..L-1
    "attn_rel_norm",
    "mlp_rel_norm",
    "block_rel_norm",
    "cos_attn_residual",
    "cos_mlp_residual",
    "cos_update_residual",
    "cos_adjacent",
    "angle_adjacent",
)
UPDATE_MEASURES = ("angle_update",)  # per pair of successive updates l = 0..L-2
LOGIT_LENS_MEASURES = ("logit_lens_kl", "logit_lens_top5")  # per state l = 0..L
DISTANCE_MEASURES = ("angular_distance_last", "angular_distance_all")  # per (l, n)

MEASURE_LABELS = {
    "h_norm": r"$\|h_l\|$",
    "h_mean": "mean of $h_l$",
    "h_var": "variance of $h_l$",
    "attn_rel_norm": r"$\|a_l\|/\|h_l\|$",
    "mlp_rel_norm": r"$\|m_l\|/\|h_l+a_l\|$",
    "block_rel_norm": r"$\|h_{l+1}-h_l\|/\|h_l\|$",
    "cos_attn_residual": r"cos$(a_l, h_l)$",
    "cos_mlp_residual": r"cos$(m_l, h_l+a_l)$",
    "cos_update_residual": r"cos$(h_{l+1}-h_l, h_l)$",
    "cos_adjacent": r"cos$(h_{l+1}, h_l)$",
    "angle_adjacent": r"$\theta(h_l, h_{l+1})$ [rad]",
    "angle_update": r"$\theta(\Delta h_l, \Delta h_{l+1})$ [rad]",
    "logit_lens_kl": r"KL$(p_l \,\|\, p_L)$",
    "logit_lens_top5": "top-5 overlap with $p_L$",
    "angular_distance_last": "angular distance (last token)",
    "angular_distance_all": "angular distance (all tokens)",
}

ACCUMULATE = torch.float64
TINY = 1e-300
ALL_TOKEN_CHUNK = 4096  # tokens per Gram chunk of the all-token distance


def _norm(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x, dim=-1)


def _cos(x, y, norm_x, norm_y) -> torch.Tensor:
    return (x * y).sum(-1) / (norm_x * norm_y).clamp_min(TINY)


def _angle(cos: torch.Tensor) -> torch.Tensor:
    return torch.arccos(cos.clamp(-1.0, 1.0))


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of the last real token of every row, whatever the padding side."""
    mask = attention_mask.bool()
    if not mask.any(dim=1).all():
        raise ValueError("a batch row has no real token (attention_mask all zero)")
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.where(mask, positions, -1).max(dim=1).values


@dataclass
class AnalysisResult:
    """Means of every measure (numpy float64) with the counts they average over."""

    num_layers: int
    samples: int
    tokens: int
    per_state: dict[str, np.ndarray]  # STATE_MEASURES (+ logit lens), length L+1
    per_layer: dict[str, np.ndarray]  # LAYER_MEASURES, length L
    per_update: dict[str, np.ndarray]  # UPDATE_MEASURES, length L-1
    angular_distance_last: np.ndarray  # (L+1, L+1), mean over samples
    cos_last: np.ndarray  # (L+1, L+1), mean cosine over samples
    angular_distance_all: np.ndarray | None  # (L+1, L+1), mean over tokens
    logit_lens_tokens: int = 0  # tokens the logit lens averaged over
    notes: list[str] = field(default_factory=list)

    def distance_table(self, matrix: np.ndarray) -> list[tuple[int, int, float]]:
        """(l, n, d(x^l, x^{l+n})) for 0 <= l < l+n <= L: the Gromov / CoD heatmap layout."""
        L = self.num_layers
        return [(l, n, float(matrix[l, l + n])) for l in range(L) for n in range(1, L - l + 1)]

    def to_frame(self, **labels):
        """Tidy table: one row per (measure, layer[, n]) with its value and count."""
        import pandas as pd

        rows = []
        for name, values in self.per_state.items():
            count = self.logit_lens_tokens if name in LOGIT_LENS_MEASURES else self.tokens
            rows += [(name, l, None, v, count) for l, v in enumerate(values)]
        for group in (self.per_layer, self.per_update):
            for name, values in group.items():
                rows += [(name, l, None, v, self.tokens) for l, v in enumerate(values)]
        rows += [
            ("angular_distance_last", l, n, v, self.samples)
            for l, n, v in self.distance_table(self.angular_distance_last)
        ]
        if self.angular_distance_all is not None:
            rows += [
                ("angular_distance_all", l, n, v, self.tokens)
                for l, n, v in self.distance_table(self.angular_distance_all)
            ]
        frame = pd.DataFrame(rows, columns=["measure", "layer", "n", "value", "count"])
        frame["n"] = frame["n"].astype("Int64")
        for key, value in reversed(labels.items()):
            frame.insert(0, key, value)
        return frame


class ResidualStreamStatistics:
    """Streaming consumer of depthlab.stages.residual_stream: accumulates every measure batch by batch.

    readout: h -> logits (adapter.logits) to enable the logit lens, None to skip it;
    logit_lens_stride: the lens reads every k-th real token of the pass (1: all of them).
    all_token_distance: also accumulate the angular-distance matrix over every real token; this
    keeps (L+1) unit copies of the batch's real tokens until the batch ends (memory ~ batch).
    """

    def __init__(
        self,
        num_layers: int,
        readout=None,
        all_token_distance: bool = False,
        logit_lens_stride: int = 1,
    ):
        if logit_lens_stride < 1:
            raise ValueError(f"logit_lens_stride: must be at least 1, got {logit_lens_stride}")
        self.L = num_layers
        self.readout = readout
        self.logit_lens_stride = logit_lens_stride
        self.lens_tokens = 0
        self.all_token_distance = all_token_distance
        self.samples = 0
        self.tokens = 0
        self._sums: dict[str, torch.Tensor] | None = None
        self._vocab: int | None = None
        self._batch_open = False

    # -- accumulators ---------------------------------------------------------------------------
    def _init_sums(self, device) -> None:
        zeros = lambda *shape: torch.zeros(shape, dtype=ACCUMULATE, device=device)  # noqa: E731
        L = self.L
        self._sums = {name: zeros(L + 1) for name in ("h_norm",)}
        self._sums.update({name: zeros(L) for name in LAYER_MEASURES})
        self._sums["angle_update"] = zeros(max(L - 1, 0))
        self._sums.update({name: zeros(L + 1) for name in LOGIT_LENS_MEASURES})
        self._elem_mean = zeros(L + 1)
        self._elem_m2 = zeros(L + 1)
        self._elem_count = 0
        self._dist_last = zeros(L + 1, L + 1)
        self._cos_last = zeros(L + 1, L + 1)
        self._dist_all = zeros(L + 1, L + 1)

    # -- consumer interface ---------------------------------------------------------------------
    def begin_batch(self, attention_mask: torch.Tensor) -> None:
        if self._sums is None:
            self._init_sums(attention_mask.device)
        batch, length = attention_mask.shape
        self._valid = attention_mask.reshape(-1).nonzero().squeeze(1)
        if self.readout is not None:
            # every k-th real token of the whole pass, counted across batches
            offsets = torch.arange(self._valid.numel(), device=attention_mask.device) + self.tokens
            self._lens_index = (offsets % self.logit_lens_stride == 0).nonzero().squeeze(1)
        self._last = torch.arange(batch, device=attention_mask.device) * length + last_token_index(
            attention_mask
        )
        self._batch = batch
        self._next_state = 0
        self._h_prev = self._dh_prev = self._a = self._m = None
        self._last_states, self._lens_states, self._unit_states = [], [], []
        self._batch_open = True

    def _select(self, tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return tensor.reshape(-1, tensor.shape[-1]).index_select(0, index)

    def attention_update(self, layer: int, update: torch.Tensor) -> None:
        self._a = (layer, self._select(update, self._valid).to(ACCUMULATE))

    def mlp_update(self, layer: int, update: torch.Tensor) -> None:
        self._m = (layer, self._select(update, self._valid).to(ACCUMULATE))

    def state(self, layer: int, hidden: torch.Tensor) -> None:
        if not self._batch_open or layer != self._next_state:
            raise RuntimeError(
                f"residual state {layer} arrived out of order "
                f"(expected {self._next_state}); are the hooks on the right layers?"
            )
        self._next_state += 1
        selected = self._select(hidden, self._valid)
        self._hidden_size = selected.shape[-1]
        h = selected.to(ACCUMULATE)
        norm = _norm(h)
        self._add_state_statistics(layer, h, norm)
        self._last_states.append(self._select(hidden, self._last).to(ACCUMULATE))
        if self.readout is not None:
            # model dtype: the head reads what the model itself would read
            self._lens_states.append(
                selected
                if self.logit_lens_stride == 1
                else selected.index_select(0, self._lens_index)
            )
        if self.all_token_distance:
            self._unit_states.append(h / norm.clamp_min(TINY).unsqueeze(-1))
        if layer > 0:
            self._add_layer_statistics(layer - 1, *self._h_prev, h, norm)
        self._h_prev = (h, norm)

    def end_batch(self) -> None:
        if self._next_state != self.L + 1:
            raise RuntimeError(
                f"batch ended after {self._next_state} of {self.L + 1} residual "
                f"states; the forward pass skipped layers"
            )
        self._add_distances()
        if self.readout is not None:
            self._add_logit_lens()
        self.samples += self._batch
        self.tokens += int(self._valid.numel())
        self._elem_count += int(self._valid.numel()) * self._hidden_size
        self._h_prev = self._dh_prev = self._a = self._m = None
        self._last_states, self._lens_states, self._unit_states = [], [], []
        self._batch_open = False

    # -- per-batch statistics -------------------------------------------------------------------
    def _add_state_statistics(self, l: int, h: torch.Tensor, norm: torch.Tensor) -> None:
        self._sums["h_norm"][l] += norm.sum()
        # Chan et al. merge of (count, mean, M2) keeps the element variance exact and stable
        count_a, count_b = self._elem_count, h.numel()
        total = count_a + count_b
        mean_b = h.mean()
        delta = mean_b - self._elem_mean[l]
        self._elem_mean[l] += delta * (count_b / total)
        self._elem_m2[l] += ((h - mean_b) ** 2).sum() + delta * delta * (count_a * count_b / total)

    def _add_layer_statistics(self, l, h, norm_h, h_next, norm_next) -> None:
        (layer_a, a), (layer_m, m) = self._a, self._m
        if layer_a != l or layer_m != l:
            raise RuntimeError(
                f"layer {l}: attention/MLP updates missing (got layers "
                f"{layer_a}, {layer_m}); check the adapter's module paths"
            )
        sums = self._sums
        norm_a, norm_m = _norm(a), _norm(m)
        residual = (
            h + a
        )  # what the MLP update joins (see depthlab.models.architectures for Post-LN/parallel)
        norm_r = _norm(residual)
        update = h_next - h
        norm_u = _norm(update)
        safe_h = norm_h.clamp_min(TINY)
        sums["attn_rel_norm"][l] += (norm_a / safe_h).sum()
        sums["mlp_rel_norm"][l] += (norm_m / norm_r.clamp_min(TINY)).sum()
        sums["block_rel_norm"][l] += (norm_u / safe_h).sum()
        sums["cos_attn_residual"][l] += _cos(a, h, norm_a, norm_h).sum()
        sums["cos_mlp_residual"][l] += _cos(m, residual, norm_m, norm_r).sum()
        sums["cos_update_residual"][l] += _cos(update, h, norm_u, norm_h).sum()
        cos_adjacent = _cos(h_next, h, norm_next, norm_h)
        sums["cos_adjacent"][l] += cos_adjacent.sum()
        sums["angle_adjacent"][l] += _angle(cos_adjacent).sum()
        if self._dh_prev is not None:
            prev, norm_prev = self._dh_prev
            sums["angle_update"][l - 1] += _angle(_cos(prev, update, norm_prev, norm_u)).sum()
        self._dh_prev = (update, norm_u)

    def _add_distances(self) -> None:
        states = torch.stack(self._last_states, dim=1)  # (B, L+1, d)
        units = states / _norm(states).clamp_min(TINY).unsqueeze(-1)
        cos = (units @ units.transpose(1, 2)).clamp(-1.0, 1.0)
        self._cos_last += cos.sum(0)
        self._dist_last += (torch.arccos(cos) / math.pi).sum(0)
        if self.all_token_distance:
            units = torch.stack(self._unit_states, dim=1)  # (N, L+1, d)
            for start in range(0, units.shape[0], ALL_TOKEN_CHUNK):
                chunk = units[start : start + ALL_TOKEN_CHUNK]
                cos = (chunk @ chunk.transpose(1, 2)).clamp(-1.0, 1.0)
                self._dist_all += (torch.arccos(cos) / math.pi).sum(0)

    def _add_logit_lens(self) -> None:
        states = torch.stack(self._lens_states)  # (L+1, n, d), model dtype
        count = states.shape[1]
        if count == 0:
            return
        if self._vocab is None:
            self._vocab = self.readout(states[-1, :1]).shape[-1]
        budget = LOGIT_CHUNK_ELEMENTS.get(states.device.type, LOGIT_CHUNK_ELEMENTS["cpu"])
        chunk = max(1, budget // ((self.L + 1) * self._vocab))
        k = min(5, self._vocab)
        for start in range(0, count, chunk):
            logits = self.readout(states[:, start : start + chunk])  # all layers, one projection
            dtype = torch.promote_types(logits.dtype, torch.float32)  # fp32 at least
            logits = logits.to(dtype)
            logp = torch.log_softmax(logits, dim=-1)
            p = logp.exp()
            # KL(p_l || p_L), differences first: no cancellation when p_l is close to p_L
            kl = (p * (logp - logp[-1])).sum(-1)
            top = logits.topk(k, dim=-1).indices
            overlap = (top.unsqueeze(-1) == top[-1].unsqueeze(-2)).sum((-2, -1)) / k
            self._sums["logit_lens_kl"] += kl.to(ACCUMULATE).sum(-1)
            self._sums["logit_lens_top5"] += overlap.to(ACCUMULATE).sum(-1)
        self.lens_tokens += count

    # -- result ---------------------------------------------------------------------------------
    def result(self) -> AnalysisResult:
        if self.samples == 0:
            raise ValueError("no batches were analysed (empty text set?)")
        to_numpy = lambda t: t.detach().cpu().numpy()  # noqa: E731
        sums, tokens = self._sums, self.tokens
        per_state = {
            "h_norm": to_numpy(sums["h_norm"] / tokens),
            "h_mean": to_numpy(self._elem_mean),
            "h_var": to_numpy(self._elem_m2 / self._elem_count),
        }
        if self.readout is not None:
            per_state.update(
                {
                    name: to_numpy(sums[name] / max(self.lens_tokens, 1))
                    for name in LOGIT_LENS_MEASURES
                }
            )
        per_layer = {name: to_numpy(sums[name] / tokens) for name in LAYER_MEASURES}
        per_update = {"angle_update": to_numpy(sums["angle_update"] / tokens)}
        dist_last = to_numpy(self._dist_last / self.samples)
        np.fill_diagonal(dist_last, 0.0)
        dist_all = None
        if self.all_token_distance:
            dist_all = to_numpy(self._dist_all / tokens)
            np.fill_diagonal(dist_all, 0.0)
        return AnalysisResult(
            num_layers=self.L,
            samples=self.samples,
            tokens=tokens,
            per_state=per_state,
            per_layer=per_layer,
            per_update=per_update,
            angular_distance_last=dist_last,
            cos_last=to_numpy(self._cos_last / self.samples),
            angular_distance_all=dist_all,
            logit_lens_tokens=self.lens_tokens,
        )


def analyse(
    adapter,
    batches,
    logit_lens: bool = True,
    all_token_distance: bool = False,
    logit_lens_stride: int = 1,
) -> AnalysisResult:
    """One streamed pass of `adapter`'s model over `batches`: every measure of this module."""
    from depthlab.stages.residual_stream import stream_residuals

    readout = adapter.logits if (logit_lens and adapter.has_lm_head) else None
    statistics = ResidualStreamStatistics(
        adapter.num_layers,
        readout=readout,
        all_token_distance=all_token_distance,
        logit_lens_stride=logit_lens_stride,
    )
    stream_residuals(adapter, batches, statistics)
    result = statistics.result()
    result.notes.extend(adapter.notes)
    if logit_lens and not adapter.has_lm_head:
        result.notes.append("logit lens skipped: the model has no LM head")
    return result
