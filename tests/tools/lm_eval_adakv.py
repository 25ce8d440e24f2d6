#!/usr/bin/env python3
"""EleutherAI's lm-evaluation-harness against `adakv serve`, full KV cache vs a compressed one.

For each policy it starts `adakv serve` (TP 1, --port 0), runs lm-eval's `local-completions`
model over the two local tasks of tests/tools/make_lm_eval_tasks.py (a log-likelihood task and a
generate-until task), stops the server and prints one table: task, metric, one column per
policy. Results (lm-eval's JSON and samples, the server's stderr, table.md, summary.json) go to
--out.

  tests/tools/lm_eval_adakv.py --adakv build/adakv --out /tmp/lm-eval-adakv
  tests/tools/lm_eval_adakv.py --adakv build/adakv --out DIR --per-request   # one server
  tests/tools/lm_eval_adakv.py --adakv build/adakv --out DIR --ll-items 20 --gen-items 5 --check

The policy comes from the server's flags (default: a server per policy), or with --per-request
from the request: one server (--policy full --min-keep 0) and lm-eval's --gen_kwargs kv_policy=...,
kv_budget=..., which the completions API reads per request. lm-eval sends gen_kwargs with
generate-until requests only; a log-likelihood request is scored by the prompt's prefill
(echo + logprobs), which attends over the whole prompt before any compression, so its numbers
do not depend on the policy either way.

lm-eval runs from its own venv (--python, default $ADAKV_HOME/venv-lmeval/bin/python, made by
`cluster/setup-node.sh lm-eval`). With --check, a missing venv exits 77 (skipped) and the run
must give a numeric metric for both tasks and, under the first policy, a log-likelihood accuracy
of at least --min-ll-acc.
"""

import argparse
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ADAKV_HOME = os.environ.get("ADAKV_HOME", os.path.expanduser("~/.cache/adakv"))
SKIP = 77  # ctest's SKIP_RETURN_CODE for this test

# name -> server flags (a server per policy) and request fields (--per-request). min-keep 0:
# the server's default floor keeps any prompt of up to 512 tokens whole, which would leave most
# of these prompts uncompressed; 0 is the published Ada-KV behaviour, a true 20% budget.
POLICIES = {
    "full": (["--policy", "full"], {"kv_policy": "full"}),
    "adakv20": (["--policy", "adakv", "--budget", "0.2", "--min-keep", "0"],
                {"kv_policy": "adakv", "kv_budget": 0.2}),
    "snapkv20": (["--policy", "snapkv", "--budget", "0.2", "--min-keep", "0"],
                 {"kv_policy": "snapkv", "kv_budget": 0.2}),
}
TASKS = [("adakv_lastword_ll", "acc"), ("adakv_lastword_ll", "perplexity"),
         ("adakv_lastword_gen", "exact_match")]


def log(msg):
    print(f"[lm-eval] {msg}", file=sys.stderr, flush=True)


class Server:
    """`adakv serve --port 0`; the port is read from its '[adakv] serving NAME on http://...'."""

    def __init__(self, adakv, flags, err_path, threads, timeout_s=300):
        cmd = [adakv, "serve", "--port", "0", *flags]
        if threads:
            cmd += ["--threads", str(threads)]
        self.err_path = err_path
        self.err = open(err_path, "w")
        log("starting " + " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err,
                                     start_new_session=True)
        ready = re.compile(r"\[adakv\] serving (\S+) on http://([^\s:]+):(\d+)")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = ready.search(self.stderr())
            if m:
                self.model, self.host, self.port = m.group(1), m.group(2), int(m.group(3))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        sys.exit(f"adakv serve did not start:\n{self.stderr()}")

    def stderr(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def settings(self):
        m = re.search(r"\[adakv\] compression: (.*)", self.stderr())
        return m.group(1) if m else "?"

    def kept(self):
        """(sum, count) of the server's per-request KV kept share (bytes held after compression
        over the prompt's full size): the proof that a policy compressed, read from /metrics."""
        url = f"http://{self.host}:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as r:
            text = r.read().decode()
        vals = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].startswith("adakv:request_kv_kept_share_"):
                vals[parts[0].rsplit("_", 1)[1]] = float(parts[1])
        return vals.get("sum", 0.0), vals.get("count", 0.0)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()


