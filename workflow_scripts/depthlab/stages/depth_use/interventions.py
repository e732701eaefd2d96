"""Layer-skip interventions (Csordás et al. 2025, "Do Language Models Use Their Depth
Efficiently?"): how much skipping one layer, or one of its sublayers, changes the updates of the
later layers and the output distribution (the depth score computed from the output effects is
in depthlab.stages.depth_use.depth_score).

Variants, `<kind>_<scope>`:

  kind   layer      layer s is skipped: its output is replaced by its input
         attention  the attention update of layer s is zeroed (adapter.attention[s] output)
         mlp        the MLP update of layer s is zeroed (adapter.mlp[s] output)
  scope  all        intervene at every position (real-token index >= no_skip_front) and measure
                    there: the effect on the current token
         future     intervene only at real-token positions [no_skip_front, t) and measure at
                    positions >= t, for a few sampled t per prompt: the effect on future tokens

For every variant, skipped layer s and layer l the effect is the relative change of the update
of layer l, ||Delta_l - Delta'_l|| / ||Delta_l|| with Delta_l = h_{l+1} - h_l (h_l = input of layer
l, h_L = last layer output before the final norm; the denominator is clamped at DENOMINATOR_EPS),
and the output effect is ||p - p'||_2, p = softmax(lm_head(norm(h_L))). Both are aggregated by
max and by mean over the measured positions of all prompts. Layers l < s are untouched (their
effect is exactly 0 and is not computed); l = s is the intervened layer itself.

Batched evaluation: one clean forward pass per batch of prompts
(depthlab.stages.residual_stream.clean_pass) captures every layer's input and the keyword
arguments the backbone passes to it (mask, rotary embeddings, ...). The
interventions then replay the decoder layers directly from the clean state h_s, so layers before
the skipped one are never recomputed; and all (variant, skipped layer, prompt[, t]) rows of a
batch are stacked into one "staircase": at layer l the rows whose skipped layer is l join the
stack, so every layer runs once per chunk of at most `max_rows` rows. A sublayer row joins before
layer l (from the clean h_l); a whole-layer row joins after it, since layer l sees only clean
inputs and its output is the clean h_{l+1} where kept and h_l where skipped, so it never runs.
The one-prompt-per-full-forward-pass loop of the reference code, which the tests and the
benchmark compare this with, is depthlab.stages.depth_use.reference_loop.

Statistics are computed per token in float32 (float64 for a float64 model) and summed in float64;
memory is bounded by one batch (its clean states and the stacked rows), never by the token count.
On a model sharded over several devices (depthlab.core.placement) the states, rows and probabilities
live on the input embedding's device; a replayed layer's output is moved back there.

Size: one algorithm (the batched staircase replay) with its settings and statistics; split,
the row bookkeeping would cross a module boundary at every layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from depthlab.models.architectures import ModelAdapter, first_output, with_first_output
from depthlab.settings.depth_use import (
    KINDS,
    SCOPES,
    check_layer_indices,
    parse_variant,
    validate_intervention_settings,
)
from depthlab.stages.residual_stream import clean_pass

DENOMINATOR_EPS = 1e-6  # as the reference code: ||Delta_l|| clamped at 1e-6
LOGIT_CHUNK_ELEMENTS = 1 << 22  # tokens x vocab per output-effect chunk


# ---------------------------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class SkipSettings:
    """What to intervene on and where (see the module docstring)."""

    variants: tuple[str, ...] = ("layer_all", "layer_future")
    layers: tuple[int, ...] | None = None  # skipped layers; None: every layer
    no_skip_front: int = 1  # first real tokens never intervened on (BOS / sink)
    future_positions: int = 4  # sampled t per prompt for the future scope
    future_min_position: int = 8  # smallest t (real-token index)
    max_rows: int = 256  # rows (prompt x t copies) per stacked forward
    seed: int = 0

    @classmethod
    def from_spec(cls, spec: dict, where: str = "skip") -> SkipSettings:
        validate_intervention_settings(spec, where=where)
        layers = spec.get("layers")
        return cls(
            variants=tuple(spec["variants"]),
            layers=None if layers is None else tuple(int(x) for x in layers),
            no_skip_front=int(spec["no_skip_front"]),
            future_positions=int(spec["future_positions"]),
            future_min_position=int(spec["future_min_position"]),
            max_rows=int(spec["max_rows"]),
            seed=int(spec.get("seed", 0)),
        )

    def skipped_layers(self, num_layers: int) -> list[int]:
        if self.layers is None:
            return list(range(num_layers))
        check_layer_indices(self.layers, num_layers, "layers")
        return sorted(set(self.layers))


def future_positions(num_real: int, prompt_id: int, settings: SkipSettings) -> list[int]:
    """The sampled positions t (real-token indices) of one prompt for the future scope: up to
    `future_positions` distinct t in [max(no_skip_front + 1, future_min_position), num_real - 1],
    drawn from a generator seeded by (seed, prompt_id), so batching never changes them."""
    low = max(settings.no_skip_front + 1, settings.future_min_position)
    high = num_real - 1
    if high < low:
        return []
    candidates = np.arange(low, high + 1)
    rng = np.random.default_rng([settings.seed, int(prompt_id)])
    count = min(settings.future_positions, len(candidates))
    return sorted(int(t) for t in rng.choice(candidates, size=count, replace=False))


# ---------------------------------------------------------------------------------------------
# Results


@dataclass
class SkipEffects:
    """Effect matrices per variant: update_max/update_mean[s, l] (skipped layer s x affected
    layer l, 0 for l < s), output_max/output_mean[s] (NaN without an LM head); counts[s] = measured
    tokens. per_prompt_output[variant] (prompts x L): the mean output effect over each prompt's
    measured positions (only when asked, for the depth score)."""

    num_layers: int
    skipped_layers: list[int]
    variants: list[str]
    update_max: dict[str, np.ndarray]
    update_mean: dict[str, np.ndarray]
    output_max: dict[str, np.ndarray]
    output_mean: dict[str, np.ndarray]
    counts: dict[str, np.ndarray]
    prompts: int = 0
    rows: int = 0
    per_prompt_output: dict[str, np.ndarray] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_frame(self, **labels):
        """Tidy table: variant, skipped, layer (affected layer; 'output' rows have layer = L),
        measure (update | output), max, mean, count."""
        import pandas as pd

        rows = []
        L = self.num_layers
        for variant in self.variants:
            for index, s in enumerate(self.skipped_layers):
                count = int(self.counts[variant][index])
                for l in range(L):
                    rows.append(
                        (
                            variant,
                            s,
                            l,
                            "update",
                            self.update_max[variant][index, l],
                            self.update_mean[variant][index, l],
                            count,
                        )
                    )
                rows.append(
                    (
                        variant,
                        s,
                        L,
                        "output",
                        self.output_max[variant][index],
                        self.output_mean[variant][index],
                        count,
                    )
                )
        frame = pd.DataFrame(
            rows, columns=["variant", "skipped", "layer", "measure", "max", "mean", "count"]
        )
        for key, value in reversed(labels.items()):
            frame.insert(0, key, value)
        return frame


class _Accumulator:
    def __init__(self, variants, skipped, num_layers, per_prompt):
        n = len(skipped)
        self.index = {s: i for i, s in enumerate(skipped)}
        self.update_max = {v: np.zeros((n, num_layers)) for v in variants}
        self.update_sum = {v: np.zeros((n, num_layers)) for v in variants}
        self.output_max = {v: np.zeros(n) for v in variants}
        self.output_sum = {v: np.zeros(n) for v in variants}
        self.counts = {v: np.zeros(n, dtype=np.int64) for v in variants}
        self.per_prompt = per_prompt
        self.prompt_sum: dict[str, list[np.ndarray]] = {v: [] for v in variants}
        self.prompt_count: list[np.ndarray] = []


def _expander(batch: int, index: torch.Tensor):
    """Select the rows `index` of every per-example tensor a layer receives (first dim = batch,
    at least 2-D); broadcast tensors (first dim 1 when batch > 1) and 1-D ones stay."""

    def expand(obj):
        if isinstance(obj, torch.Tensor):
            if obj.ndim >= 2 and obj.shape[0] == batch:
                return obj.index_select(0, index.to(obj.device))
            return obj
        if isinstance(obj, tuple):
            return tuple(expand(o) for o in obj)
        if isinstance(obj, list):
            return [expand(o) for o in obj]
        if isinstance(obj, dict):
            return {k: expand(v) for k, v in obj.items()}
        return obj

    return expand


def _real_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Per position, its index among the row's real tokens (-1 at pads)."""
    mask = attention_mask.bool()
    return torch.where(mask, mask.long().cumsum(1) - 1, torch.full_like(mask, -1, dtype=torch.long))


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _relative_change(clean_update, new_update):
    work = _work_dtype(clean_update.dtype)
    clean_update, new_update = clean_update.to(work), new_update.to(work)
    numerator = torch.linalg.vector_norm(clean_update - new_update, dim=-1)
    return numerator / torch.linalg.vector_norm(clean_update, dim=-1).clamp_min(DENOMINATOR_EPS)


