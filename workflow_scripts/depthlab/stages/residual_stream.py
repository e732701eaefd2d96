"""Residual-stream capture by hooks, streamed to a consumer one layer at a time.

docs/design.md: the residual stream is read by hooks, not from `output_hidden_states` (whose last entry
is the final-norm output in HF Llama/Qwen/Mistral). During one forward pass the consumer sees, in
order, for l = 0..L-1:

    state(l, h_l)             the input of layer l
    attention_update(l, a_l)  the output of the layer's attention update module
    mlp_update(l, m_l)        the output of its MLP update module

and finally state(L, h_L), the output of the last layer before the final norm. Tensors are the
model's own (any dtype, shape (..., hidden)), all on one device, the input embedding's: a model
sharded over several GPUs (depthlab.core.placement) has its layers' tensors moved there first. The
consumer keeps only what it needs, so memory is bounded by one batch, never by the number of
tokens seen.

The clean pass (`clean_pass`) keeps instead every state h_0..h_L of one batch and how the backbone
called each layer (`LayerCall`: mask, rotary embeddings, ...), so that an intervention replays the
layers from any state: the skip interventions (depthlab.stages.depth_use) and the layer swaps
(depthlab.stages.lens_swaps) share it. Shared by every stage that reads a model's hidden states,
so no stage imports another's.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from typing import Protocol

import torch

from depthlab.data.prepare import encode_documents
from depthlab.models.architectures import ModelAdapter, first_output


class ResidualStreamConsumer(Protocol):
    def begin_batch(self, attention_mask: torch.Tensor) -> None: ...
    def state(self, layer: int, hidden: torch.Tensor) -> None: ...
    def attention_update(self, layer: int, update: torch.Tensor) -> None: ...
    def mlp_update(self, layer: int, update: torch.Tensor) -> None: ...
    def end_batch(self) -> None: ...


class ResidualStreamHooks:
    """Context manager: hooks on every layer of `adapter` that feed `consumer` during forwards,
    every tensor moved to `device` (default: the input embedding's; a no-op on one device)."""

    def __init__(self, adapter: ModelAdapter, consumer: ResidualStreamConsumer, device=None):
        self.adapter = adapter
        self.consumer = consumer
        self.device = device if device is not None else adapter.input_device
        self._handles = []

    def __enter__(self) -> ResidualStreamHooks:
        consumer, last, device = self.consumer, self.adapter.num_layers - 1, self.device
        for index, layer in enumerate(self.adapter.layers):

            def layer_input(module, args, kwargs, index=index):
                hidden = args[0] if args else kwargs["hidden_states"]
                consumer.state(index, hidden.to(device))

            def attention_output(module, args, output, index=index):
                consumer.attention_update(index, first_output(output).to(device))

            def mlp_output(module, args, output, index=index):
                consumer.mlp_update(index, first_output(output).to(device))

            self._handles.append(layer.register_forward_pre_hook(layer_input, with_kwargs=True))
            self._handles.append(
                self.adapter.attention[index].register_forward_hook(attention_output)
            )
            self._handles.append(self.adapter.mlp[index].register_forward_hook(mlp_output))
            if index == last:

                def final_output(module, args, output, index=index):
                    consumer.state(index + 1, first_output(output).to(device))

                self._handles.append(layer.register_forward_hook(final_output))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only, so left padding leaves every sequence's positions
    (and hence its hidden states) unchanged."""
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def stream_residuals(
    adapter: ModelAdapter, batches: Iterable[dict], consumer: ResidualStreamConsumer
) -> int:
    """Run the backbone over `batches` (dicts with input_ids and attention_mask) with hooks
    feeding `consumer`; return the number of batches. The LM head is not run: a consumer that
    wants logits (the logit lens) applies `adapter.logits` itself."""
    backbone = adapter.backbone
    device = adapter.input_device
    parameters = inspect.signature(backbone.forward).parameters
    extra = {"use_cache": False} if "use_cache" in parameters else {}
    count = 0
    with torch.inference_mode(), ResidualStreamHooks(adapter, consumer, device):
        for batch in batches:
            input_ids = batch["input_ids"].to(device)
            attention_mask = batch["attention_mask"].to(device)
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, **extra}
            if "position_ids" in parameters:
                kwargs["position_ids"] = position_ids_from_mask(attention_mask)
            consumer.begin_batch(attention_mask)
            backbone(**kwargs)
            consumer.end_batch()
            count += 1
    return count


def document_ids(text: str, tokenizer, max_length: int, add_special_tokens: bool) -> list[int]:
    """One document's token ids, cut to max_length. Without special tokens they are the ids the
    training stream holds for it (depthlab.data.prepare.encode_documents: a model pretrained here never
    saw a tokenizer's bos/eos template there); with them, the tokenizer's own template (a hub
    model's convention, e.g. Llama's leading BOS)."""
    if add_special_tokens:
        return tokenizer(text, truncation=True, max_length=max_length)["input_ids"]
    return encode_documents(tokenizer, [text])[0][:max_length]


def iter_token_batches(
    texts: Iterable[str],
    tokenizer,
    max_length: int,
    batch_size: int,
    max_samples: int | None = None,
    max_tokens: int | None = None,
    sort_window: int = 64,
    add_special_tokens: bool = False,
) -> Iterator[dict]:
    """Tokenise `texts` lazily (`document_ids`) into padded batches (the tokenizer's padding
    side). Documents are length-sorted within windows of sort_window batches to cut padding;
    memory stays flat. Stops after max_samples documents or before max_tokens real tokens would
    be exceeded."""
    samples = tokens = 0
    window: list[list[int]] = []

    def flush(window):
        window.sort(key=len)
        for start in range(0, len(window), batch_size):
            chunk = window[start : start + batch_size]
            yield tokenizer.pad({"input_ids": chunk}, padding=True, return_tensors="pt")

    for text in texts:
        if max_samples is not None and samples >= max_samples:
            break
        ids = document_ids(text, tokenizer, max_length, add_special_tokens)
        if not ids:
            continue
        if max_tokens is not None and tokens + len(ids) > max_tokens:
            break
        window.append(ids)
        samples += 1
        tokens += len(ids)
        if len(window) == sort_window * batch_size:
            yield from flush(window)
            window = []
    if window:
        yield from flush(window)


class LayerCall:
    """How the backbone called one decoder layer: hidden states in args[0] or as a keyword."""

    def __init__(self, args, kwargs):
        if args:
            self.hidden = args[0]
            self.args, self.kwargs, self.keyword = tuple(args[1:]), dict(kwargs), False
        else:
            self.hidden = kwargs["hidden_states"]
            rest = dict(kwargs)
            rest.pop("hidden_states")
            self.args, self.kwargs, self.keyword = (), rest, True

    def run(self, layer, hidden, expand):
        """The layer's output on `hidden`'s device (a sharded layer computes on its own)."""
        args = tuple(expand(a) for a in self.args)
        kwargs = {k: expand(v) for k, v in self.kwargs.items()}
        if self.keyword:
            return first_output(layer(*args, hidden_states=hidden, **kwargs)).to(hidden.device)
        return first_output(layer(hidden, *args, **kwargs)).to(hidden.device)


def backbone_kwargs(adapter: ModelAdapter, input_ids, attention_mask) -> dict:
    parameters = inspect.signature(adapter.backbone.forward).parameters
    kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "use_cache" in parameters:
        kwargs["use_cache"] = False
    if "position_ids" in parameters:
        kwargs["position_ids"] = position_ids_from_mask(attention_mask)
    return kwargs


def clean_pass(adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """(states h_0..h_L, per-layer calls) of one batch, from hooks on the backbone's forward;
    the states on the device of `input_ids`."""
    calls: list[LayerCall | None] = [None] * adapter.num_layers
    final = {}
    handles = []
    for index, layer in enumerate(adapter.layers):

        def pre(module, args, kwargs, index=index):
            calls[index] = LayerCall(args, kwargs)

        handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
    handles.append(
        adapter.layers[-1].register_forward_hook(
            lambda module, args, output: final.__setitem__("h", first_output(output))
        )
    )
    try:
        adapter.backbone(**backbone_kwargs(adapter, input_ids, attention_mask))
    finally:
        for handle in handles:
            handle.remove()
    if any(call is None for call in calls) or "h" not in final:
        raise RuntimeError("the forward pass did not run every decoder layer")
    states = [call.hidden.to(input_ids.device) for call in calls] + [
        final["h"].to(input_ids.device)
    ]
    return states, calls
