#!/usr/bin/env python3
"""A real model through adakv's Hugging Face checkpoint path, checked by hand: transformers
loads a GGUF (dequantized to float32), saves it as a checkpoint directory (config.json,
tokenizer files, model.safetensors), and adakv_dump_logits runs both the directory and the GGUF
on one prompt; each is compared with transformers' logits (max |diff| / max |logit| over the
positions, and the argmax agreement).

Needs torch, transformers, gguf, numpy. Usage:
  python3 tests/tools/check_hf_from_gguf.py GGUF OUT_DIR build/tests/adakv_dump_logits
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXT = "The capital of France is Paris. def fibonacci(n):\n    if n < 2:\n        return n\n"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    gguf_path, out, dump = sys.argv[1:]
    d, f = os.path.split(gguf_path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    if not os.path.exists(os.path.join(out, "config.json")):
        # A GGUF-loaded model refuses save_pretrained: copy its weights into a plain one.
        cfg = model.config
        if hasattr(cfg, "quantization_config"):
            delattr(cfg, "quantization_config")
        plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        plain.load_state_dict(model.state_dict())
        plain.save_pretrained(out)
        tok.save_pretrained(out)
    ids = tok(TEXT, add_special_tokens=False).input_ids
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy()
    with tempfile.TemporaryDirectory() as tmp:
        ids_path, logits_path = os.path.join(tmp, "ids.bin"), os.path.join(tmp, "logits.bin")
        np.asarray(ids, dtype=np.int32).tofile(ids_path)
        for path in (out, gguf_path):
            subprocess.run([dump, path, ids_path, logits_path], check=True)
            ours = np.fromfile(logits_path, dtype=np.float32).reshape(ref.shape)
            rel = (np.abs(ours - ref).max(axis=1) / np.abs(ref).max(axis=1)).max()
            same = (ours.argmax(axis=1) == ref.argmax(axis=1)).mean()
            print(f"{path}: {len(ids)} tokens, max rel err {rel:.3g}, argmax agreement {same:.3f}")


if __name__ == "__main__":
    main()
