#!/usr/bin/env python3
"""The batched peer of `adakv bench`: llama.cpp's own `llama-batched-bench` on the same GGUF file,
B sequences of P-token prompts each decoding G tokens together. Prints one JSON line per thread
count:
  {"threads": T, "decode_tps": [...], "prefill_tps": [...]}   (one entry per repeat)
decode_tps is llama-batched-bench's S_TG: B * G tokens over the time of the G batched decode
steps. Prints {"error": "..."} when the binary is missing or fails.

llama-batched-bench feeds random token ids (its own choice; speed does not depend on them). Each
repeat is one more entry of -npl in the same process: the cache is cleared and the prompts
prefilled again before every measurement.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

SETUP_HINT = "bash cluster/setup-node.sh serve-peer"
NAME = "llama-batched-bench"


def find_binary(given):
    if given:
        return given if os.path.isfile(given) else None
    home = os.environ.get("ADAKV_HOME", os.path.expanduser("~/.cache/adakv"))
    built = os.path.join(home, "llama.cpp", "build", "bin", NAME)
    if os.path.isfile(built):
        return built
    return shutil.which(NAME)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", default="", help=f"{NAME} (default: $ADAKV_HOME/llama.cpp/build/bin)")
    ap.add_argument("--threads", required=True, help="thread counts, comma-separated")
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flash-attn", choices=["on", "off"], default="on")
    args = ap.parse_args()
    binary = find_binary(args.bin)
    if binary is None:
        print(json.dumps({"error": f"{NAME} not found (run `{SETUP_HINT}`)"}))
        return 0
    print(json.dumps({"peer": binary, "flash_attn": args.flash_attn}), flush=True)
    # Each sequence holds its own prompt and generated tokens; llama-batched-bench silently skips
    # a configuration that does not fit the context, so size it exactly.
    n_ctx = args.seqs * (args.prompt + args.decode_tokens)
    for threads in [int(x) for x in args.threads.split(",")]:
        cmd = [binary, "-m", args.model, "-c", str(n_ctx), "-b", "2048", "-ub", "512",
               "-npp", str(args.prompt), "-ntg", str(args.decode_tokens),
               "-npl", ",".join([str(args.seqs)] * args.repeats),
               "-t", str(threads), "-tb", str(threads), "-fa", args.flash_attn,
               "--output-format", "jsonl"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        rows = []
        for line in (proc.stdout + "\n" + proc.stderr).splitlines():
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        if proc.returncode != 0 or len(rows) != args.repeats:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            print(json.dumps({"error": f"{NAME} exited {proc.returncode} with {len(rows)} of "
                              f"{args.repeats} results: {tail}"}), flush=True)
            return 0
        print(json.dumps({"threads": threads,
                          "decode_tps": [r["speed_tg"] for r in rows],
                          "prefill_tps": [r["speed_pp"] for r in rows]}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a peer that fails is reported in the bench's output, not a crash
        print(json.dumps({"error": f"{NAME} failed: {type(e).__name__}: {e}"}))
        sys.exit(1)