# ---------------------------------------------------------------------------------------------
# Batched interventions


@dataclass
class _Rows:
    """Metadata of stacked intervention rows (all tensors on the model's device)."""

    prompt: torch.Tensor  # (R,) index in the batch
    skipped: torch.Tensor  # (R,) skipped layer
    kind: torch.Tensor  # (R,) index into KINDS
    intervene: torch.Tensor  # (R, T) bool
    measure: torch.Tensor  # (R, T) bool
    variant: list[str]  # per row
    row_ids: list[int]  # per row: index of the row in the batch's row list

    def cat(self, other: _Rows) -> _Rows:
        cat = lambda a, b: torch.cat([a, b])  # noqa: E731
        return _Rows(
            cat(self.prompt, other.prompt),
            cat(self.skipped, other.skipped),
            cat(self.kind, other.kind),
            cat(self.intervene, other.intervene),
            cat(self.measure, other.measure),
            self.variant + other.variant,
            self.row_ids + other.row_ids,
        )

    def select(self, index: list[int]) -> _Rows:
        ix = torch.tensor(index, dtype=torch.long, device=self.prompt.device)
        return _Rows(
            self.prompt[ix],
            self.skipped[ix],
            self.kind[ix],
            self.intervene[ix],
            self.measure[ix],
            [self.variant[i] for i in index],
            [self.row_ids[i] for i in index],
        )


