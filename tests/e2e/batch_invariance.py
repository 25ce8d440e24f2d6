#!/usr/bin/env python3
"""Batch invariance of `adakv batch`: a request's tokens must not depend on what it is batched
with or how its prompt is chunked.

16 requests with prompts of 5 to 3,000 tokens (slices of /usr/share/common-licenses/GPL-3 at
different offsets, as text: the CLI tokenizes them) run greedy, 24 new tokens each (EOS
ignored), with the default compression flags: all 16 in one `adakv batch`, then each alone in
its own `adakv batch` run with the same flags. Every request's tokens must be the same, token
for token. Prints per request its prompt tokens, same/different and the first differing index.

    tests/e2e/batch_invariance.py --adakv build/adakv --tp 1
    tests/e2e/batch_invariance.py --adakv build/adakv --tp 3
    tests/e2e/batch_invariance.py --adakv build/adakv --tp 1 --chunked   # + a small-chunk batch

--tp 3 runs every command as `mpirun ... -np 3 ADAKV ...`. --chunked also runs the batch with a
smaller --max-num-batched-tokens and --prefill-chunk and compares it with the alone runs (under
the default flags): informational, it does not change the exit code, which says only whether
the default-settings batch matched (0: every request equal, 1: some differ, 2: a run failed).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "mpi_yield_when_idle", "1",
          "-x", "OMPI_MCA_btl_vader_single_copy_mechanism=none"]

TEXT_FILE = "/usr/share/common-licenses/GPL-3"
# (offset, characters) of each prompt in GPL-3, and the prompt tokens the default model's
# tokenizer gives them (measured; a mismatch is reported, not fatal). The lengths span 5..3000:
# very short ones, ones just below and past the prefill chunk (512; longer compressed prompts are
# prefilled layer by layer) and the row slices (768 rows at TP 1, 1,984 at TP 3).
PROMPTS = [
    (0, 30, 5), (7919, 35, 8), (15838, 63, 13), (3757, 134, 32), (11676, 163, 33),
    (19595, 303, 64), (7514, 975, 200), (15433, 2362, 479), (3352, 2284, 512),
    (11271, 2469, 513), (19190, 2592, 540), (7109, 3829, 799), (15028, 6333, 1301),
    (2947, 9346, 2000), (10866, 12087, 2500), (18785, 13471, 3000),
]


def requests(max_tokens, max_prompt):
    text = open(TEXT_FILE, encoding="utf-8").read()
    while len(text) < 80000:
        text += text
    out = []
    for off, chars, expected in PROMPTS:
        if expected > max_prompt:  # scaled down, keeping the span's shape
            chars = max(1, chars * max_prompt // 3000)
            expected = max(1, expected * max_prompt // 3000)
        out.append(({"prompt": text[off:off + chars], "max_tokens": max_tokens,
                     "temperature": 0, "ignore_eos": True}, expected))
    return out


def run_batch(args, reqs, flags, tag, workdir):
    """One `adakv batch` over reqs; returns (results by position, seconds, stderr summary)."""
    path = os.path.join(workdir, tag + ".jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for r in reqs:
            f.write(json.dumps(r) + "\n")
    cmd = [args.adakv, "batch", path, "--threads", str(args.threads)] + flags + args.extra
    if args.model:
        cmd += ["--model", args.model]
    if args.tp > 1:
        cmd = MPIRUN + args.mpi_arg + ["-np", str(args.tp)] + cmd
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        sys.stderr.write(f"{tag}: exit {p.returncode}\n$ {' '.join(cmd)}\n{p.stderr[-3000:]}\n")
        sys.exit(2)
    res = sorted((json.loads(line) for line in p.stdout.splitlines() if line.strip()),
                 key=lambda r: r["index"])
    for r in res:
        if "error" in r:
            sys.stderr.write(f"{tag}: request {r['index']} failed: {r['error']}\n")
            sys.exit(2)
    if len(res) != len(reqs):
        sys.stderr.write(f"{tag}: {len(res)} results for {len(reqs)} requests\n")
        sys.exit(2)
    m = re.search(r"(\d+) preemptions?", p.stderr)
    return res, dt, {"preemptions": int(m.group(1)) if m else None}


def compare(name, alone, batch):
    """Prints one line per request; returns the indices that differ."""
    print(f"\n{name}")
    print(f"{'req':>3} {'prompt':>6}  {'result':<9} {'first diff':>10}  tokens (batch vs alone)")
    bad = []
    for i, (a, b) in enumerate(zip(alone, batch)):
        ta, tb = a["tokens"], b["tokens"]
        pa, pb = a["prompt_tokens"], b["prompt_tokens"]
        if pa != pb:
            raise SystemExit(f"request {i}: prompt tokens {pb} in the batch, {pa} alone")
        first = next((k for k in range(min(len(ta), len(tb))) if ta[k] != tb[k]),
                     None if len(ta) == len(tb) else min(len(ta), len(tb)))
        if first is None:
            print(f"{i:>3} {pa:>6}  {'same':<9} {'-':>10}  {len(ta)} tokens")
        else:
            bad.append(i)
            got = tb[first] if first < len(tb) else "end"
            want = ta[first] if first < len(ta) else "end"
            print(f"{i:>3} {pa:>6}  {'DIFFERENT':<9} {first:>10}  {got} vs {want}")
            print(f"{'':>12}batch: {json.dumps(b['text'])}\n{'':>12}alone: {json.dumps(a['text'])}")
    print(f"{len(alone) - len(bad)} of {len(alone)} requests equal"
          + (f"; different: {bad}" if bad else ""))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adakv", required=True, help="the adakv binary")
    ap.add_argument("--tp", type=int, choices=[1, 3], default=1, help="tensor-parallel ranks")
    ap.add_argument("--model", default=None, help="--model for adakv (default: its own)")
    ap.add_argument("--threads", type=int, default=None,
                    help="--threads per rank (default: 2 at TP 1, 1 at TP 3)")
    ap.add_argument("--max-tokens", type=int, default=24, help="new tokens per request")
    ap.add_argument("--max-prompt", type=int, default=3000,
                    help="longest prompt in tokens; below 3000 the long prompts are scaled down")
    ap.add_argument("--chunked", action="store_true",
                    help="also run the batch with --max-num-batched-tokens/--prefill-chunk below")
    ap.add_argument("--chunked-batched-tokens", type=int, default=256)
    ap.add_argument("--chunked-prefill-chunk", type=int, default=64)
    ap.add_argument("--extra", default="",
                    help="more adakv flags for every run, one string (e.g. '--decode-dots float')")
    ap.add_argument("--mpi-arg", action="append", default=[],
                    help="an mpirun argument for --tp 3 (repeat it; e.g. --mpi-arg=--mca ...)")
    ap.add_argument("--keep", default=None, help="keep the request files in this folder")
    args = ap.parse_args()
    args.extra = args.extra.split()
    args.mpi_arg = [a for m in args.mpi_arg for a in m.split()]
    if args.threads is None:
        args.threads = 2 if args.tp == 1 else 1
    if not os.access(args.adakv, os.X_OK):
        raise SystemExit(f"{args.adakv}: not an executable")

    workdir = args.keep or tempfile.mkdtemp(prefix="adakv-batch-inv-")
    os.makedirs(workdir, exist_ok=True)
    pairs = requests(args.max_tokens, args.max_prompt)
    reqs = [r for r, _ in pairs]
    t_start = time.monotonic()

    print(f"adakv {args.adakv}, TP {args.tp}, {args.threads} thread(s) per rank, "
          f"{len(reqs)} requests, {args.max_tokens} new tokens each, greedy"
          + (f", extra flags {' '.join(args.extra)}" if args.extra else ""), flush=True)
    batch, t_batch, info = run_batch(args, reqs, [], "batch", workdir)
    print(f"batch of {len(reqs)}: {t_batch:.1f} s, preemptions {info['preemptions']}", flush=True)
    alone, t_alone = [], 0.0
    for i, r in enumerate(reqs):
        res, dt, _ = run_batch(args, [r], [], f"alone{i}", workdir)
        alone.append(res[0])
        t_alone += dt
    print(f"{len(reqs)} alone runs: {t_alone:.1f} s", flush=True)
    for i, (_, expected) in enumerate(pairs):
        if alone[i]["prompt_tokens"] != expected:
            print(f"note: request {i} has {alone[i]['prompt_tokens']} prompt tokens "
                  f"(expected {expected}: another tokenizer or text?)")

    bad = compare(f"default settings, TP {args.tp}: batch of {len(reqs)} vs each alone",
                  alone, batch)

    if args.chunked:
        flags = ["--max-num-batched-tokens", str(args.chunked_batched_tokens),
                 "--prefill-chunk", str(args.chunked_prefill_chunk)]
        cb, t_cb, cinfo = run_batch(args, reqs, flags, "batch_chunked", workdir)
        print(f"\nbatch with {' '.join(flags)}: {t_cb:.1f} s, "
              f"preemptions {cinfo['preemptions']}")
        compare(f"informational, TP {args.tp}: batch with {' '.join(flags)} vs each alone "
                f"(default flags)", alone, cb)

    print(f"\ntotal {time.monotonic() - t_start:.1f} s")
    print("PASS" if not bad else f"FAIL: {len(bad)} of {len(reqs)} requests differ")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
