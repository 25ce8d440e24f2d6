#!/usr/bin/env python3
"""Tensor-parallel benchmark: `adakv generate --json` on the default model as the ranks of
mpirun jobs of several sizes, side by side. Prints prefill and decode tokens/s, the speed
relative to TP 1, and the share of each run's time spent in the layers' all_reduce and in the
Ada-KV budget exchange (rank 0's clock). Medians over --repeats runs.

  python3 tests/tools/bench_tp.py [--adakv build/adakv] [--tp 1,3] [--prompt-tokens 2048]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "mpi_yield_when_idle", "1",
          "-x", "OMPI_MCA_btl_vader_single_copy_mechanism=none"]


def prompt_file(chars):
    text = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
    while len(text) < chars:
        text += text
    f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    f.write(text[:chars])
    f.close()
    return f.name


def run(adakv, np, threads, prompt, args, lm_head):
    env = dict(os.environ, ADAKV_LM_HEAD=lm_head)
    cmd = MPIRUN + ["-x", "ADAKV_LM_HEAD", "-np", str(np), adakv, "generate",
                    "--prompt-file", prompt, "--max-tokens", str(args.decode_tokens),
                    "--ignore-eos", "--threads", str(threads), "--json",
                    "--policy", args.policy, "--budget", args.budget]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"TP {np} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--adakv", default="build/adakv")
    p.add_argument("--tp", default="1,3")
    p.add_argument("--prompt-chars", type=int, default=9000, help="about 2k tokens")
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--policy", default="adakv")
    p.add_argument("--budget", default="0.2")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    prompt = prompt_file(args.prompt_chars)
    cores = os.cpu_count()
    # (label, ranks, threads per rank, LM head): TP 1 with every core, then each TP size with
    # the cores shared between its ranks, both LM-head layouts.
    configs = []
    for tp in [int(x) for x in args.tp.split(",")]:
        threads = max(1, cores // tp)
        if tp == 1:
            configs.append((f"TP 1 x {threads} thr", 1, threads, "replicated"))
        else:
            for lm in ("replicated", "vocab-parallel"):
                configs.append((f"TP {tp} x {threads} thr, LM head {lm}", tp, threads, lm))
    rows = []
    for label, np, threads, lm in configs:
        runs = [run(args.adakv, np, threads, prompt, args, lm) for _ in range(args.repeats)]
        med = lambda f: statistics.median(f(r) for r in runs)
        total = lambda r: r["timing"]["prefill_s"] + r["timing"]["decode_s"]
        rows.append({
            "label": label,
            "prompt": runs[0]["prompt_tokens"],
            "prefill": med(lambda r: r["timing"]["prefill_tokens_per_s"]),
            "decode": med(lambda r: r["timing"]["decode_tokens_per_s"]),
            "allreduce": med(lambda r: r["tp"]["all_reduce_s"] / total(r)),
            "exchange": med(lambda r: r["tp"]["budget_exchange_s"] / total(r)),
            "kept": runs[0]["kv"]["kept_bytes"],
        })
        print(f"[bench-tp] {label} done", file=sys.stderr)
    os.unlink(prompt)
    base = rows[0]
    print(f"tensor-parallel bench: {base['prompt']}-token prompt, {args.decode_tokens} decode "
          f"tokens, policy {args.policy} {args.budget}, {cores} cores, median of {args.repeats}")
    print(f"{'run':40} | {'prefill/s':>9} {'vs TP1':>6} | {'decode/s':>8} {'vs TP1':>6} | "
          f"{'all_reduce':>10} {'budget xchg':>11} | {'KV MiB':>7}")
    for r in rows:
        print(f"{r['label']:40} | {r['prefill']:9.1f} {r['prefill'] / base['prefill']:6.2f} | "
              f"{r['decode']:8.1f} {r['decode'] / base['decode']:6.2f} | "
              f"{100 * r['allreduce']:9.2f}% {100 * r['exchange']:10.3f}% | "
              f"{r['kept'] / 2**20:7.2f}")
    print("all_reduce, budget xchg: share of rank 0's prefill + decode time in the layers' "
          "all_reduce and in the Ada-KV gain-matrix exchange")


if __name__ == "__main__":
    main()