def _row_specs(attention_mask, prompt_ids, measure_mask, settings, variants, skipped):
    """Every (variant, skipped layer, prompt[, t]) row of one batch: intervene/measure masks."""
    real = _real_index(attention_mask)
    valid = attention_mask.bool()
    base_measure = valid if measure_mask is None else (valid & measure_mask.bool())
    per_scope = {}
    for scope in SCOPES:
        prompts, intervene, measure = [], [], []
        for b in range(attention_mask.shape[0]):
            if scope == "all":
                inter = valid[b] & (real[b] >= settings.no_skip_front)
                prompts.append(b)
                intervene.append(inter)
                measure.append(base_measure[b] & inter)
            else:
                num_real = int(valid[b].sum())
                for t in future_positions(num_real, int(prompt_ids[b]), settings):
                    prompts.append(b)
                    intervene.append(valid[b] & (real[b] >= settings.no_skip_front) & (real[b] < t))
                    measure.append(base_measure[b] & (real[b] >= t))
        per_scope[scope] = (prompts, intervene, measure)
    specs = []  # (variant, s, kind index, prompts, intervene list, measure list)
    for variant in variants:
        kind, scope = parse_variant(variant)
        prompts, intervene, measure = per_scope[scope]
        if not prompts:
            continue
        for s in skipped:
            specs.append((variant, s, KINDS.index(kind), prompts, intervene, measure))
    return specs


def _build_rows(specs, device) -> _Rows:
    prompt, skipped, kind, intervene, measure, variant = [], [], [], [], [], []
    for v, s, k, prompts, inter, meas in specs:
        prompt += prompts
        skipped += [s] * len(prompts)
        kind += [k] * len(prompts)
        intervene += inter
        measure += meas
        variant += [v] * len(prompts)
    rows = _Rows(
        torch.tensor(prompt, dtype=torch.long, device=device),
        torch.tensor(skipped, dtype=torch.long, device=device),
        torch.tensor(kind, dtype=torch.long, device=device),
        torch.stack(intervene),
        torch.stack(measure),
        variant,
        list(range(len(prompt))),
    )
    return rows


def _chunks(rows: _Rows, max_rows: int) -> list[_Rows]:
    """Rows sorted by skipped layer, cut into chunks of at most max_rows (the staircase of one
    chunk starts at its smallest skipped layer)."""
    order = sorted(range(len(rows.variant)), key=lambda i: (int(rows.skipped[i]), i))
    return [rows.select(order[i : i + max_rows]) for i in range(0, len(order), max_rows)]


class _SublayerMask:
    """Forward hooks zeroing the attention / MLP output of chosen rows at chosen positions."""

    def __init__(self, adapter: ModelAdapter, layer: int, keep: dict[int, torch.Tensor]):
        self.handles = []
        for kind, mask in keep.items():
            module = (adapter.attention if KINDS[kind] == "attention" else adapter.mlp)[layer]

            def hook(module, args, output, mask=mask):
                tensor = first_output(output)
                factor = mask.to(tensor.device, tensor.dtype).reshape(*tensor.shape[:-1], 1)
                return with_first_output(output, tensor * factor)

            self.handles.append(module.register_forward_hook(hook))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    """Output probabilities in float32 at least."""
    return torch.softmax(logits.to(_work_dtype(logits.dtype)), dim=-1)


