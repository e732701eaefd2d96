#!/usr/bin/env python
"""Benchmark: cross-model linear maps for every (source layer, target layer) pair, fitted in
closed form (depthlab.stages.depth_use.linear_maps.AffineRidgeMaps: float64 normal equations streamed, one
eigendecomposition per source layer, alpha chosen on a validation split) against the reference
code's method, one affine map per pair trained by AdamW on the MSE. Both read the same cached
states (fit / val / test tokens of the same documents); the script prints both held-out mean
relative errors ||y_hat - y|| / ||y||, the share of pairs where the closed form is at least as
good, and the time ratio (goal >= 10x).

AdamW gets its best shot: inputs and targets standardised with the fit statistics, a cosine
schedule, `--adamw-steps` minibatch steps per pair with the learning rate picked on the
validation split from `--adamw-lrs` (the time of every tried learning rate counts, as it would in
a sweep; with one learning rate only that one run is timed).

Default pair: the default run's depth_width_l4_m96 -> depth_width_l16_m96 on its val.jsonl when
they exist, else (or with --random) two random-weight pre-LN models (4 and 16 layers, width 96)
on random tokens. --source, --target and --texts replace the default run's paths; a path given
that does not exist is an error, never a fall-back to the random pair.

    python bench/bench_linear_maps.py [--source DIR --target DIR --texts val.jsonl | --random]
        [--documents 290] [--adamw-steps 300] [--adamw-lrs 3e-3] [--threads 1]
"""

import argparse
import itertools
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUN = ROOT / "results" / "default"


DEFAULT_INPUTS = {
    "source": DEFAULT_RUN / "models" / "depth_width_l4_m96",
    "target": DEFAULT_RUN / "models" / "depth_width_l16_m96",
    "texts": DEFAULT_RUN / "data" / "val.jsonl",
}


def inputs(args, parser) -> dict | None:
    """{source, target, texts} paths, or None for the random-weight pair. A path given on the
    command line must exist (a typo would otherwise benchmark random models without a word);
    the default run's are used when all three exist, unless --random."""
    given = {name: getattr(args, name) for name in DEFAULT_INPUTS if getattr(args, name)}
    if args.random:
        if given:
            parser.error(f"--random takes no --{', --'.join(given)}")
        return None
    paths = {name: Path(given.get(name, default)) for name, default in DEFAULT_INPUTS.items()}
    missing = [
        name
        for name, path in paths.items()
        if not (path.is_file() if name == "texts" else path.is_dir())
    ]
    if given:
        for name in sorted(missing, key=lambda name: name not in given):  # given ones first
            what = "file" if name == "texts" else "model folder"
            if name in given:
                parser.error(f"--{name}: {paths[name]} is not a {what}")
            parser.error(
                f"--{name}: not given, and the default run's {paths[name]} is not a {what}"
            )
        return paths
    return None if missing else paths


def cached_states(args, paths):
    """{split: (source states (L_a+1, n, d), target states (L_b+1, n, d))}, float32, of the
    models and texts of `paths` (None: the random-weight pair on random tokens)."""
    import torch
    from depthlab.data.prepare import iter_jsonl_texts
    from depthlab.models.architectures import adapt, load_model, load_tokenizer
    from depthlab.stages.depth_use.linear_maps import split_of, stream_states
    from depthlab.stages.residual_stream import iter_token_batches

    if paths is not None:
        source, target, texts = paths["source"], paths["target"], paths["texts"]
        models = [adapt(load_model(str(source))), adapt(load_model(str(target)))]
        tokenizer = load_tokenizer(str(source))
        documents = list(itertools.islice(iter_jsonl_texts(texts), args.documents))
        names = (Path(source).name, Path(target).name)

        def batches(split):
            chosen = [d for d in documents if split_of(d, 0.15, 0.25) == split]
            return iter_token_batches(chosen, tokenizer, max_length=64, batch_size=32)
    else:
        from depthlab.models.decoders import build_model, make_config

        models = []
        for layers, seed in ((4, 0), (16, 1)):
            config = make_config(
                {"hidden_size": 96, "num_layers": layers, "num_heads": 3, "intermediate_size": 256},
                "pre_ln",
                vocab_size=4096,
                max_positions=64,
            )
            models.append(adapt(build_model(config, seed).eval()))
        names = ("random 4x96", "random 16x96")
        generator = torch.Generator().manual_seed(0)
        rows = {
            s: torch.randint(2, 4096, (n, 64), generator=generator)
            for s, n in (("fit", 150), ("val", 40), ("test", 70))
        }

        def batches(split):
            return [
                {"input_ids": chunk, "attention_mask": torch.ones_like(chunk)}
                for chunk in rows[split].split(32)
            ]

    out = {}
    for split in ("fit", "val", "test"):
        xs, ys = [], []
        for batch in batches(split):
            xs.append(torch.stack(next(stream_states(models[0], [batch], skip_first=1))))
            ys.append(torch.stack(next(stream_states(models[1], [batch], skip_first=1))))
        out[split] = (torch.cat(xs, dim=1), torch.cat(ys, dim=1))
    return out, names


