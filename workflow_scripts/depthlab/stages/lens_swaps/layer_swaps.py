"""Layer swaps and deletions as interventions (Lad et al. 2024, "The Remarkable Robustness of
LLMs: Stages of Inference?", arXiv 2406.19384).

Variants, for every position l in depth:

  swap    l = 0..L-2: the model whose layers l and l+1 run in the order l+1, l
  delete  l = 0..L-1: the model without layer l

Each variant is scored against the intact model on the same tokens (every token that has a next
real token): its next-token cross-entropy, its top-1 accuracy on the next token, and its top-1
agreement with the intact model's prediction; the intact model's loss and accuracy stand beside
them (`kept_accuracy` = variant accuracy / intact accuracy, Lad et al.'s "relative accuracy").

One clean pass per batch captures every layer's input h_l and how the backbone called it
(depthlab.stages.residual_stream.clean_pass: attention mask, rotary embeddings, ...). A
variant then replays only the layers from position l on, starting from the clean h_l (the layers
before l are untouched): a swap runs layer l+1 then layer l then l+2.., a deletion runs l+1...
Every layer is called with its own captured arguments, so a layer moved in depth keeps its own
attention kind where a model mixes them (sliding / full), as the same module object moved in the
decoder's list would; the tests compare the replay with a model rebuilt with its layers
reordered or removed. Memory: one batch's states; the head reads the scored tokens in chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from depthlab.plan.engine_budgets import LOGIT_CHUNK_ELEMENTS

ACCUMULATE = torch.float64
KINDS = ("swap", "delete")
SWAP_MEASURES = ("loss", "accuracy", "agreement")


def variant_order(kind: str, layer: int, num_layers: int) -> list[int]:
    """The layer order (original indices) of one variant."""
    order = list(range(num_layers))
    if kind == "swap":
        if not 0 <= layer < num_layers - 1:
            raise ValueError(f"swap: layer {layer} outside 0..{num_layers - 2}")
        order[layer], order[layer + 1] = order[layer + 1], order[layer]
    elif kind == "delete":
        if not 0 <= layer < num_layers:
            raise ValueError(f"delete: layer {layer} outside 0..{num_layers - 1}")
        del order[layer]
    else:
        raise ValueError(f"unknown variant kind {kind!r}; expected one of {KINDS}")
    return order


def variants(num_layers: int) -> list[tuple[str, int]]:
    """Every (kind, l): the swaps l = 0..L-2, then the deletions l = 0..L-1."""
    return [("swap", l) for l in range(num_layers - 1)] + [("delete", l) for l in range(num_layers)]


def scored_positions(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat indices of the (B, T) positions whose next position is a real token, the flat
    indices of those next positions): whatever the padding side."""
    mask = attention_mask.bool()
    both = mask[:, :-1] & mask[:, 1:]
    rows, cols = both.nonzero(as_tuple=True)
    width = mask.shape[1]
    return rows * width + cols, rows * width + cols + 1


@dataclass
class SwapResult:
    num_layers: int
    tokens: int
    intact: dict  # loss, accuracy (means over tokens)
    values: dict  # (kind, l) -> {measure: mean}

    def frame(self, **labels):
        """Tidy: kind (intact | swap | delete), layer (l; -1 for intact), loss, accuracy,
        agreement, kept_accuracy, tokens."""
        import pandas as pd

        acc = self.intact["accuracy"]
        rows = [("intact", -1, self.intact["loss"], acc, 1.0, 1.0, self.tokens)]
        for (kind, l), v in self.values.items():
            kept = v["accuracy"] / acc if acc > 0 else float("nan")
            rows.append((kind, l, v["loss"], v["accuracy"], v["agreement"], kept, self.tokens))
        frame = pd.DataFrame(
            rows,
            columns=["kind", "layer", "loss", "accuracy", "agreement", "kept_accuracy", "tokens"],
        )
        for key, value in reversed(labels.items()):
            frame.insert(0, key, value)
        return frame


