#!/usr/bin/env python3
"""The serving loop under memory pressure, measured with `adakv batch`.

32 requests with prompts of 500-4000 tokens (GPL-3 prose) run through a KV pool too small to hold
them all with the full cache; the same requests then run one at a time with room to spare. Prints
the preemptions, the pool's free blocks at the end, and whether every request got the same tokens
as alone (a difference is reported with its first differing position).

  python3 tests/tools/pressure_check.py [--adakv build/adakv] [--requests 32] [--pool-mb 400]
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile


def words():
    with open("/usr/share/common-licenses/GPL-3") as f:
        return f.read().split()


def run(adakv, path, extra):
    cmd = [adakv, "batch", path] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return [json.loads(l) for l in p.stdout.splitlines()], p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adakv", default="build/adakv")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--pool-mb", type=float, default=400)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--policy", default="full")
    a = ap.parse_args()

    w = words()
    lines = []
    for i in range(a.requests):
        # ~0.75 words per token: 500 to 4000 tokens
        n_words = int((500 + (3500 * i) // max(1, a.requests - 1)) * 0.75)
        text = " ".join(w[(i * 211 + k) % len(w)] for k in range(n_words))
        lines.append({"prompt": text, "max_tokens": a.max_tokens, "ignore_eos": True,
                      "kv_policy": a.policy})
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")
        path = f.name

    pressured, err = run(a.adakv, path, ["--kv-pool-mb", str(a.pool_mb)])
    summary = [l for l in err.splitlines() if l.startswith("[adakv]")]
    print("\n".join(summary))
    alone, _ = run(a.adakv, path, ["-q", "--max-num-seqs", "1", "--kv-pool-mb", "4096"])
    prompts = [r["prompt_tokens"] for r in pressured]
    print(f"{len(pressured)} requests, prompts {min(prompts)}-{max(prompts)} tokens, "
          f"policy {a.policy}, pool {a.pool_mb} MiB")
    same = 0
    for p, s in zip(pressured, alone):
        if p["tokens"] == s["tokens"]:
            same += 1
        else:
            first = next(i for i, (x, y) in enumerate(zip(p["tokens"], s["tokens"])) if x != y)
            print(f"request {p['index']}: differs from token {first} on")
    complete = sum(len(p["tokens"]) == a.max_tokens for p in pressured)
    print(f"complete: {complete}/{len(pressured)}; token for token as alone: {same}/{len(pressured)}")
    m = re.search(r"(\d+) preemptions", err)
    pool = re.search(r"pool free at the end: (\d+) of (\d+) blocks", err)
    print(f"preemptions: {m.group(1) if m else '?'}; "
          f"pool free at the end: {pool.group(1)} of {pool.group(2)}" if pool else "")
    ok = complete == len(pressured) and same == len(pressured) and m and int(m.group(1)) > 0 \
        and pool and pool.group(1) == pool.group(2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
