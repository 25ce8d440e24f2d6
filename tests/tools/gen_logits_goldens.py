#!/usr/bin/env python3
"""Logit goldens from the oracle: HF transformers (fp32) loading the same GGUF file.

Writes tests/data/logits_goldens.bin, read by tests/e2e/test_logits_oracle.cpp:
  magic b"AKLG", u32 version=1, u32 n_prompts, u32 n_top, u32 n_probe, i32 probe_ids[n_probe]
  per prompt: u32 n_tokens, i32 ids[n_tokens], u32 n_greedy, i32 greedy[n_greedy],
              per position: i32 argmax, f32 max_abs_logit, (i32 id, f32 logit)[n_top] (the top
              logits, descending), f32 logits at probe_ids[n_probe]
The whole logit rows would be megabytes; top entries and fixed random probes keep it small.

With --compare BIN (the adakv_dump_logits tool), also compares every logit of every position
with adakv's and prints max |diff| / max |logit| per prompt (the full check, run by hand).

Needs: pip install torch transformers gguf accelerate. Usage:
  python3 tests/tools/gen_logits_goldens.py [--model PATH] [--compare build/tests/adakv_dump_logits]
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(
    os.environ.get("ADAKV_HOME", os.path.expanduser("~/.cache/adakv")), "models",
    "SmolLM2-135M-Instruct.Q4_1.gguf")
N_TOP, N_PROBE, N_GREEDY = 4, 8, 64
LONG_TEXT = "/usr/share/common-licenses/GPL-3"  # in Debian's base-files: every node has it


def prompts(tok):
    chat = tok.apply_chat_template([{"role": "user", "content": "What is the tallest mountain?"}],
                                   tokenize=False, add_generation_prompt=True)
    texts = [
        "The capital of France is",
        chat,
        "def fibonacci(n):\n    if n < 2:\n        return n\n",
        "Le café est très bon. 東京は日本の首都です。 12345 + 678 = 🎉",
    ]
    ids = [tok(t, add_special_tokens=False).input_ids for t in texts]
    with open(LONG_TEXT, encoding="utf-8") as f:
        long_ids = tok(f.read(), add_special_tokens=False).input_ids[:2100]
    assert len(long_ids) == 2100
    return ids + [long_ids]


@torch.no_grad()
def greedy(model, ids, n):
    out = model(torch.tensor([ids]), use_cache=True)
    past, logits, tokens = out.past_key_values, out.logits[0, -1], []
    for _ in range(n):
        nxt = int(torch.argmax(logits))
        tokens.append(nxt)
        out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return tokens


def compare_full(tool, model_path, ids, ref):
    with tempfile.TemporaryDirectory() as d:
        ids_path, out_path = os.path.join(d, "ids.bin"), os.path.join(d, "logits.bin")
        np.asarray(ids, dtype=np.int32).tofile(ids_path)
        subprocess.run([tool, model_path, ids_path, out_path], check=True)
        ours = np.fromfile(out_path, dtype=np.float32).reshape(ref.shape)
    per_pos = np.abs(ours - ref).max(axis=1) / np.abs(ref).max(axis=1)
    same_argmax = (ours.argmax(axis=1) == ref.argmax(axis=1)).mean()
    return float(per_pos.max()), float(same_argmax)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "data", "logits_goldens.bin"))
    ap.add_argument("--compare", help="adakv_dump_logits binary: full comparison, no output file")
    args = ap.parse_args()

    d, f = os.path.split(args.model)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    rng = np.random.default_rng(20261129)
    probe = np.sort(rng.choice(model.config.vocab_size, N_PROBE, replace=False)).astype(np.int32)

    blob = bytearray(b"AKLG" + struct.pack("<4I", 1, 5, N_TOP, N_PROBE) + probe.tobytes())
    for ids in prompts(tok):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
        if args.compare:
            worst, agree = compare_full(args.compare, args.model, ids, logits)
            print(f"{len(ids):5d} tokens: max|diff|/max|logit| = {worst:.2e} (worst position), "
                  f"same argmax at {agree * 100:.2f}% of positions")
            continue
        cont = greedy(model, ids, N_GREEDY)
        blob += struct.pack("<I", len(ids)) + np.asarray(ids, np.int32).tobytes()
        blob += struct.pack("<I", len(cont)) + np.asarray(cont, np.int32).tobytes()
        top = np.argsort(-logits, axis=1, kind="stable")[:, :N_TOP]
        for t in range(len(ids)):
            row = logits[t]
            blob += struct.pack("<if", int(top[t, 0]), float(np.abs(row).max()))
            for i in top[t]:
                blob += struct.pack("<if", int(i), float(row[i]))
            blob += row[probe].astype(np.float32).tobytes()
        print(f"prompt of {len(ids)} tokens; greedy: {cont[:12]}...", file=sys.stderr)
    if not args.compare:
        with open(args.out, "wb") as fh:
            fh.write(blob)
        print(f"wrote {args.out} ({len(blob)} bytes)")


if __name__ == "__main__":
    main()
