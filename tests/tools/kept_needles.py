#!/usr/bin/env python3
"""What a compressed document kept of its needles (`adakv eval passkey-multi --dump-scores DIR`).

Each dumped document (<stem>.json and <stem>.f32: the recording's scores [layer][kv head][prefix]
and each policy's kept tokens per head) is read back; a head's kept set is the top of its
scores, as many as it kept less the window (always kept). Then, per policy:

- per needle, each token's share of (layer, head) pairs keeping it and a row over the layers:
  `#` every head of the layer keeps it, `+` some do, `.` none;
- with --layers, per layer and head, the share of each tenth of the document it keeps.

  python3 tests/tools/kept_needles.py --tokenizer DIR [--layers] STEM...

DIR holds the model's tokenizer.json (~/.cache/adakv/models/hf-tokenizers/qwen2.5); STEM is a
dump without its extension.
"""
import argparse
import json

import numpy as np
from tokenizers import Tokenizer


def kept_sets(scores, kept, window):
    """[layer][head][prefix] booleans: the top (kept - window) scores of each head."""
    layers, heads, prefix = scores.shape
    keep = np.zeros(scores.shape, bool)
    for l in range(layers):
        for h in range(heads):
            k = min(prefix, int(kept[l][h]) - window)
            if k > 0:
                keep[l, h, np.argpartition(-scores[l, h], k - 1)[:k]] = True
    return keep


def needle_spans(pieces, answers):
    """Token span of each needle sentence: 'The pass key of the X door is K. ... X door.'"""
    text, starts = "", []
    for p in pieces:
        starts.append(len(text))
        text += p
    spans = []
    for key in answers:
        at = text.find(" door is " + key)
        begin = text.rfind("The pass key of the", 0, at)
        end = text.find(" door.", at) + len(" door.")
        first = next(i for i, s in enumerate(starts) if s + len(pieces[i]) > begin)
        last = next((i for i, s in enumerate(starts) if s >= end), len(pieces))
        spans.append((key, first, last))
    return spans


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True, help="folder holding tokenizer.json")
    ap.add_argument("--window", type=int, default=32, help="the observation window (default 32)")
    ap.add_argument("--layers", action="store_true", help="also where each head's budget went")
    ap.add_argument("stems", nargs="+")
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer + "/tokenizer.json")
    for stem in args.stems:
        meta = json.load(open(stem + ".json"))
        ctx, layers = meta["context"], meta["layers"]
        prefix = len(ctx) - args.window
        raw = np.fromfile(stem + ".f32", dtype=np.float32)
        scores = raw.reshape(layers, -1, prefix)
        pieces = [tok.decode([t]) for t in ctx]
        spans = needle_spans(pieces, meta["answers"])
        for run in meta["runs"]:
            keep = kept_sets(scores, run["kept"], args.window)
            print(f"== {stem}: {run['label']}")
            for key, first, last in spans:
                print(f"  key {key}: tokens {first}..{last} ({100 * first / len(ctx):.1f}%)")
                for t in range(first, min(last, prefix)):
                    row = "".join("#" if keep[l, :, t].all() else "+" if keep[l, :, t].any()
                                  else "." for l in range(layers))
                    print(f"    {pieces[t]!r:>12} {keep[:, :, t].mean():5.2f} {row}")
            if args.layers:
                print("  layer head kept: share of each tenth of the document kept")
                for l in range(layers):
                    for h in range(scores.shape[1]):
                        where = np.flatnonzero(keep[l, h])
                        tenths = np.histogram(where, bins=10, range=(0, prefix))[0] / (prefix / 10)
                        print(f"  {l:5d} {h:4d} {len(where):5d} " +
                              " ".join(f"{x:.2f}" for x in tenths))


if __name__ == "__main__":
    main()
