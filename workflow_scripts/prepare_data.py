#!/usr/bin/env python
"""Build the data stage folder: corpus, byte-level BPE tokenizer, train.bin/val.bin, meta.json.

Example (the default config's data section):
  python workflow_scripts/prepare_data.py --data-config "$(python -c 'import yaml,json;
    print(json.dumps(yaml.safe_load(open("config/default.yaml"))["data"]))')" --seed 0 \\
    --threads 2 --out results/default/data
"""

import argparse
import json
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-config", required=True,
                        help="JSON of the config's `data:` section")
    parser.add_argument("--out", required=True, help="output folder (replaced atomically)")
    parser.add_argument("--seed", type=int, default=0, help="recorded in provenance")
    parser.add_argument("--threads", type=int, default=1,
                        help="docstring parser processes and tokenizer threads")
    args = parser.parse_args()

    # The tokenizers thread pool reads this once, on first use: set it before anything encodes.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true" if args.threads > 1 else "false")

    from depthlab.data import DataError, prepare_corpus

    try:
        data_config = json.loads(args.data_config)
    except json.JSONDecodeError as error:
        sys.exit(f"--data-config: not JSON ({error})")
    start = time.perf_counter()
    try:
        meta = prepare_corpus(data_config, args.out, seed=args.seed, threads=args.threads)
    except DataError as error:
        sys.exit(f"error: {error}")
    splits = meta["splits"]
    print(f"data: {splits['train']['documents']} train / {splits['val']['documents']} val "
          f"documents, {splits['train']['tokens']} / {splits['val']['tokens']} tokens, "
          f"{(splits['train']['bytes'] + splits['val']['bytes']) / 1e6:.2f} MB of text, "
          f"vocab {meta['vocab_size']} ({meta['dtype']}), "
          f"{time.perf_counter() - start:.1f} s -> {args.out}", file=sys.stderr)
    print(json.dumps(meta, sort_keys=True))


if __name__ == "__main__":
    main()
