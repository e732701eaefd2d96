"""The reference code's layer-skip loop (Csordás et al. 2025): one prompt per full forward pass
of the model, with the intervention as a forward hook. The test oracle of the batched
`depthlab.stages.depth_use.interventions.skip_effects` (its tests) and the baseline of its
benchmark (bench/bench_skip_interventions.py). It shares the library's softmax, relative change
and backbone arguments, so a difference is one of the loop.
"""

from __future__ import annotations

import torch

from depthlab.models.architectures import ModelAdapter, first_output, with_first_output
from depthlab.settings.depth_use import parse_variant
from depthlab.stages.depth_use.interventions import _relative_change, _softmax
from depthlab.stages.residual_stream import backbone_kwargs


def _reference_forward(adapter: ModelAdapter, ids: torch.Tensor, hooks=()):
    """(states h_0..h_L, output probabilities at every position or None) of one unpadded prompt
    (1, T) from one full forward pass of the model with `hooks` (handles, removed afterwards) in
    place: the model's own forward, so with an LM head the logits and their softmax cover every
    position, as the reference code reads them."""
    states = {}
    handles = []
    for index, layer in enumerate(adapter.layers):
        handles.append(
            layer.register_forward_pre_hook(
                lambda m, args, kwargs, index=index: states.__setitem__(
                    index, (args[0] if args else kwargs["hidden_states"]).detach().clone()
                ),
                with_kwargs=True,
            )
        )
    handles.append(
        adapter.layers[-1].register_forward_hook(
            lambda m, args, out: states.__setitem__(adapter.num_layers, first_output(out).clone())
        )
    )
    handles += list(hooks)
    kwargs = backbone_kwargs(adapter, ids, torch.ones_like(ids))
    try:
        if adapter.has_lm_head:
            probs = _softmax(adapter.model(**kwargs).logits[0])
        else:
            adapter.backbone(**kwargs)
            probs = None
    finally:
        for handle in handles:
            handle.remove()
    return [states[l][0] for l in range(adapter.num_layers + 1)], probs


def reference_clean_states(adapter: ModelAdapter, input_ids: torch.Tensor):
    """(states, output probabilities or None) of one clean prompt (1-D ids), computed once per
    prompt and reused across its reference interventions, as the reference code does."""
    with torch.inference_mode():
        return _reference_forward(adapter, input_ids.unsqueeze(0))


def reference_skip_effects(
    adapter: ModelAdapter,
    input_ids: torch.Tensor,
    variant: str,
    skipped: int,
    t: int | None = None,
    no_skip_front: int = 1,
    measure: torch.Tensor | None = None,
    clean=None,
):
    """One prompt (1-D ids, no padding), one variant, one skipped layer, one t: a full forward
    pass with the intervention (plus the clean pass unless `clean` states are given), as the
    reference code runs it. Returns (change, output): the relative update change per layer at
    the measured positions (L, n) and the output effect (n,) (None without an LM head).
    Measured positions: >= no_skip_front (scope all) or >= t (future), intersected with
    `measure` (bool (T,)) when given. clean: reference_clean_states(adapter, input_ids)."""
    kind, scope = parse_variant(variant)
    if (scope == "future") != (t is not None):
        raise ValueError("t: required for a '_future' variant and only for it")
    T = input_ids.shape[0]
    positions = torch.arange(T, device=input_ids.device)
    if scope == "all":
        intervene = positions >= no_skip_front
        measured = intervene.clone()
    else:
        intervene = (positions >= no_skip_front) & (positions < t)
        measured = positions >= t
    if measure is not None:
        measured &= measure.to(input_ids.device).bool()
    ids = input_ids.unsqueeze(0)

    if clean is None:
        clean = reference_clean_states(adapter, input_ids)
    clean, clean_probs = clean
    with torch.inference_mode():
        if kind == "layer":

            def hook(module, args, kwargs, output):
                hidden = args[0] if args else kwargs["hidden_states"]
                tensor = first_output(output)
                return with_first_output(
                    output, torch.where(intervene[None, :, None], hidden, tensor)
                )

            hooks = [adapter.layers[skipped].register_forward_hook(hook, with_kwargs=True)]
        else:
            module = (adapter.attention if kind == "attention" else adapter.mlp)[skipped]

            def hook(module, args, output):
                tensor = first_output(output)
                factor = (~intervene).to(tensor.dtype).reshape(*tensor.shape[:-1], 1)
                return with_first_output(output, tensor * factor)

            hooks = [module.register_forward_hook(hook)]
        new, new_probs = _reference_forward(adapter, ids, hooks)
        change = torch.stack(
            [
                _relative_change(clean[l + 1] - clean[l], new[l + 1] - new[l])[measured]
                for l in range(adapter.num_layers)
            ]
        )
        output = None
        if adapter.has_lm_head:
            output = torch.linalg.vector_norm(clean_probs[measured] - new_probs[measured], dim=-1)
    return change.to(torch.float64).cpu().numpy(), (
        None if output is None else output.to(torch.float64).cpu().numpy()
    )
