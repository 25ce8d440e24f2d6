#!/usr/bin/env python3
"""The performance peer of `adakv bench`: llama.cpp (llama-cpp-python) on the same GGUF file,
the same token ids and the same thread counts. Prints one JSON line per thread count and prompt
length:
  {"threads": T, "length": L, "prefill_tps": [...], "decode_tps": [...]}   (one entry per repeat)
or a line {"error": "..."} when llama.cpp cannot run here.
Prefill evaluates the L prompt ids in one call (n_batch = L); decode then evaluates
`decode_tokens` greedy tokens one at a time.

When the running interpreter lacks llama-cpp-python, the script runs itself again under
$ADAKV_HOME/venv/bin/python, where `cluster/setup-node.sh bench-peer` installs it.
"""
import argparse
import json
import os
import sys
import time

SETUP_HINT = "bash cluster/setup-node.sh bench-peer"


def venv_python():
    home = os.environ.get("ADAKV_HOME", os.path.expanduser("~/.cache/adakv"))
    return os.path.join(home, "venv", "bin", "python")


def import_llama():
    """Returns llama_cpp's Llama class, or re-executes under the venv, or None."""
    try:
        import numpy  # noqa: F401
        from llama_cpp import Llama

        return Llama
    except ImportError:
        pass
    venv = venv_python()
    if os.path.exists(venv) and os.path.realpath(sys.prefix) != os.path.realpath(
        os.path.dirname(os.path.dirname(venv))
    ):
        os.execv(venv, [venv] + sys.argv)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="int32 token ids, at least max(lengths)")
    ap.add_argument("--lengths", required=True)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", required=True, help="thread counts, comma-separated")
    # llama.cpp's own tools default to flash attention "auto", which the CPU backend turns on;
    # llama-cpp-python defaults to off. On by default so both peers run llama.cpp alike.
    ap.add_argument("--flash-attn", choices=["on", "off"], default="on")
    args = ap.parse_args()
    Llama = import_llama()
    if Llama is None:
        print(json.dumps({"error": f"llama-cpp-python is not installed (run `{SETUP_HINT}`)"}))
        return 0
    import numpy as np
    import llama_cpp

    ids = np.fromfile(args.ids, dtype=np.int32).tolist()
    lengths = [int(x) for x in args.lengths.split(",")]
    n_ctx = max(lengths) + args.decode_tokens + 8
    print(json.dumps({"peer": f"llama-cpp-python {llama_cpp.__version__}",
                      "flash_attn": args.flash_attn}), flush=True)
    for threads in [int(x) for x in args.threads.split(",")]:
        llm = Llama(model_path=args.model, n_ctx=n_ctx, n_batch=max(lengths), n_ubatch=512,
                    n_threads=threads, n_threads_batch=threads, logits_all=False,
                    flash_attn=args.flash_attn == "on", verbose=False)
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
            print(json.dumps({"threads": threads, "length": length, "prefill_tps": prefill,
                              "decode_tps": decode}), flush=True)
        del llm
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a peer that fails is reported in the bench's output, not a crash
        print(json.dumps({"error": f"llama-cpp-python failed: {type(e).__name__}: {e}"}))
        sys.exit(1)