def _score(read, final_states, targets, intact_top1=None):
    """(summed loss, summed correct, summed agreement or None, top-1) of final states (n, d),
    the head read in chunks of at most LOGIT_CHUNK_ELEMENTS logits."""
    n = final_states.shape[0]
    budget = LOGIT_CHUNK_ELEMENTS.get(final_states.device.type, LOGIT_CHUNK_ELEMENTS["cpu"])
    loss = correct = agree = torch.zeros((), dtype=ACCUMULATE, device=final_states.device)
    top1s, step = [], min(n, 64)
    start = 0
    while start < n:
        rows = slice(start, min(n, start + step))
        logits = read(final_states[rows])
        step = max(1, budget // logits.shape[-1])
        logp = torch.log_softmax(logits, dim=-1)
        target = targets[rows]
        loss = loss + (-logp.gather(-1, target.unsqueeze(-1))).to(ACCUMULATE).sum()
        top1 = logits.argmax(-1)
        correct = correct + (top1 == target).to(ACCUMULATE).sum()
        if intact_top1 is not None:
            agree = agree + (top1 == intact_top1[rows]).to(ACCUMULATE).sum()
        top1s.append(top1)
        start = rows.stop
    return loss, correct, (agree if intact_top1 is not None else None), torch.cat(top1s)


def _identity(obj):
    return obj


def replay(adapter, states, calls, kind: str, layer: int) -> torch.Tensor:
    """The last layer's output (before the final norm) of one variant, from the clean pass'
    states and calls (residual_stream.clean_pass): the layers from position `layer` on, replayed."""
    h = states[layer]
    for j in variant_order(kind, layer, adapter.num_layers)[layer:]:
        h = calls[j].run(adapter.layers[j], h, _identity)
    return h


def scored_tokens(attention_mask: torch.Tensor, stride: int = 1, offset: int = 0):
    """(here, next, offset + count): scored_positions, then every `stride`-th of them counted from
    `offset` (the number of scored tokens seen before this batch), so the choice does not depend
    on batching; count is this batch's scored tokens before the stride."""
    here, nxt = scored_positions(attention_mask)
    count = here.numel()
    if stride > 1:
        keep = ((torch.arange(count, device=here.device) + offset) % stride) == 0
        here, nxt = here[keep], nxt[keep]
    return here, nxt, offset + count


class SwapStatistics:
    """Sums of the SWAP_MEASURES of every variant over batches (float64), fed one clean pass at
    a time (`add`); `layers`: the positions l to vary (None: all)."""

    def __init__(self, adapter, read, layers=None):
        self.adapter, self.read = adapter, read
        self.L = adapter.num_layers
        self.chosen = [(k, l) for k, l in variants(self.L) if layers is None or l in layers]
        self.intact = torch.zeros(2, dtype=ACCUMULATE)
        self.sums = {v: torch.zeros(3, dtype=ACCUMULATE) for v in self.chosen}
        self.tokens = 0

    def add(self, states, calls, here: torch.Tensor, targets: torch.Tensor) -> None:
        """One batch: its clean states and calls (residual_stream.clean_pass), the flat (B*T)
        indices of the scored positions and their next tokens."""
        if here.numel() == 0:
            return
        d = states[0].shape[-1]

        def rows(h):
            return h.reshape(-1, d).index_select(0, here)

        loss, correct, _, intact_top1 = _score(self.read, rows(states[self.L]), targets)
        self.intact += torch.stack([loss, correct]).cpu()
        for kind, l in self.chosen:
            h = replay(self.adapter, states, calls, kind, l)
            loss, correct, agree, _ = _score(self.read, rows(h), targets, intact_top1)
            self.sums[(kind, l)] += torch.stack([loss, correct, agree]).cpu()
        self.tokens += int(here.numel())

    def result(self) -> SwapResult:
        if self.tokens == 0:
            raise ValueError("layer swaps: no scored tokens (every document shorter than 2?)")
        n = self.tokens
        return SwapResult(
            num_layers=self.L,
            tokens=n,
            intact={"loss": float(self.intact[0]) / n, "accuracy": float(self.intact[1]) / n},
            values={v: dict(zip(SWAP_MEASURES, (s / n).tolist())) for v, s in self.sums.items()},
        )


def swap_effects(adapter, batches, read=None, layers=None, stride: int = 1) -> SwapResult:
    """Every swap and deletion of `adapter`'s model scored on `batches` (dicts with input_ids and
    attention_mask), on every `stride`-th token with a next real token; `layers`: the
    positions l to vary (None: all); `read`: h -> logits (default tuned_lens.readout)."""
    from depthlab.stages.lens_swaps.tuned_lens import readout
    from depthlab.stages.residual_stream import clean_pass

    statistics = SwapStatistics(adapter, read or readout(adapter), layers)
    device = adapter.input_device
    seen = 0
    with torch.inference_mode():
        for batch in batches:
            input_ids = batch["input_ids"].to(device)
            attention_mask = batch["attention_mask"].to(device)
            states, calls = clean_pass(adapter, input_ids, attention_mask)
            here, nxt, seen = scored_tokens(attention_mask, stride, seen)
            statistics.add(states, calls, here, input_ids.reshape(-1).index_select(0, nxt))
    return statistics.result()
