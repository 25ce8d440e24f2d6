#!/usr/bin/env python3
"""Peak resident memory per rank against the budget `shard of the GGUF + KV pool + 64 MiB`.

Runs `adakv batch` on one ~2,000-token request (by default the full cache, prefilled in chunks
of 512; `--policy default` takes the model's preset, whose long prompts are prefilled layer by
layer) with a KV pool of --pool-mb per rank, as 1 and as 3 tensor-parallel ranks (--tp) under
mpirun, each rank under /usr/bin/time, and prints per rank: its
peak RSS, its share of the model file (file size / tp), the pool, and the margin left of the
64 MiB allowance.

    python3 tests/tools/rss_check.py --adakv build/adakv [--model PATH] [--tokens 2000]
        [--pool-mb 64] [--policy full|default|...] [--tp 1,3]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

MIB = 1 << 20


def run(adakv, model, tp, prompt_file, max_tokens, pool_mb):
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = os.path.join(tmp, "rank.sh")
        with open(wrapper, "w") as f:
            # Each rank writes its own peak RSS (KiB) next to its rank number.
            f.write('#!/bin/sh\nexec /usr/bin/time -f "%M" -o "{}/rss.$OMPI_COMM_WORLD_RANK" "$@"\n'
                    .format(tmp))
        os.chmod(wrapper, 0o755)
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
               str(tp), wrapper, adakv, "batch", prompt_file, "--model", model, "-q",
               "--kv-pool-mb", str(pool_mb)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            sys.exit(f"adakv failed at tp {tp}:\n{out.stderr[-2000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if "error" in result:
            sys.exit(f"adakv refused the request at tp {tp}: {result['error']['message']}")
        rss = []
        for r in range(tp):
            with open(os.path.join(tmp, f"rss.{r}")) as f:
                rss.append(int(f.read().strip().splitlines()[-1]) * 1024)
        return result, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--adakv", required=True)
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/adakv/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokens", type=int, default=2000, help="approximate prompt length")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--pool-mb", type=float, default=64, help="KV pool per rank")
    ap.add_argument("--tp", default="1,3", help="tensor-parallel sizes to run, comma-separated")
    ap.add_argument("--policy", default="full",
                    help="the request's kv_policy; 'default' sends none (the model's preset)")
    args = ap.parse_args()
    words = open("/usr/share/common-licenses/GPL-3").read().split()
    text = " ".join(words[: int(args.tokens * 0.75)])
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        request = {"prompt": text, "max_tokens": args.max_tokens}
        if args.policy != "default":
            request["kv_policy"] = args.policy
        f.write(json.dumps(request))
        f.write("\n")
        prompt_file = f.name
    file_bytes = os.path.getsize(args.model)
    ok = True
    print(f"model file {file_bytes / MIB:.1f} MiB")
    print(f"{'tp':>3} {'rank':>4} | {'peak RSS':>9} {'shard':>8} {'KV':>8} {'budget':>8} | "
          f"{'margin of 64 MiB':>16}")
    for tp in (int(t) for t in args.tp.split(",")):
        result, rss = run(args.adakv, args.model, tp, prompt_file, args.max_tokens, args.pool_mb)
        kv = args.pool_mb * MIB
        shard = file_bytes / tp
        for r, m in enumerate(rss):
            budget = shard + kv + 64 * MIB
            ok &= m <= budget
            print(f"{tp:>3} {r:>4} | {m / MIB:>8.1f}M {shard / MIB:>7.1f}M {kv / MIB:>7.1f}M "
                  f"{budget / MIB:>7.1f}M | {(budget - m) / MIB:>15.1f}M")
    print(f"prompt {result['prompt_tokens']} tokens, policy {args.policy}; "
          "budget = file / tp + KV pool + 64 MiB")
    os.unlink(prompt_file)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