def run_lm_eval(a, srv, task_dir, out, gen_kwargs):
    model_args = ",".join([
        f"model={srv.model}",
        f"base_url=http://{srv.host}:{srv.port}/v1/completions",
        # The model's own tokenizer.json from a local folder: lm-eval needs token counts to
        # split a log-likelihood prompt into context and continuation, and sends token ids.
        "tokenizer_backend=huggingface",
        f"tokenizer={a.tokenizer}",
        "tokenized_requests=True",
        # lm-eval's batch size stays 1 (one prompt per request, as the server takes); concurrent
        # requests let the server batch them.
        f"num_concurrent={a.concurrent}",
        "max_retries=1",
        "timeout=600",
    ])
    cmd = [a.python, "-m", "lm_eval", "--model", "local-completions", "--model_args", model_args,
           "--tasks", "adakv_lastword_ll,adakv_lastword_gen", "--include_path", task_dir,
           "--output_path", out, "--log_samples"]
    if gen_kwargs:
        cmd += ["--gen_kwargs", ",".join(f"{k}={v}" for k, v in gen_kwargs.items())]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_CACHE=os.path.join(a.out, "hf-datasets"),
               TOKENIZERS_PARALLELISM="false")
    log("running " + " ".join(cmd))
    with open(os.path.join(out, "lm_eval.log"), "w") as f:
        rc = subprocess.call(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        with open(os.path.join(out, "lm_eval.log"), errors="replace") as f:
            tail = f.read()[-4000:]
        sys.exit(f"lm-eval failed ({rc}); the end of {out}/lm_eval.log:\n{tail}")
    found = sorted(glob.glob(os.path.join(out, "**", "results_*.json"), recursive=True))
    if not found:
        sys.exit(f"lm-eval wrote no results_*.json under {out}")
    with open(found[-1]) as f:
        return json.load(f)["results"]


def metric(results, task, name):
    """lm-eval keys a metric as 'NAME,FILTER' ('acc,none', 'exact_match,first_word')."""
    for key, value in results.get(task, {}).items():
        if key.split(",")[0] == name and isinstance(value, (int, float)):
            return float(value)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--adakv", required=True, help="the adakv binary")
    ap.add_argument("--out", required=True, help="results folder (created)")
    ap.add_argument("--python", default=os.path.join(ADAKV_HOME, "venv-lmeval", "bin", "python"),
                    help="a python with lm-eval and transformers (torch not needed)")
    ap.add_argument("--tokenizer", default=os.path.join(ADAKV_HOME, "models", "hf-tokenizers",
                                                        "smollm2"),
                    help="folder with the served model's tokenizer.json")
    ap.add_argument("--policies", default="full,adakv20",
                    help=f"comma-separated, from {','.join(POLICIES)}")
    ap.add_argument("--per-request", action="store_true",
                    help="one server; the policy rides in each generate-until request")
    ap.add_argument("--ll-items", type=int, default=300)
    ap.add_argument("--gen-items", type=int, default=40)
    ap.add_argument("--gen-context-words", type=int, default=300)
    ap.add_argument("--concurrent", type=int, default=4, help="requests in flight")
    ap.add_argument("--threads", type=int, default=0, help="server threads (default: its own)")
    ap.add_argument("--check", action="store_true",
                    help="CI mode: skip (77) without the venv; fail on missing or poor metrics")
    ap.add_argument("--min-ll-acc", type=float, default=0.2)
    a = ap.parse_args()

    if not os.access(a.python, os.X_OK) or subprocess.call(
            [a.python, "-c", "import lm_eval, transformers"], stderr=subprocess.DEVNULL) != 0:
        msg = f"no lm-eval in {a.python} (bash cluster/setup-node.sh lm-eval installs it)"
        if a.check:
            print(f"[lm-eval] SKIP: {msg}", file=sys.stderr)
            sys.exit(SKIP)
        sys.exit(msg)
    if not os.path.isfile(os.path.join(a.tokenizer, "tokenizer.json")):
        msg = f"no tokenizer.json in {a.tokenizer} (bash cluster/setup-node.sh fetches it)"
        if a.check:
            print(f"[lm-eval] SKIP: {msg}", file=sys.stderr)
            sys.exit(SKIP)
        sys.exit(msg)
    policies = a.policies.split(",")
    for p in policies:
        if p not in POLICIES:
            sys.exit(f"unknown policy {p!r}; known: {', '.join(POLICIES)}")

    os.makedirs(a.out, exist_ok=True)
    task_dir = os.path.join(a.out, "tasks")
    subprocess.check_call([sys.executable, os.path.join(HERE, "make_lm_eval_tasks.py"),
                           "--out", task_dir, "--ll-items", str(a.ll_items),
                           "--gen-items", str(a.gen_items),
                           "--gen-context-words", str(a.gen_context_words)])

    results, settings, seconds, kept = {}, {}, {}, {}
    shared = None
    if a.per_request:
        shared = Server(a.adakv, ["--policy", "full", "--min-keep", "0"],
                        os.path.join(a.out, "server.stderr"), a.threads)
    try:
        for p in policies:
            out = os.path.join(a.out, p)
            shutil.rmtree(out, ignore_errors=True)  # an earlier run's results_*.json must not count
            os.makedirs(out)
            t0 = time.monotonic()
            srv = shared or Server(a.adakv, POLICIES[p][0], os.path.join(out, "server.stderr"),
                                   a.threads)
            try:
                s0, n0 = srv.kept()
                results[p] = run_lm_eval(a, srv, task_dir, out,
                                         POLICIES[p][1] if shared else None)
                s1, n1 = srv.kept()
                kept[p] = (s1 - s0) / (n1 - n0) if n1 > n0 else None
                settings[p] = ("per request: " + json.dumps(POLICIES[p][1]) if shared
                               else srv.settings())
            finally:
                if not shared:
                    srv.stop()
            seconds[p] = round(time.monotonic() - t0, 1)
            log(f"{p}: {seconds[p]} s")
    finally:
        if shared:
            shared.stop()

    rows = [(t, m, [metric(results[p], t, m) for p in policies]) for t, m in TASKS]
    items = {"adakv_lastword_ll": a.ll_items, "adakv_lastword_gen": a.gen_items}
    lines = ["| task | items | metric | " + " | ".join(policies) + " |",
             "|---|---|---|" + "---|" * len(policies)]
    for t, m, vals in rows:
        cells = ["-" if v is None else f"{v:.4f}" for v in vals]
        lines.append(f"| {t} | {items[t]} | {m} | " + " | ".join(cells) + " |")
    lines.append("| (server /metrics) | all | mean KV kept share | " +
                 " | ".join("-" if kept[p] is None else f"{kept[p]:.4f}" for p in policies) + " |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"policies": policies, "per_request": a.per_request, "settings": settings,
                   "seconds": seconds, "items": items, "kv_kept_share": kept,
                   "metrics": {f"{t}/{m}": dict(zip(policies, vals)) for t, m, vals in rows}},
                  f, indent=2)
    for p in policies:
        log(f"{p}: {settings[p]}")

    if a.check:
        bad = [f"{t} {m} under {p}" for t, m, vals in rows for p, v in zip(policies, vals)
               if v is None or not math.isfinite(v)]
        if bad:
            sys.exit("no numeric metric for: " + ", ".join(bad))
        acc = rows[0][2][0]
        if acc < a.min_ll_acc:
            sys.exit(f"log-likelihood accuracy {acc:.3f} under {policies[0]} is below "
                     f"{a.min_ll_acc}")
        log("check passed: both tasks ran end to end")


if __name__ == "__main__":
    main()
