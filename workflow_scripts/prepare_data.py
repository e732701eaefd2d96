#!/usr/bin/env python
"""Build the data stage folder: corpus, byte-level BPE tokenizer, train.bin/val.bin, meta.json.

Spec (`prepare_data` job): {"data": the config's `data:` section, "seed": recorded in
provenance, "out": output folder (replaced atomically)}.

By hand, with the same values as the workflow:
  python workflow_scripts/prepare_data.py --config config/default.yaml --job data --threads 2
"""

import json
import os
import sys
import time

from depthlab.cli import main_guard, start_job


def main() -> None:
    args, spec = start_job(__doc__, "prepare_data")
    # The tokenizers thread pool reads this once, on first use: set it before anything encodes.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true" if args.threads > 1 else "false")

    from depthlab.data.prepare import prepare_corpus

    start = time.perf_counter()
    meta = prepare_corpus(spec["data"], spec["out"], seed=spec["seed"], threads=args.threads)
    splits = meta["splits"]
    print(
        f"data: {splits['train']['documents']} train / {splits['val']['documents']} val "
        f"documents, {splits['train']['tokens']} / {splits['val']['tokens']} tokens, "
        f"{(splits['train']['bytes'] + splits['val']['bytes']) / 1e6:.2f} MB of text, "
        f"vocab {meta['vocab_size']} ({meta['dtype']}), "
        f"{time.perf_counter() - start:.1f} s -> {spec['out']}",
        file=sys.stderr,
    )
    print(json.dumps(meta, sort_keys=True))


if __name__ == "__main__":
    main_guard(main)