def _probabilities(adapter: ModelAdapter, final_state: torch.Tensor) -> torch.Tensor:
    """softmax(lm_head(norm(h_L)))."""
    return _softmax(adapter.logits(final_state))


def _output_effects(adapter, final_rows, rows: _Rows, clean_probs) -> torch.Tensor:
    """||p - p'||_2 at every measured (row, position), flattened in row-major order."""
    r_index, t_index = rows.measure.nonzero(as_tuple=True)
    if r_index.numel() == 0:
        return torch.zeros(0, dtype=torch.float64, device=final_rows.device)
    vocab = clean_probs.shape[-1]
    chunk = max(1, LOGIT_CHUNK_ELEMENTS // vocab)
    out = []
    for start in range(0, r_index.numel(), chunk):
        r, t = r_index[start : start + chunk], t_index[start : start + chunk]
        new = _probabilities(adapter, final_rows[r, t])
        new -= clean_probs[rows.prompt[r], t]
        out.append(torch.linalg.vector_norm(new, dim=-1).to(torch.float64))
    return torch.cat(out)


def _run_chunk(
    adapter,
    rows: _Rows,
    states,
    calls,
    clean_probs,
    batch_size,
    acc: _Accumulator,
    prompt_offset: int,
):
    """The staircase of one chunk. A row skipping the whole layer s never runs layer s: layer s
    sees only clean inputs, so its output is the clean h_{s+1} where it is kept and h_s where it
    is skipped; the row joins the stack after layer s. Sublayer rows join before layer s, which
    runs with their attention / MLP output zeroed."""
    L = adapter.num_layers
    layer_kind = KINDS.index("layer")
    start = int(rows.skipped.min())
    stack, active = None, None

    def join(stack, active, index, entering):
        new = rows.select(index)
        return (
            entering if stack is None else torch.cat([stack, entering]),
            new if active is None else active.cat(new),
        )

    for l in range(start, L):
        at_l = [i for i in range(len(rows.variant)) if int(rows.skipped[i]) == l]
        run_here = [i for i in at_l if int(rows.kind[i]) != layer_kind]
        skip_here = [i for i in at_l if int(rows.kind[i]) == layer_kind]
        if run_here:
            entering = states[l].index_select(0, rows.prompt[run_here])
            stack, active = join(stack, active, run_here, entering)
        clean_update = states[l + 1] - states[l]
        if stack is not None:
            at_layer = active.skipped == l
            keep = {}
            for kind_name in ("attention", "mlp"):
                k = KINDS.index(kind_name)
                chosen = at_layer & (active.kind == k)
                if bool(chosen.any()):
                    keep[k] = ~(chosen.unsqueeze(1) & active.intervene)
            expand = _expander(batch_size, active.prompt)
            with _SublayerMask(adapter, l, keep):
                output = calls[l].run(adapter.layers[l], stack, expand)
            _accumulate_updates(
                acc,
                active,
                _relative_change(clean_update.index_select(0, active.prompt), output - stack),
                l,
            )
            stack = output
        if skip_here:
            skipping = rows.select(skip_here)
            before = states[l].index_select(0, skipping.prompt)
            after = torch.where(
                skipping.intervene.unsqueeze(-1),
                before,
                states[l + 1].index_select(0, skipping.prompt),
            )
            _accumulate_updates(
                acc,
                skipping,
                _relative_change(clean_update.index_select(0, skipping.prompt), after - before),
                l,
            )
            stack, active = join(stack, active, skip_here, after)
    effects = (
        _output_effects(adapter, stack, active, clean_probs) if clean_probs is not None else None
    )
    _accumulate_outputs(acc, active, effects, prompt_offset)


def _accumulate_updates(acc: _Accumulator, rows: _Rows, change: torch.Tensor, layer: int):
    zero = torch.zeros((), dtype=torch.float64, device=change.device)
    masked = torch.where(rows.measure, change.to(torch.float64), zero)
    row_max = masked.amax(dim=1).cpu().numpy()
    row_sum = masked.sum(dim=1).cpu().numpy()
    skipped = rows.skipped.cpu().numpy()
    for i, variant in enumerate(rows.variant):
        s = acc.index[int(skipped[i])]
        acc.update_max[variant][s, layer] = max(acc.update_max[variant][s, layer], row_max[i])
        acc.update_sum[variant][s, layer] += row_sum[i]


def _accumulate_outputs(acc: _Accumulator, rows: _Rows, effects, prompt_offset: int):
    counts = rows.measure.sum(dim=1).cpu().numpy()
    skipped = rows.skipped.cpu().numpy()
    prompts = rows.prompt.cpu().numpy()
    if effects is not None:
        per_row = torch.split(effects.cpu(), [int(c) for c in counts])
    for i, variant in enumerate(rows.variant):
        s = acc.index[int(skipped[i])]
        acc.counts[variant][s] += int(counts[i])
        if effects is None or counts[i] == 0:
            continue
        values = per_row[i].numpy()
        acc.output_max[variant][s] = max(acc.output_max[variant][s], float(values.max()))
        acc.output_sum[variant][s] += float(values.sum())
        if acc.per_prompt:
            acc.prompt_sum[variant][-1][prompts[i], s] += float(values.sum())


def skip_effects(
    adapter: ModelAdapter, batches: Iterable[dict], settings: SkipSettings, per_prompt: bool = False
) -> SkipEffects:
    """Every variant's effect matrices over `batches` (dicts with input_ids, attention_mask and
    optionally measure_mask, a bool (B, T) restricting the measured positions, e.g. to the answer
    positions of problems). per_prompt: also keep each prompt's mean output effect per skipped
    layer (for the depth score; `_all` variants only)."""
    variants = list(settings.variants)
    for name in variants:
        parse_variant(name, "variants")
    if per_prompt and any(parse_variant(v)[1] != "all" for v in variants):
        raise ValueError("variants: per-prompt output effects (depth score) need '_all' variants")
    L = adapter.num_layers
    skipped = settings.skipped_layers(L)
    acc = _Accumulator(variants, skipped, L, per_prompt)
    device = adapter.input_device
    prompts = rows_total = 0
    notes = list(adapter.notes)
    with torch.inference_mode():
        for batch in batches:
            input_ids = batch["input_ids"].to(device)
            attention_mask = batch["attention_mask"].to(device)
            measure_mask = batch.get("measure_mask")
            if measure_mask is not None:
                measure_mask = measure_mask.to(device)
            B = input_ids.shape[0]
            prompt_ids = batch.get("prompt_ids")
            if prompt_ids is None:
                prompt_ids = list(range(prompts, prompts + B))
            states, calls = clean_pass(adapter, input_ids, attention_mask)
            clean_probs = _probabilities(adapter, states[-1]) if adapter.has_lm_head else None
            specs = _row_specs(
                attention_mask, prompt_ids, measure_mask, settings, variants, skipped
            )
            if per_prompt:
                for v in variants:
                    acc.prompt_sum[v].append(np.zeros((B, len(skipped))))
                real = attention_mask.bool() & (
                    _real_index(attention_mask) >= settings.no_skip_front
                )
                if measure_mask is not None:
                    real &= measure_mask.bool()
                acc.prompt_count.append(real.sum(dim=1).cpu().numpy())
            if specs:
                rows = _build_rows(specs, device)
                rows_total += len(rows.variant)
                for chunk in _chunks(rows, settings.max_rows):
                    _run_chunk(adapter, chunk, states, calls, clean_probs, B, acc, prompts)
            prompts += B
    if prompts == 0:
        raise ValueError("no prompts were given (empty text set?)")
    if not adapter.has_lm_head:
        notes.append("output effect not available: the model has no LM head")
    result = SkipEffects(
        num_layers=L,
        skipped_layers=skipped,
        variants=variants,
        update_max={v: acc.update_max[v] for v in variants},
        update_mean={
            v: acc.update_sum[v] / np.maximum(acc.counts[v], 1)[:, None] for v in variants
        },
        output_max={
            v: (acc.output_max[v] if adapter.has_lm_head else np.full(len(skipped), np.nan))
            for v in variants
        },
        output_mean={
            v: (
                acc.output_sum[v] / np.maximum(acc.counts[v], 1)
                if adapter.has_lm_head
                else np.full(len(skipped), np.nan)
            )
            for v in variants
        },
        counts=acc.counts,
        prompts=prompts,
        rows=rows_total,
        notes=notes,
    )
    for v in variants:
        empty = acc.counts[v] == 0
        result.update_mean[v][empty] = np.nan
        result.output_mean[v][empty] = np.nan
        # layers before the skipped one are untouched by construction
        for index, s in enumerate(skipped):
            result.update_max[v][index, :s] = 0.0
            result.update_mean[v][index, :s] = 0.0 if not empty[index] else np.nan
    if per_prompt:
        counts = np.concatenate(acc.prompt_count)
        for v in variants:
            sums = np.concatenate(acc.prompt_sum[v])
            with np.errstate(invalid="ignore", divide="ignore"):
                result.per_prompt_output[v] = np.where(
                    counts[:, None] > 0, sums / counts[:, None], np.nan
                )
    return result
