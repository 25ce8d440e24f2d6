#!/usr/bin/env python3
"""Logit goldens of the tiny Hugging Face checkpoints (tests/tools/make_tiny_hf_models.py) from
the oracle, transformers loading each directory in float32 (eager attention), for
tests/e2e/test_hf_checkpoint_oracle.cpp.

Writes tests/data/hf_goldens/<model>.bin in the version 2 format of
tests/tools/gen_logits_goldens.py (read by tests/e2e/logits_goldens.h): per prompt its ids,
transformers' greedy continuation and, at each checked position, the argmax, the largest
|logit|, the top logits and the logits at fixed probe ids. Prompts: 24 ids, every position
checked, and transformers' 64 greedy tokens after it (positions 24..87: past the 32 and 64
pre-training positions of the scaled-RoPE models, within their 256); 200 ids (past all of them),
every 8th position and the last 8 checked, no greedy tokens (200 + 64 would pass 256). The ids
come from a fixed integer sequence.

Needs torch, transformers, numpy, tokenizers. Usage:
  python3 tests/tools/gen_hf_goldens.py [--models DIR]   (default: makes them in a temp dir)
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "hf_goldens")
N_TOP, N_PROBE, N_GREEDY = 8, 24, 64
SHORT, LONG, STRIDE, TAIL = 24, 200, 8, 8
VOCAB = 288


def ids(n, seed):
    return [int((i * 2654435761 + seed * 40503 + 17) % 4294967296) % VOCAB for i in range(n)]


def prompts():
    return [(ids(SHORT, 1), list(range(SHORT))),
            (ids(LONG, 2), sorted(set(range(STRIDE - 1, LONG, STRIDE)) | set(range(LONG - TAIL, LONG))))]


PROBES = [int((i * 40503 + 7) % VOCAB) for i in range(N_PROBE)]


@torch.no_grad()
def greedy(model, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        logits = model(torch.tensor([seq])).logits[0, -1]
        seq.append(int(torch.argmax(logits)))
    return seq[len(prompt):]


@torch.no_grad()
def write_goldens(model_dir, out_path):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    out = bytearray(b"AKLG" + struct.pack("<IIII", 2, len(prompts()), N_TOP, N_PROBE))
    out += struct.pack(f"<{N_PROBE}i", *PROBES)
    for prompt, positions in prompts():
        logits = model(torch.tensor([prompt])).logits[0].float().numpy()
        out += struct.pack("<I", len(prompt)) + struct.pack(f"<{len(prompt)}i", *prompt)
        g = []
        if len(prompt) == SHORT:
            assert SHORT + N_GREEDY <= model.config.max_position_embeddings
            g = greedy(model, prompt, N_GREEDY)
        out += struct.pack("<I", len(g)) + struct.pack(f"<{len(g)}i", *g)
        out += struct.pack("<I", len(positions))
        for p in positions:
            row = logits[p]
            top = np.argsort(-row, kind="stable")[:N_TOP]
            out += struct.pack("<Iif", p, int(row.argmax()), float(np.abs(row).max()))
            for t in top:
                out += struct.pack("<if", int(t), float(row[t]))
            out += struct.pack(f"<{N_PROBE}f", *[float(row[i]) for i in PROBES])
    with open(out_path, "wb") as f:
        f.write(out)
    return len(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", help="the directory make_tiny_hf_models.py wrote")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.models
        if root is None:
            root = tmp
            subprocess.run([sys.executable, os.path.join(HERE, "make_tiny_hf_models.py"), root],
                           check=True, stdout=subprocess.DEVNULL)
        for name in sorted(os.listdir(root)):
            n = write_goldens(os.path.join(root, name), os.path.join(OUT, name + ".bin"))
            print(f"{name}: {n} bytes")


if __name__ == "__main__":
    main()
