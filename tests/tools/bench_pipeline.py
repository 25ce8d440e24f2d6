#!/usr/bin/env python3
"""Pipeline efficiency on this machine, side by side in one run.

`adakv bench batch --batching-only` on one rank with T threads, then as PP 2 (two mpirun ranks
of T/2 threads each: the same cores), alternating, --repeats times. Prints each run, the
medians, PP 2 over one rank for batched decode and for the prefill of one long prompt in
chunks, and each stage's idle share (the bubble: the first stage waiting for the last one's
results, the last waiting for its input).

  python3 tests/tools/bench_pipeline.py --adakv build/adakv --threads 2 --repeats 5
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def run(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    text = out.stdout
    decode = re.search(r"(\d+) sequences:\s+([\d.]+) tok/s aggregate", text)
    prefill = re.search(r"prefill of one .*?:\s+([\d.]+) tok/s", text)
    bubble = re.search(r"first stage idle ([\d.]+)%, last stage idle ([\d.]+)% of the decode",
                       text)
    prefill_bubble = re.search(
        r"prefill of one .*first stage idle ([\d.]+)%, last stage idle ([\d.]+)%", text)
    if not decode or not prefill:
        sys.exit(f"unexpected output of {' '.join(cmd)}:\n{text}")
    return {
        "decode": float(decode.group(2)),
        "prefill": float(prefill.group(1)),
        "bubble": (float(bubble.group(1)), float(bubble.group(2))) if bubble else None,
        "prefill_bubble": (float(prefill_bubble.group(1)), float(prefill_bubble.group(2)))
        if prefill_bubble else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adakv", default="build/adakv")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--threads", type=int, default=2, help="total threads of each side")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=2048)
    ap.add_argument("--prefill-chunk", type=int, default=256)
    ap.add_argument("extra", nargs="*", help="more `adakv bench batch` flags")
    a = ap.parse_args()
    bench = [
        "bench", "batch", "--batching-only", "--repeats", "1",
        "--concurrency", str(a.concurrency), "--concurrency-prompt", "256",
        "--concurrency-tokens", "64", "--prompt-tokens", str(a.prompt_tokens),
        "--prefill-chunk", str(a.prefill_chunk), *a.extra,
    ]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    one_env = dict(env, OMP_NUM_THREADS=str(a.threads))
    pp_env = dict(env, OMP_NUM_THREADS=str(max(a.threads // 2, 1)))
    one_cmd = [a.adakv, *bench]
    pp_cmd = [a.mpirun, "-np", "2", "--bind-to", "none", a.adakv, *bench, "--pp", "2"]
    ones, pps = [], []
    print(f"{'run':>3} | {'1 rank decode':>13} {'PP 2 decode':>11} {'idle 1st/last':>13} | "
          f"{'1 rank prefill':>14} {'PP 2 prefill':>12} {'idle 1st/last':>13}")
    idle = lambda b: f"{b[0]:5.1f}/{b[1]:5.1f}%"
    for i in range(a.repeats):
        one, pp = run(one_cmd, one_env), run(pp_cmd, pp_env)
        ones.append(one)
        pps.append(pp)
        print(f"{i + 1:>3} | {one['decode']:>13.1f} {pp['decode']:>11.1f} {idle(pp['bubble']):>13} | "
              f"{one['prefill']:>14.1f} {pp['prefill']:>12.1f} {idle(pp['prefill_bubble']):>13}",
              flush=True)
    med = lambda runs, k: statistics.median(r[k] for r in runs)
    med2 = lambda runs, k: tuple(statistics.median(r[k][j] for r in runs) for j in (0, 1))
    d1, dp = med(ones, "decode"), med(pps, "decode")
    p1, pp = med(ones, "prefill"), med(pps, "prefill")
    print(f"median: {a.concurrency}-sequence decode {d1:.1f} vs {dp:.1f} tok/s: PP 2 = "
          f"{dp / d1:.2f}x one rank (stage idle first/last {idle(med2(pps, 'bubble'))})")
    print(f"median: {a.prompt_tokens}-token prefill {p1:.1f} vs {pp:.1f} tok/s: PP 2 = "
          f"{pp / p1:.2f}x one rank (stage idle first/last {idle(med2(pps, 'prefill_bubble'))})")


if __name__ == "__main__":
    main()
