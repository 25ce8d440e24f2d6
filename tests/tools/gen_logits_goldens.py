#!/usr/bin/env python3
"""Logit goldens from the oracle: HF transformers (fp32) loading the same GGUF file.

Writes tests/data/logits_goldens.bin for the default model, read by
tests/e2e/test_logits_oracle.cpp:
  magic b"AKLG", u32 version=1, u32 n_prompts, u32 n_top, u32 n_probe, i32 probe_ids[n_probe]
  per prompt: u32 n_tokens, i32 ids[n_tokens], u32 n_greedy, i32 greedy[n_greedy],
              per position: i32 argmax, f32 max_abs_logit, (i32 id, f32 logit)[n_top] (the top
              logits, descending), f32 logits at probe_ids[n_probe]
The whole logit rows would be megabytes; top entries and fixed random probes keep it small.

For a qwen2 model (the qwen2.5-coder-0.5b file) it writes tests/data/logits_goldens_qwen2.bin,
read by tests/e2e/test_qwen_logits_oracle.cpp, in version 2: as version 1, except that each
prompt lists the positions it checks (u32 n_checked, then per checked position u32 position
before its entry), because its long prompt (8192 tokens: past the default model's context)
checks only every 64th position and its last 128 (LONG_STRIDE, LONG_TAIL); the other prompts
check every position.

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
QWEN2_OUT = os.path.join(HERE, "..", "data", "logits_goldens_qwen2.bin")
N_TOP, N_PROBE, N_GREEDY = 4, 8, 64
LONG_TEXT = "/usr/share/common-licenses/GPL-3"  # in Debian's base-files: every node has it
LONG_MORE = "/usr/share/common-licenses/GPL-2"  # Qwen's long prompt continues into it
QWEN2_LONG, LONG_STRIDE, LONG_TAIL = 8192, 64, 128


def prompts(tok, long_tokens=2100):
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
        long_text = f.read()
    if long_tokens > 2100:
        with open(LONG_MORE, encoding="utf-8") as f:
            long_text += "\n\n" + f.read()
    long_ids = tok(long_text, add_special_tokens=False).input_ids[:long_tokens]
    assert len(long_ids) == long_tokens
    return ids + [long_ids]


def checked_positions(n, sparse):
    """Every position, or for a sparse (long) prompt every LONG_STRIDE-th and the last LONG_TAIL:
    the rows adakv's test gets from chunks of LONG_STRIDE tokens ending there."""
    if not sparse:
        return list(range(n))
    assert n % LONG_STRIDE == 0 and n > LONG_TAIL
    return sorted(set(range(LONG_STRIDE - 1, n, LONG_STRIDE)) | set(range(n - LONG_TAIL, n)))


@torch.no_grad()
def logits_at(model, ids, positions):
    """float32 logits [len(positions)][vocab], the LM head run on those rows alone (a long
    prompt's whole [n][vocab] would take gigabytes)."""
    hidden = model.model(torch.tensor([ids])).last_hidden_state[0]
    return model.lm_head(hidden[positions]).float().numpy()


@torch.no_grad()
def greedy(model, ids, n):
    out = model(torch.tensor([ids]), use_cache=True, logits_to_keep=1)
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
    ap.add_argument("--out", help="default tests/data/logits_goldens.bin, or "
                    "logits_goldens_qwen2.bin for a qwen2 model")
    ap.add_argument("--compare", help="adakv_dump_logits binary: full comparison, no output file")
    args = ap.parse_args()

    d, f = os.path.split(args.model)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    qwen2 = model.config.model_type == "qwen2"
    version = 2 if qwen2 else 1
    if args.out is None:
        args.out = QWEN2_OUT if qwen2 else os.path.join(HERE, "..", "data", "logits_goldens.bin")
    rng = np.random.default_rng(20261129)
    probe = np.sort(rng.choice(model.config.vocab_size, N_PROBE, replace=False)).astype(np.int32)

    blob = bytearray(b"AKLG" + struct.pack("<4I", version, 5, N_TOP, N_PROBE) + probe.tobytes())
    for ids in prompts(tok, QWEN2_LONG if qwen2 else 2100):
        positions = checked_positions(len(ids), sparse=qwen2 and len(ids) >= QWEN2_LONG)
        if version == 1:
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float().numpy()
        else:
            logits = logits_at(model, ids, positions)
        if args.compare:
            assert version == 1, "--compare runs the default model's goldens"
            worst, agree = compare_full(args.compare, args.model, ids, logits)
            print(f"{len(ids):5d} tokens: max|diff|/max|logit| = {worst:.2e} (worst position), "
                  f"same argmax at {agree * 100:.2f}% of positions")
            continue
        cont = greedy(model, ids, N_GREEDY)
        blob += struct.pack("<I", len(ids)) + np.asarray(ids, np.int32).tobytes()
        blob += struct.pack("<I", len(cont)) + np.asarray(cont, np.int32).tobytes()
        if version == 2:
            blob += struct.pack("<I", len(positions))
        top = np.argsort(-logits, axis=1, kind="stable")[:, :N_TOP]
        for t, pos in enumerate(positions):
            row = logits[t]
            if version == 2:
                blob += struct.pack("<I", pos)
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
