"""Cross-model linear maps (Csordás et al. 2025): an affine map from every source-layer state of
one model to every target-layer state of another on the same tokens, fitted in closed form.

For source layer i (state x, width d_a) and target layer j (state y, width d_b) the map is the
ridge solution with an unpenalised bias,

    W = (Sxx + lambda I)^-1 Sxy,   b = mean(y) - W^T mean(x),
    Sxx = sum (x - mx)(x - mx)^T,  Sxy = sum (x - mx)(y - my)^T  over the fit tokens,

with lambda = alpha * trace(Sxx) / d_a. The sums are accumulated in float64 while tokens stream
past (after subtracting a fixed shift, the first batch's mean, against cancellation). One
eigendecomposition Sxx = Q diag(e) Q^T per source layer serves every target layer and every
alpha: W(alpha) = Q diag(1 / (e + lambda)) Q^T Sxy. alpha = 0 is the least-squares solution
(eigenvalues below rcond * max(e) are dropped, like numpy.linalg.lstsq).

alpha is chosen per (i, j) on a validation split by its sum of squared errors, computed in
closed form from the validation split's own sums (no second pass per alpha):
    SSE(alpha) = f^T H f - 2 f^T r + c,  f = 1 / (e + lambda),  P = Q^T Sxy,
    H = (Q^T A Q) o (P P^T),  r = rowsum(P o Q^T B),  c = sum ||y - my||^2,
with A, B the validation split's Sxx, Sxy centred at the *fit* means. The reported error is the
mean relative error ||y_hat - y|| / ||y|| over held-out test tokens.

Memory: the accumulators of one block of target layers at a time (fit and validation Sxy per
pair, d_a x d_b float64 each; fit and validation Sxx and the eigenvectors per source layer) are
kept within `max_memory_mb`; with more target layers than fit, the tokens are streamed once per
block. Data is never stored. Only each model's backbone runs (depthlab.stages.residual_stream): no LM
head, so a large vocabulary (Gemma-3's 262k tokens) costs no logits.

Which token states are paired (`alignment`):

- positions: both models read the same token ids (one tokenizer) and token t of the source is
  paired with token t of the target, skip_first real tokens of each document left out. This is
  the paper's setting (Csordás et al. map between models of one family, one tokenizer).
- word_ends: a deviation from the paper, for models with different tokenizers. Each model reads
  the document with its own tokenizer (and its own special tokens, e.g. a BOS in one stream
  only), cut to max_length tokens. A word is a maximal run of non-whitespace characters;
  character index e is a word end. A stream is at e at the last token (in character offsets)
  ending at e that covers characters and is followed by no token starting before e: there the
  model has read exactly text[:e] (a multi-byte character split over byte tokens is paired at
  its last byte; a token that straddles the word end, or ends in whitespace, gives no pair).
  The pairs (i_source, j_target) are the word ends both streams are at, within both cut streams
  and with i, j >= skip_first (each stream's first positions, its attention sink, left out).
  Offsets come from a fast tokenizer; whether a SentencePiece-style piece's offsets include its
  leading space does not matter, as only token ends are compared.

Size: the closed-form fitter, the two-model streaming that feeds it and the word-end alignment
that builds its paired batches; the three share the batch and state layout, so they are read
together.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

ACCUMULATE = torch.float64
SPLITS = ("fit", "val", "test")
# A constant (it decides every document's split): kept as it was when the module moved
SPLIT_SALT = b"depthlab.linear_maps\0"
ALIGNMENTS = ("auto", "positions", "word_ends")


def _bytes_per_pair(d_a: int, d_b: int) -> int:
    return 2 * d_a * d_b * 8  # fit + val cross sums


def _bytes_per_source(d_a: int) -> int:
    return 4 * d_a * d_a * 8  # fit + val Sxx, eigenvectors, workspace


def plan_target_blocks(
    num_sources: int, num_targets: int, d_a: int, d_b: int, max_memory_mb: float
) -> list[list[int]]:
    """Target layers cut into blocks whose accumulators fit in max_memory_mb."""
    budget = max_memory_mb * 2**20 - num_sources * _bytes_per_source(d_a)
    per_target = num_sources * _bytes_per_pair(d_a, d_b)
    if budget < per_target:
        need = (num_sources * (_bytes_per_source(d_a) + _bytes_per_pair(d_a, d_b))) / 2**20
        raise ValueError(
            f"max_memory_mb: {max_memory_mb} MB cannot hold the sums of one target "
            f"layer against {num_sources} source layers (needs {need:.1f} MB)"
        )
    size = max(1, min(num_targets, int(budget // per_target)))
    return [
        list(range(start, min(start + size, num_targets))) for start in range(0, num_targets, size)
    ]


def split_of(text: str, val_fraction: float, test_fraction: float) -> str:
    """Stable split of a document by a salted sha256 of its text: test, then val, else fit.
    (Salted: the data stage picks its val documents by the unsalted hash being small, so the
    unsalted hash of every val.jsonl document is below data.val_fraction.)"""
    digest = hashlib.sha256(SPLIT_SALT + text.encode("utf-8")).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + val_fraction:
        return "val"
    return "fit"


# ---------------------------------------------------------------------------------------------
# The closed-form fitter


class _Moments:
    """Shifted first and second moments of one source layer (and its cross sums)."""

    def __init__(self, d_a: int, targets: dict[int, int], device):
        zeros = lambda *shape: torch.zeros(shape, dtype=ACCUMULATE, device=device)  # noqa: E731
        self.n = 0
        self.sx = zeros(d_a)
        self.sxx = zeros(d_a, d_a)
        self.sy = {j: zeros(d) for j, d in targets.items()}
        self.syy = {j: zeros() for j in targets}
        self.sxy = {j: zeros(d_a, d) for j, d in targets.items()}


class AffineRidgeMaps:
    """Closed-form affine ridge maps from source layers to target layers, streamed.

    add(split, xs, ys): xs[i] (n, d_a) source states, ys[j] (n, d_b) target states of the same
    n tokens, for the source layers `sources` and target layers `targets` given at construction.
    After the fit and val tokens: solve(alphas) picks alpha per pair on val; then test tokens
    go to add("test", ...) (evaluated on the spot) and errors() returns the mean relative error.
    """

    def __init__(
        self,
        sources: list[int],
        targets: list[int],
        alphas=(0.0,),
        rcond: float = 1e-10,
        device="cpu",
    ):
        if not alphas:
            raise ValueError("alphas: at least one ridge strength")
        if any(a < 0 for a in alphas):
            raise ValueError(f"alphas: must be >= 0 (got {list(alphas)})")
        self.sources, self.targets = list(sources), list(targets)
        self.alphas = [float(a) for a in alphas]
        self.rcond = rcond
        self.device = torch.device(device)
        self.shift_x: dict[int, torch.Tensor] = {}
        self.shift_y: dict[int, torch.Tensor] = {}
        self.moments: dict[str, dict[int, _Moments]] = {}
        self.solved = False
        self.test_sum = {}
        self.test_sum_centred = {}
        self.test_count = 0

    # -- accumulation ---------------------------------------------------------------------------
    def _prepare(self, xs, ys) -> None:
        for i in self.sources:
            self.shift_x[i] = xs[i].to(ACCUMULATE).mean(0)
        for j in self.targets:
            self.shift_y[j] = ys[j].to(ACCUMULATE).mean(0)
        for split in ("fit", "val"):
            self.moments[split] = {
                i: _Moments(xs[i].shape[1], {j: ys[j].shape[1] for j in self.targets}, self.device)
                for i in self.sources
            }

    def add(self, split: str, xs, ys) -> None:
        if split not in SPLITS:
            raise ValueError(f"split: {split!r} is not one of {', '.join(SPLITS)}")
        n = next(iter(xs.values()) if isinstance(xs, dict) else iter(xs)).shape[0]
        if n == 0:
            return
        if split == "test":
            self._add_test(xs, ys)
            return
        if self.solved:
            raise RuntimeError("add: fit/val tokens after solve()")
        if not self.moments:
            self._prepare(xs, ys)
        ycs = {j: ys[j].to(self.device, ACCUMULATE) - self.shift_y[j] for j in self.targets}
        for i in self.sources:
            m = self.moments[split][i]
            xc = xs[i].to(self.device, ACCUMULATE) - self.shift_x[i]
            m.n += n
            m.sx += xc.sum(0)
            m.sxx += xc.T @ xc
            for j in self.targets:
                m.sy[j] += ycs[j].sum(0)
                m.syy[j] += (ycs[j] * ycs[j]).sum()
                m.sxy[j] += xc.T @ ycs[j]

    # -- solution -------------------------------------------------------------------------------
    def _filters(self, e: torch.Tensor, d_a: int):
        """1 / (e + lambda) per alpha, with dropped directions for alpha = 0 (rank cut)."""
        scale = float(e.clamp_min(0).sum()) / d_a
        cut = e <= self.rcond * float(e.max().clamp_min(1e-300))
        out = []
        for alpha in self.alphas:
            lam = alpha * scale
            f = 1.0 / (e + lam).clamp_min(1e-300)
            if lam == 0.0:
                f = torch.where(cut, torch.zeros_like(f), f)
            out.append(f)
        return out

    def solve(self) -> None:
        """Factorise each source layer once; choose alpha per pair on val; keep the maps."""
        if "fit" not in self.moments or self.moments["fit"][self.sources[0]].n == 0:
            raise ValueError("no fit tokens were added")
        self.maps: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.val_sse: dict[tuple[int, int], list[float]] = {}
        self.chosen: dict[tuple[int, int], float] = {}
        self.val_tokens = self.moments["val"][self.sources[0]].n
        first = self.moments["fit"][self.sources[0]]
        self.fit_mean_y = {j: first.sy[j] / first.n for j in self.targets}
        for i in self.sources:
            fit, val = self.moments["fit"][i], self.moments["val"][i]
            n = fit.n
            mx = fit.sx / n
            sxx = fit.sxx - n * torch.outer(mx, mx)
            sxx = 0.5 * (sxx + sxx.T)
            e, q = torch.linalg.eigh(sxx)  # the one factorisation of source layer i
            d_a = sxx.shape[0]
            filters = self._filters(e, d_a)
            if val.n:
                # validation sums centred at the fit means
                a = (
                    val.sxx
                    - torch.outer(val.sx, mx)
                    - torch.outer(mx, val.sx)
                    + val.n * torch.outer(mx, mx)
                )
                qaq = q.T @ a @ q
            for j in self.targets:
                my = fit.sy[j] / n
                sxy = fit.sxy[j] - n * torch.outer(mx, my)
                p = q.T @ sxy  # (d_a, d_b)
                sse = []
                if val.n:
                    b = (
                        val.sxy[j]
                        - torch.outer(val.sx, my)
                        - torch.outer(mx, val.sy[j])
                        + val.n * torch.outer(mx, my)
                    )
                    c = val.syy[j] - 2 * (val.sy[j] @ my) + val.n * (my @ my)
                    h = qaq * (p @ p.T)
                    r = (p * (q.T @ b)).sum(1)
                    sse = [float(f @ h @ f - 2 * (f @ r) + c) for f in filters]
                best = int(np.argmin(sse)) if sse else 0
                weight = q @ (filters[best][:, None] * p)  # (d_a, d_b)
                bias = my - mx @ weight
                # in shifted coordinates: y - shift_y = (x - shift_x) W + bias
                self.maps[(i, j)] = (weight, bias)
                self.val_sse[(i, j)] = sse
                self.chosen[(i, j)] = self.alphas[best]
        self.solved = True

    def predict(self, i: int, j: int, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.maps[(i, j)]
        xc = x.to(self.device, ACCUMULATE) - self.shift_x[i]
        return xc @ weight + bias + self.shift_y[j]

    def _add_test(self, xs, ys) -> None:
        if not self.solved:
            raise RuntimeError("add('test', ...): call solve() first")
        n = ys[self.targets[0]].shape[0]
        for i in self.sources:
            xc = xs[i].to(self.device, ACCUMULATE) - self.shift_x[i]
            for j in self.targets:
                weight, bias = self.maps[(i, j)]
                y = ys[j].to(self.device, ACCUMULATE)
                error = xc @ weight + bias + self.shift_y[j] - y
                norm = torch.linalg.vector_norm(error, dim=1)
                relative = norm / torch.linalg.vector_norm(y, dim=1).clamp_min(1e-30)
                # against the target's spread around its fit mean (the mean is free to predict)
                centred = norm / torch.linalg.vector_norm(
                    y - self.shift_y[j] - self.fit_mean_y[j], dim=1
                ).clamp_min(1e-30)
                self.test_sum[(i, j)] = self.test_sum.get((i, j), 0.0) + float(relative.sum())
                self.test_sum_centred[(i, j)] = self.test_sum_centred.get((i, j), 0.0) + float(
                    centred.sum()
                )
        self.test_count += n

    def errors(self, centred: bool = False) -> dict[tuple[int, int], float]:
        """Mean over test tokens of ||y_hat - y|| / ||y|| (centred: / ||y - mean_fit(y)||)."""
        if self.test_count == 0:
            raise ValueError("no test tokens were added")
        sums = self.test_sum_centred if centred else self.test_sum
        return {pair: total / self.test_count for pair, total in sums.items()}


# ---------------------------------------------------------------------------------------------
# Two models, streamed


class _StateCapture:
    """Residual-stream consumer keeping the states of the current batch's selected tokens."""

    def __init__(self, num_layers: int):
        self.L = num_layers
        self.states: list[torch.Tensor] = []
        self.index = None

    def begin_batch(self, attention_mask):
        self.states = []

    def state(self, layer, hidden):
        self.states.append(hidden.reshape(-1, hidden.shape[-1]).index_select(0, self.index))

    def attention_update(self, layer, update):
        pass

    def mlp_update(self, layer, update):
        pass

    def end_batch(self):
        if len(self.states) != self.L + 1:
            raise RuntimeError(f"captured {len(self.states)} of {self.L + 1} residual states")


