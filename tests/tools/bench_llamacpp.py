#!/usr/bin/env python3
"""The performance peer of `adakv bench`: llama.cpp (llama-cpp-python) on the same GGUF file,
the same token ids and the same thread count. Prints one JSON line per prompt length:
  {"length": L, "prefill_tps": [...], "decode_tps": [...]}   (one entry per repeat)
Prefill evaluates the L prompt ids in one call (n_batch = L); decode then evaluates
`decode_tokens` greedy tokens one at a time.
"""
import argparse
import json
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="int32 token ids, at least max(lengths)")
    ap.add_argument("--lengths", required=True)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, required=True)
    args = ap.parse_args()
    try:
        from llama_cpp import Llama
    except ImportError:
        print(json.dumps({"error": "llama-cpp-python is not installed (pip install llama-cpp-python)"}))
        return 0

    ids = np.fromfile(args.ids, dtype=np.int32).tolist()
    lengths = [int(x) for x in args.lengths.split(",")]
    n_ctx = max(lengths) + args.decode_tokens + 8
    llm = Llama(model_path=args.model, n_ctx=n_ctx, n_batch=max(lengths), n_ubatch=512,
                n_threads=args.threads, n_threads_batch=args.threads, logits_all=False,
                verbose=False)
    for length in lengths:
        prefill, decode = [], []
        for _ in range(args.repeats):
            llm.reset()  # the next eval drops every cached token past n_tokens = 0
            t0 = time.perf_counter()
            llm.eval(ids[:length])
            prefill.append(length / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for _ in range(args.decode_tokens):
                last = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
                nxt = int(np.argmax(last))
                llm.eval([nxt])
            decode.append(args.decode_tokens / (time.perf_counter() - t0))
        print(json.dumps({"length": length, "prefill_tps": prefill, "decode_tps": decode}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