def closed_form(states, alphas, chunk=2048):
    import numpy as np
    from depthlab.stages.depth_use.linear_maps import AffineRidgeMaps

    (fx, fy), (vx, vy), (tx, ty) = states["fit"], states["val"], states["test"]
    fitter = AffineRidgeMaps(list(range(fx.shape[0])), list(range(fy.shape[0])), alphas)
    for split, (x, y) in (("fit", (fx, fy)), ("val", (vx, vy))):
        for start in range(0, x.shape[1], chunk):
            fitter.add(
                split,
                {i: x[i, start : start + chunk] for i in range(x.shape[0])},
                {j: y[j, start : start + chunk] for j in range(y.shape[0])},
            )
    fitter.solve()
    for start in range(0, tx.shape[1], chunk):
        fitter.add(
            "test",
            {i: tx[i, start : start + chunk] for i in range(tx.shape[0])},
            {j: ty[j, start : start + chunk] for j in range(ty.shape[0])},
        )
    errors = fitter.errors()
    matrix = np.zeros((fx.shape[0], fy.shape[0]))
    for (i, j), value in errors.items():
        matrix[i, j] = value
    return matrix


def adamw_pair(x, y, vx, vy, tx, ty, steps, lr, batch, seed):
    """One pair: standardised affine map trained by AdamW on the MSE; (val SSE, test error)."""
    import torch

    mx, sx = x.mean(0), x.std(0).clamp_min(1e-6)
    my, sy = y.mean(0), y.std(0).clamp_min(1e-6)
    xn, yn = (x - mx) / sx, (y - my) / sy
    layer = torch.nn.Linear(x.shape[1], y.shape[1])
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        index = torch.randint(0, x.shape[0], (batch,), generator=generator)
        loss = torch.nn.functional.mse_loss(layer(xn[index]), yn[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    with torch.no_grad():
        predict = lambda a: layer((a - mx) / sx) * sy + my  # noqa: E731
        val_sse = float(((predict(vx) - vy) ** 2).sum())
        test = float(((predict(tx) - ty).norm(dim=1) / ty.norm(dim=1).clamp_min(1e-30)).mean())
    return val_sse, test


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", help="model folder (default: the default run's)")
    parser.add_argument("--target", help="model folder (default: the default run's)")
    parser.add_argument("--texts", help="jsonl of texts (default: the default run's val.jsonl)")
    parser.add_argument(
        "--random", action="store_true", help="the random-weight pair, whatever is on disk"
    )
    parser.add_argument("--documents", type=int, default=290)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 1e-4, 1e-3, 1e-2, 1e-1])
    parser.add_argument("--adamw-steps", type=int, default=300)
    parser.add_argument("--adamw-lrs", type=float, nargs="+", default=[3e-3])
    parser.add_argument("--adamw-batch", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    paths = inputs(args, parser)

    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    states, names = cached_states(args, paths)
    tokens = {split: int(states[split][0].shape[1]) for split in states}
    start = time.perf_counter()
    closed = closed_form(states, args.alphas)
    closed_s = time.perf_counter() - start

    (fx, fy), (vx, vy), (tx, ty) = states["fit"], states["val"], states["test"]
    adamw = np.zeros_like(closed)
    start = time.perf_counter()
    for i in range(fx.shape[0]):
        for j in range(fy.shape[0]):
            runs = [
                adamw_pair(
                    fx[i],
                    fy[j],
                    vx[i],
                    vy[j],
                    tx[i],
                    ty[j],
                    args.adamw_steps,
                    lr,
                    args.adamw_batch,
                    seed=i * 1000 + j,
                )
                for lr in args.adamw_lrs
            ]
            adamw[i, j] = min(runs)[1]  # the lr of least validation SSE
    adamw_s = time.perf_counter() - start
    not_worse = float(np.mean(closed <= adamw * (1 + 1e-3)))
    print(
        f"pair: {names[0]} -> {names[1]}; {closed.shape[0]} x {closed.shape[1]} layer pairs; "
        f"tokens fit {tokens['fit']}, val {tokens['val']}, test {tokens['test']}; "
        f"{args.threads} thread(s)"
    )
    print(
        f"closed form (alphas {args.alphas}): {closed_s:.2f} s, mean held-out relative error "
        f"{closed.mean():.4f}"
    )
    print(
        f"AdamW per pair ({args.adamw_steps} steps x {args.adamw_batch}, lrs {args.adamw_lrs}): "
        f"{adamw_s:.2f} s, mean held-out relative error {adamw.mean():.4f}"
    )
    print(
        f"closed form at least as good on {100 * not_worse:.1f}% of pairs; largest excess "
        f"{float(np.max(closed - adamw)):.2e}; time ratio x{adamw_s / closed_s:.1f} "
        f"(goal >= 10)"
    )
    print(
        json.dumps(
            {
                "closed_form_s": round(closed_s, 3),
                "adamw_s": round(adamw_s, 3),
                "ratio": round(adamw_s / closed_s, 2),
                "closed_form_error": float(closed.mean()),
                "adamw_error": float(adamw.mean()),
                "pairs_not_worse": not_worse,
            }
        )
    )


if __name__ == "__main__":
    main()