def selected_tokens(attention_mask: torch.Tensor, skip_first: int) -> torch.Tensor:
    """Flat indices of the real tokens whose real-token index is >= skip_first."""
    mask = attention_mask.bool()
    real = mask.long().cumsum(1) - 1
    return (mask & (real >= skip_first)).reshape(-1).nonzero().squeeze(1)


def states_at(adapter, batch: dict, index: torch.Tensor) -> list:
    """The states h_0..h_L of one padded batch at flat (row * width + column) indices."""
    from depthlab.stages.residual_stream import stream_residuals

    capture = _StateCapture(adapter.num_layers)
    capture.index = index.to(adapter.input_device)
    stream_residuals(adapter, [batch], capture)
    return capture.states


def stream_states(adapter, batches: Iterable[dict], skip_first: int = 0) -> Iterator[list]:
    """Per batch, the states h_0..h_L of the selected real tokens, (n, d) each."""
    for batch in batches:
        yield states_at(adapter, batch, selected_tokens(batch["attention_mask"], skip_first))


# ---------------------------------------------------------------------------------------------
# Word-end alignment of two tokenizations of one text (see the module docstring)


def word_ends(text: str) -> set[int]:
    """Character indices that end a word (a maximal run of non-whitespace characters)."""
    return {match.end() for match in re.finditer(r"\S+", text)}


