#!/usr/bin/env python3
"""The serving path on the guarded backend gives the CPU backend's results.

ADAKV_BACKEND=guarded keeps the backend's memory unreachable to host code outside the backend's
own ops, so any host read or write of a weight, an activation, a KV block or a logit faults at
once (SIGSEGV), as it would on a GPU. Each case below runs the same command on both backends
and compares what it prints, timings left out: generate under every policy (scope layer and
global, look-ahead on), generate --compare (one prefill forked into several policies), batch
with preemptions, eval passkey on a small grid, profile, and generate at TP 3 under mpirun.

Usage: guarded_backend.py --adakv PATH [--only NAME]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

GPL = "/usr/share/common-licenses/GPL-3"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "mpi_yield_when_idle", "1",
          "-x", "OMPI_MCA_btl_vader_single_copy_mechanism=none"]


def strip_timing(value):
    """The output without wall times, rates and paths that differ between runs."""
    if isinstance(value, dict):
        return {
            k: strip_timing(v)
            for k, v in value.items()
            if k not in ("timing", "out", "output") and not k.endswith("_s") and "per_s" not in k
        }
    if isinstance(value, list):
        return [strip_timing(v) for v in value]
    return value


def run(cmd, backend):
    env = dict(os.environ, ADAKV_BACKEND=backend)
    env.setdefault("OMP_NUM_THREADS", "2")
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{backend}: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p.stdout, p.stderr, time.time() - t0


def parse_json_lines(text):
    return [strip_timing(json.loads(line)) for line in text.splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--adakv", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    adakv = args.adakv
    words = open(GPL).read().split()
    tmp = tempfile.mkdtemp(prefix="adakv-guarded-")
    long_prompt = os.path.join(tmp, "long.txt")
    with open(long_prompt, "w") as f:
        f.write(" ".join(words[:1100]) + "\n\nSummarise the text above in one sentence.")
    gen = [adakv, "generate", "--chat", "--prompt-file", long_prompt, "--max-tokens", "12", "--json"]

    cases = []
    for policy in ["full", "streaming", "snapkv", "pyramidkv", "adakv", "ada-pyramid"]:
        cases.append((f"generate.{policy}", gen + ["--policy", policy], "json"))
    cases.append(("generate.adakv.global", gen + ["--policy", "adakv", "--scope", "global"], "json"))
    cases.append(("generate.adakv.lookahead8.e4m3",
                  gen + ["--policy", "adakv", "--lookahead", "8", "--kv-dtype", "e4m3"], "json"))
    cases.append(("generate.compare", gen + ["--policy", "adakv", "--compare", "full,snapkv"], "json"))

    # Eight 360-720-token prompts in a pool that holds about three: admission waits, decode growth
    # preempts (the run's summary says how often), preempted requests recompute.
    reqs = []
    for i in range(8):
        text = " ".join(words[60 * i: 60 * i + 300 + 40 * i])
        reqs.append(json.dumps({"prompt": text, "max_tokens": 48, "temperature": 0,
                                "ignore_eos": True}))
    batch_file = os.path.join(tmp, "requests.jsonl")
    with open(batch_file, "w") as f:
        f.write("\n".join(reqs) + "\n")
    cases.append(("batch.preemption",
                  [adakv, "batch", batch_file, "--policy", "full", "--kv-pool-mb", "30",
                   "--prefill-chunk", "256", "--max-num-batched-tokens", "512"], "jsonl"))

    passkey_out = {b: os.path.join(tmp, f"passkey-{b}") for b in ("cpu", "guarded")}
    cases.append(("eval.passkey", [adakv, "eval", "passkey", "--lengths", "1024", "--depths", "50",
                                   "--trials", "1", "--budgets", "0.2",
                                   "--policies", "full,adakv,snapkv"], ("dir", passkey_out)))
    cases.append(("profile", [adakv, "profile", "--chat", "--prompt-file", long_prompt, "--policy",
                              "adakv", "--budget", "0.2", "--json", "--out", tmp], "json"))
    cases.append(("generate.tp3", MPIRUN + ["-np", "3", "-x", "ADAKV_BACKEND", "-x",
                                            "OMP_NUM_THREADS"] + gen + ["--policy", "adakv"],
                  "json"))

    failures = ran = 0
    for name, cmd, kind in cases:
        if args.only and args.only not in name:
            continue
        results, times = {}, {}
        for backend in ("cpu", "guarded"):
            full = list(cmd)
            if isinstance(kind, tuple) and kind[0] == "dir":
                full += ["--out", kind[1][backend]]
            out, err, times[backend] = run(full, backend)
            if kind == "json":
                results[backend] = strip_timing(json.loads(out))
            elif kind == "jsonl":
                results[backend] = parse_json_lines(out)
                errors = [r for r in results[backend] if "error" in r]
                if errors:
                    raise RuntimeError(f"{name} on {backend}: {errors[0]}")
                preempted = re.search(r"(\d+) preemptions", err)
                if not preempted or int(preempted.group(1)) == 0:
                    raise RuntimeError(f"{name} on {backend}: no preemption happened:\n{err[-500:]}")
            else:
                with open(os.path.join(kind[1][backend], "passkey_results.json")) as f:
                    results[backend] = strip_timing(json.load(f))
        ran += 1
        same = results["cpu"] == results["guarded"]
        failures += not same
        print(f"{name}: {'same' if same else 'DIFFERENT'} (cpu {times['cpu']:.1f} s, "
              f"guarded {times['guarded']:.1f} s)", flush=True)
        if not same:
            print("  cpu:    ", json.dumps(results["cpu"])[:1500])
            print("  guarded:", json.dumps(results["guarded"])[:1500])
    print(f"guarded backend: {ran - failures} of {ran} cases as on the CPU backend")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