def word_end_positions(offsets, ends: set[int]) -> dict[int, int]:
    """{e: position} for the ends e in `ends` at which a stream with these (start, end)
    character offsets has read exactly text[:e] (module docstring)."""
    positions: dict[int, int] = {}
    later_start = math.inf  # least start of the character-covering tokens after this one
    for position in range(len(offsets) - 1, -1, -1):
        start, end = offsets[position]
        if end <= start:  # a special token (BOS, EOS, ...): no characters
            continue
        if end in ends and end not in positions and end <= later_start:
            positions[end] = position
        later_start = min(later_start, start)
    return positions


def word_end_pairs(
    text: str,
    source_offsets,
    target_offsets,
    skip_first: int = 0,
    source_length: int | None = None,
    target_length: int | None = None,
) -> list[tuple[int, int]]:
    """(source position, target position) of every word end of `text` both streams are at, in
    text order. Offsets are those of the whole encodings, so a token cut short by the length
    limit is never taken; source_length / target_length (None: all) keep only positions inside
    the cut streams; positions below skip_first in either stream are left out."""
    ends = word_ends(text)
    source = word_end_positions(source_offsets, ends)
    target = word_end_positions(target_offsets, ends)
    source_length = len(source_offsets) if source_length is None else source_length
    target_length = len(target_offsets) if target_length is None else target_length
    return [
        (source[e], target[e])
        for e in sorted(source.keys() & target.keys())
        if skip_first <= source[e] < source_length and skip_first <= target[e] < target_length
    ]


def encode_with_offsets(tokenizer, text: str, add_special_tokens: bool, where: str = "tokenizer"):
    """(ids, character offsets) of the whole of `text` (no length limit), with or without the
    tokenizer's template; the ids are those depthlab.stages.residual_stream.document_ids gives. Needs a
    fast tokenizer (offsets); ValueError naming `where` otherwise."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"{where}: word_ends alignment needs character offsets, which only a fast "
            f"(tokenizers-backed) tokenizer gives; {type(tokenizer).__name__} is not one"
        )
    encoded = tokenizer(
        text, add_special_tokens=add_special_tokens, return_offsets_mapping=True, verbose=False
    )
    return encoded["input_ids"], [tuple(span) for span in encoded["offset_mapping"]]


@dataclass
class PairedBatch:
    """One batch of documents read by two tokenizers: each stream padded by its own tokenizer,
    and the flat (row * width + column) indices of the aligned tokens, pair k of the batch at
    source_index[k] and target_index[k] (rows in order, each row's pairs in text order)."""

    source: dict
    target: dict
    source_index: torch.Tensor
    target_index: torch.Tensor
    pairs: list[list[tuple[int, int]]]  # per row: (source position, target position)
    documents: list[int]  # per row: the index of its document among the texts read


def _flat_index(attention_mask: torch.Tensor, positions: list[list[int]]) -> torch.Tensor:
    """Flat indices of the given real-token positions of each row, whatever the padding side."""
    width = attention_mask.shape[1]
    index = []
    for row, wanted in enumerate(positions):
        columns = attention_mask[row].nonzero().squeeze(1)
        index.append(row * width + columns[torch.tensor(wanted, dtype=torch.long)])
    return torch.cat(index) if index else torch.zeros(0, dtype=torch.long)


def paired_batches(
    texts: Iterable[str],
    source_tokenizer,
    target_tokenizer,
    max_length: int,
    batch_size: int,
    add_special_tokens: tuple[bool, bool] = (True, True),
    skip_first: int = 0,
    sort_window: int = 64,
) -> Iterator[PairedBatch]:
    """Word-end aligned batches of `texts` (module docstring): each document read by both
    tokenizers (add_special_tokens: each one's template or none), cut to max_length tokens;
    documents without a pair are left out. Documents are sorted by length within windows of
    sort_window batches to cut padding."""
    window: list[tuple[list[int], list[int], list[tuple[int, int]], int]] = []

    def flush(window):
        window.sort(key=lambda document: (len(document[0]), len(document[1])))
        for first in range(0, len(window), batch_size):
            chunk = window[first : first + batch_size]
            source = source_tokenizer.pad(
                {"input_ids": [d[0] for d in chunk]}, padding=True, return_tensors="pt"
            )
            target = target_tokenizer.pad(
                {"input_ids": [d[1] for d in chunk]}, padding=True, return_tensors="pt"
            )
            pairs = [d[2] for d in chunk]
            yield PairedBatch(
                source,
                target,
                _flat_index(source["attention_mask"], [[i for i, _ in p] for p in pairs]),
                _flat_index(target["attention_mask"], [[j for _, j in p] for p in pairs]),
                pairs,
                [d[3] for d in chunk],
            )

    for document, text in enumerate(texts):
        source_ids, source_offsets = encode_with_offsets(
            source_tokenizer, text, add_special_tokens[0], "source tokenizer"
        )
        target_ids, target_offsets = encode_with_offsets(
            target_tokenizer, text, add_special_tokens[1], "target tokenizer"
        )
        pairs = word_end_pairs(
            text, source_offsets, target_offsets, skip_first, max_length, max_length
        )
        if not pairs:
            continue
        window.append((source_ids[:max_length], target_ids[:max_length], pairs, document))
        if len(window) == sort_window * batch_size:
            yield from flush(window)
            window = []
    if window:
        yield from flush(window)


def aligned_states(source_adapter, target_adapter, batch, skip_first: int = 0):
    """(source states, target states) of one batch's paired tokens, h_0..h_L each (n, d) with
    row k of both the same pair: a PairedBatch's word ends, or, for one token batch both models
    read, its real tokens from skip_first on."""
    if isinstance(batch, PairedBatch):
        return (
            states_at(source_adapter, batch.source, batch.source_index),
            states_at(target_adapter, batch.target, batch.target_index),
        )
    return (
        next(stream_states(source_adapter, [batch], skip_first)),
        next(stream_states(target_adapter, [batch], skip_first)),
    )


def _batch_counts(batch) -> tuple[int, int, int]:
    """(documents, source tokens, target tokens) of one batch, padding excluded."""
    if isinstance(batch, PairedBatch):
        source, target = batch.source["attention_mask"], batch.target["attention_mask"]
    else:
        source = target = batch["attention_mask"]
    return int(source.shape[0]), int(source.sum()), int(target.sum())


@dataclass
class LinearMapResult:
    source_layers: int  # L_a + 1 states
    target_layers: int  # L_b + 1 states
    relative_error: np.ndarray  # (L_a + 1, L_b + 1), mean ||y_hat - y|| / ||y||
    centred_error: np.ndarray  # mean ||y_hat - y|| / ||y - mean(y)|| (test tokens)
    alpha: np.ndarray  # chosen ridge strength per pair
    tokens: dict[str, int]
    blocks: int
    alphas: list[float]
    val_sse: dict = field(default_factory=dict)
    # per split: documents read by the models, their source and target tokens, pairs (= tokens)
    streams: dict = field(default_factory=dict)

    def best_target(self, centred: bool = False) -> np.ndarray:
        return np.argmin(self.centred_error if centred else self.relative_error, axis=1)

    def best_target_frame(self, centred: bool = False, **labels):
        """Per source layer: the target layer of least error, its relative depth, and the
        target layer at equal relative depth (the paper's diagonal)."""
        import pandas as pd

        best = self.best_target(centred)
        source = np.arange(self.source_layers)
        last_a, last_b = max(self.source_layers - 1, 1), max(self.target_layers - 1, 1)
        frame = pd.DataFrame(
            {
                "source_layer": source,
                "source_depth": source / last_a,
                "best_target_layer": best,
                "best_target_depth": best / last_b,
                "equal_depth_target_layer": np.round(
                    source * (self.target_layers - 1) / last_a
                ).astype(int),
                "relative_error": self.relative_error[source, best],
                "centred_error": self.centred_error[source, best],
            }
        )
        for key, value in reversed(labels.items()):
            frame.insert(0, key, value)
        return frame

    def depth_offset_of_best_target(self, centred: bool = False) -> float:
        """Mean |relative depth of the best target - relative depth of the source|."""
        best = self.best_target(centred)
        source = np.arange(self.source_layers) / max(self.source_layers - 1, 1)
        return float(np.mean(np.abs(best / max(self.target_layers - 1, 1) - source)))

    def to_frame(self, **labels):
        import pandas as pd

        rows = []
        for i in range(self.source_layers):
            for j in range(self.target_layers):
                rows.append(
                    (
                        i,
                        j,
                        i / max(self.source_layers - 1, 1),
                        j / max(self.target_layers - 1, 1),
                        self.relative_error[i, j],
                        self.centred_error[i, j],
                        self.alpha[i, j],
                    )
                )
        frame = pd.DataFrame(
            rows,
            columns=[
                "source_layer",
                "target_layer",
                "source_depth",
                "target_depth",
                "relative_error",
                "centred_error",
                "alpha",
            ],
        )
        for key, value in reversed(labels.items()):
            frame.insert(0, key, value)
        return frame


def fit_linear_maps(
    source_adapter,
    target_adapter,
    batches_by_split,
    alphas,
    max_memory_mb,
    skip_first: int = 0,
    progress=None,
) -> LinearMapResult:
    """Fit every (source state, target state) map. batches_by_split: a callable split -> fresh
    iterable of batches, each either a token batch both models read (positions alignment) or a
    PairedBatch (word_ends). Streams the fit + val batches once per target block, then the test
    batches once per block."""
    device = source_adapter.input_device
    num_sources, num_targets = source_adapter.num_layers + 1, target_adapter.num_layers + 1
    d_a = source_adapter.model.config.hidden_size
    d_b = target_adapter.model.config.hidden_size
    blocks = plan_target_blocks(num_sources, num_targets, d_a, d_b, max_memory_mb)
    error = np.full((num_sources, num_targets), np.nan)
    centred = np.full((num_sources, num_targets), np.nan)
    chosen = np.full((num_sources, num_targets), np.nan)
    tokens = dict.fromkeys(SPLITS, 0)
    streams = {
        split: dict.fromkeys(("documents", "source_tokens", "target_tokens", "pairs"), 0)
        for split in SPLITS
    }
    val_sse = {}
    for block_index, block in enumerate(blocks):
        fitter = AffineRidgeMaps(list(range(num_sources)), block, alphas, device=device)
        for split in ("fit", "val", "test"):
            if split == "test":
                fitter.solve()
            batches = batches_by_split(split)
            for batch in batches:
                xs, ys_all = aligned_states(source_adapter, target_adapter, batch, skip_first)
                ys = {j: ys_all[j] for j in block}
                fitter.add(split, {i: x for i, x in enumerate(xs)}, ys)
                if block_index == 0:
                    tokens[split] += int(xs[0].shape[0])
                    counts = streams[split]
                    for key, value in zip(
                        ("documents", "source_tokens", "target_tokens"), _batch_counts(batch)
                    ):
                        counts[key] += value
                    counts["pairs"] += int(xs[0].shape[0])
            if progress:
                progress(f"block {block_index + 1}/{len(blocks)} {split}: done")
        for (i, j), value in fitter.errors().items():
            error[i, j] = value
            chosen[i, j] = fitter.chosen[(i, j)]
            val_sse[(i, j)] = fitter.val_sse[(i, j)]
        for (i, j), value in fitter.errors(centred=True).items():
            centred[i, j] = value
    for split in SPLITS:
        if tokens[split] == 0 and split != "val":
            raise ValueError(f"the {split} split holds no token (more texts or other fractions)")
    return LinearMapResult(
        num_sources,
        num_targets,
        error,
        centred,
        chosen,
        tokens,
        len(blocks),
        [float(a) for a in alphas],
        val_sse,
        streams,
    )
