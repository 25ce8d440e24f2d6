#!/usr/bin/env python3
"""Load acceptance of `adakv serve`: many concurrent streaming clients through a KV pool too small
for all of them.

Phase 1: N clients (threads, raw HTTP/1.1) each stream one /v1/completions request at the same
time, prompts of 500-4000 tokens (GPL-3 prose, each its own length and offset), ignore_eos and
max_tokens, against a server whose KV pool holds only --fit average prompts with the full cache.
Asserts: every request answers 200 and streams to `data: [DONE]` with one finish_reason
"length", usage.completion_tokens == max_tokens and usage.prompt_tokens as the tokenizer counts;
one response per request, each with its own id (none lost, none duplicated); the server stays
up (/health 200); adakv:num_preemptions_total grew (the pool really was too small); once idle,
adakv:kv_cache_free_blocks == adakv:kv_cache_total_blocks (free counts the cached blocks no request
uses: the pool takes them back when it needs them). With --check-alone K, K of the requests
are then sent again one at a time (greedy) and must give the same text as under pressure.

Phase 2 (--disconnect-share S > 0): N clients again; a share S of them close their connection
midway through their stream (after half their tokens). The others must complete as in phase 1;
once idle the pool's free blocks must return to its total.

Not part of CI (the full run takes minutes on a few cores); --small is the short version
(12 clients, prompts of 80-240 tokens, max_tokens 96, a pool for 3; ~1-2 minutes on 2 cores).

  python3 tests/tools/load_check.py [--adakv build/adakv] [--clients 64] [--policy full]
      [--max-tokens 128] [--fit 8 | --pool-mb MB] [--disconnect-share 0.25] [--small] [--tp 1]
      [--url http://127.0.0.1:8000 (a running server: no start/stop, no pool sizing)]

Exit status 0 when every assertion holds; the summary says which did not.
"""
import argparse
import http.client
import json
import math
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def words():
    try:
        with open("/usr/share/common-licenses/GPL-3") as f:
            return f.read().split()
    except OSError:
        r = random.Random(7)
        return [f"w{r.randrange(3000)}" for _ in range(6000)]


WORDS = words()


def text_of(n_words, offset):
    return " ".join(WORDS[(offset + k) % len(WORDS)] for k in range(n_words))


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def metric(ms, name, default=None):
    if name in ms:
        return ms[name]
    series = [v for k, v in ms.items() if k.startswith(name + "{")]
    if series:
        return sum(series)
    if default is not None:
        return default
    raise KeyError(f"/metrics has no {name}")


class Server:
    """A running `adakv serve` (started here, or --url)."""

    def __init__(self, host, port, proc=None, cmd=None, err_path=None, env=None):
        self.host, self.port, self.proc, self.cmd, self.err_path = host, port, proc, cmd, err_path
        self.env = env

    @classmethod
    def start(cls, adakv, tp, flags, timeout_s=180):
        env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
        # idle CPU threads sleep rather than spin (the clients share the cores); override with
        # OMP_WAIT_POLICY=active in the environment
        env.setdefault("OMP_WAIT_POLICY", "passive")
        cmd = (MPIRUN + ["-np", str(tp)] if tp > 1 else []) + [adakv, "serve", "--port", "0"] + \
            (["--threads", "1"] if tp > 1 and "--threads" not in flags else []) + flags
        err = tempfile.NamedTemporaryFile("wb", prefix="adakv-load-", suffix=".err", delete=False)
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, env=env, start_new_session=True)
        s = cls(None, None, proc, cmd, err.name, env)
        deadline = time.monotonic() + timeout_s
        pat = re.compile(r"\[adakv\] serving (\S+) on http://([^\s:]+):(\d+)")
        while time.monotonic() < deadline:
            m = pat.search(s.stderr())
            if m:
                s.host, s.port = m.group(2), int(m.group(3))
                break
            if proc.poll() is not None:
                sys.exit(f"adakv serve exited with {proc.returncode}:\n{shlex.join(cmd)}\n"
                         f"{s.stderr()}")
            time.sleep(0.1)
        else:
            s.kill()
            sys.exit(f"adakv serve not ready within {timeout_s}s:\n{s.stderr()}")
        while time.monotonic() < deadline:
            try:
                if s.get("/health")[0] == 200:
                    return s
            except OSError:
                pass
            time.sleep(0.1)
        s.kill()
        sys.exit(f"/health not 200 within {timeout_s}s:\n{s.stderr()}")

    def stderr(self):
        if not self.err_path:
            return ""
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def alive(self):
        return self.proc is None or self.proc.poll() is None

    def get(self, path, timeout=30):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            c.close()

    def metrics(self):
        status, text = self.get("/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics -> {status}")
        return parse_metrics(text)

    def health(self):
        try:
            return self.get("/health", timeout=10)[0]
        except OSError as e:
            return f"unreachable ({e})"

    def stop(self, tp, timeout_s=120):
        if self.proc is None:
            return 0
        sig = signal.SIGUSR1 if tp > 1 else signal.SIGTERM
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                return f"hung after {sig.name} (killed)"
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


class Result:
    def __init__(self, index):
        self.index = index
        self.status = None
        self.error = None
        self.ids = set()
        self.text = ""
        self.text_chunks = 0
        self.finish = []
        self.usage = None
        self.usage_chunks = 0
        self.done = 0
        self.after_done = 0
        self.kv = None
        self.disconnected = False
        self.t_start = self.t_first = self.t_end = None


def stream_one(server, body, result, disconnect_after, timeout_s):
    """POSTs one streaming request and reads its events (raw HTTP: the socket is ours to cut)."""
    result.t_start = time.monotonic()
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout_s)
    try:
        conn.connect()
        sock = conn.sock
        data = json.dumps(body)
        conn.request("POST", "/v1/completions", body=data,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        result.status = resp.status
        if resp.status != 200:
            result.error = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                result.done += 1
                continue
            if result.done:
                result.after_done += 1
            ev = json.loads(payload)
            if "error" in ev:
                result.error = f"error event: {ev['error']}"
                continue
            result.ids.add(ev.get("id"))
            if ev.get("usage"):
                result.usage = ev["usage"]
                result.usage_chunks += 1
            for ch in ev.get("choices") or []:
                if ch.get("text"):
                    if result.t_first is None:
                        result.t_first = time.monotonic()
                    result.text += ch["text"]
                    result.text_chunks += 1
                if ch.get("finish_reason"):
                    result.finish.append(ch["finish_reason"])
                    result.kv = ev.get("kv")
            if disconnect_after is not None and result.text_chunks >= disconnect_after:
                result.disconnected = True
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
                resp.close()
                return
    except Exception as e:  # noqa: BLE001 - a client's failure is a result, not a crash
        result.error = f"{type(e).__name__}: {e}"
    finally:
        result.t_end = time.monotonic()
        conn.close()


def complete_alone(server, body, timeout_s):
    body = dict(body, stream=False)
    body.pop("stream_options", None)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout_s)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
        return json.loads(data)
    finally:
        conn.close()


def wait_idle(server, timeout_s):
    deadline = time.monotonic() + timeout_s
    while True:
        ms = server.metrics()
        running = metric(ms, "adakv:num_requests_running")
        waiting = metric(ms, "adakv:num_requests_waiting")
        free = metric(ms, "adakv:kv_cache_free_blocks")
        total = metric(ms, "adakv:kv_cache_total_blocks")
        if (running == 0 and waiting == 0 and free == total) or time.monotonic() > deadline:
            return ms, running, waiting, free, total
        time.sleep(0.25)


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run_phase(name, server, requests, a, disconnect, failures):
    """Runs one phase; appends what failed to `failures`; returns the summary line's numbers."""
    print(f"\n== {name}: {len(requests)} concurrent streaming clients"
          + (f", {len(disconnect)} disconnect midway" if disconnect else ""), flush=True)
    ms0 = server.metrics()
    free0, total0 = metric(ms0, "adakv:kv_cache_free_blocks"), metric(ms0, "adakv:kv_cache_total_blocks")
    results = [Result(i) for i in range(len(requests))]
    threads = []
    start = threading.Barrier(len(requests) + 1)

    def client(i):
        start.wait()
        cut = max(1, a.max_tokens // 2) if i in disconnect else None
        stream_one(server, requests[i]["body"], results[i], cut, a.request_timeout)

    for i in range(len(requests)):
        t = threading.Thread(target=client, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    t0 = time.monotonic()
    start.wait()
    peak_running = peak_waiting = 0
    min_free = free0
    while any(t.is_alive() for t in threads):
        try:
            ms = server.metrics()
            peak_running = max(peak_running, metric(ms, "adakv:num_requests_running"))
            peak_waiting = max(peak_waiting, metric(ms, "adakv:num_requests_waiting"))
            min_free = min(min_free, metric(ms, "adakv:kv_cache_free_blocks"))
        except Exception:  # noqa: BLE001
            pass
        if not server.alive():
            failures.append(f"{name}: the server process exited ({server.proc.returncode}) "
                            "while clients were running")
            break
        done = sum(not t.is_alive() for t in threads)
        print(f"\r  {time.monotonic() - t0:6.1f}s  finished {done}/{len(threads)}", end="",
              flush=True)
        time.sleep(1.0)
    for t in threads:
        t.join(a.request_timeout)
    wall = time.monotonic() - t0
    print()

    health = server.health()
    if health != 200:
        failures.append(f"{name}: /health -> {health} after the clients finished")
    ms_idle, running, waiting, free1, total1 = wait_idle(server, a.idle_timeout)

    # --- per-request checks
    all_ids = {}
    completed = 0
    gen_tokens = prompt_tokens = 0
    for r, req in zip(results, requests):
        tag = f"{name}: request {r.index} (prompt ~{req['approx_tokens']} tokens)"
        if r.error and not r.disconnected:
            failures.append(f"{tag}: {r.error}")
            continue
        for i in r.ids:
            all_ids.setdefault(i, []).append(r.index)
        if len(r.ids) != 1:
            failures.append(f"{tag}: its chunks carry {len(r.ids)} ids: {sorted(map(str, r.ids))[:4]}")
        if r.disconnected:
            continue
        problems = []
        if r.done != 1:
            problems.append(f"{r.done} [DONE] events")
        if r.after_done:
            problems.append(f"{r.after_done} events after [DONE]")
        if r.finish != ["length"]:
            problems.append(f"finish_reasons {r.finish} (want ['length'])")
        if r.usage_chunks != 1 or r.usage is None:
            problems.append(f"{r.usage_chunks} usage chunks")
        else:
            u = r.usage
            if u.get("completion_tokens") != a.max_tokens:
                problems.append(f"usage.completion_tokens {u.get('completion_tokens')} "
                                f"(want {a.max_tokens})")
            if u.get("total_tokens") != u.get("prompt_tokens", 0) + u.get("completion_tokens", 0):
                problems.append(f"usage.total_tokens {u.get('total_tokens')} != prompt + completion")
            if req.get("prompt_tokens") is not None and u.get("prompt_tokens") != req["prompt_tokens"]:
                problems.append(f"usage.prompt_tokens {u.get('prompt_tokens')} "
                                f"(phase 1 counted {req['prompt_tokens']})")
            req["prompt_tokens"] = u.get("prompt_tokens")
            gen_tokens += u.get("completion_tokens") or 0
            prompt_tokens += u.get("prompt_tokens") or 0
        if not (1 <= r.text_chunks <= a.max_tokens):
            problems.append(f"{r.text_chunks} text chunks for {a.max_tokens} tokens")
        if problems:
            failures.append(f"{tag}: " + "; ".join(problems))
        else:
            completed += 1
        req["text"] = r.text
    dup = {i: ix for i, ix in all_ids.items() if len(ix) > 1}
    if dup:
        failures.append(f"{name}: response ids shared by several requests: {list(dup.items())[:5]}")
    expected = len(requests) - len(disconnect)
    if completed != expected:
        failures.append(f"{name}: {completed} of {expected} requests completed correctly")

    pre = metric(ms_idle, "adakv:num_preemptions_total") - metric(ms0, "adakv:num_preemptions_total")
    aborts = (metric(ms_idle, 'adakv:request_success_total{finished_reason="abort"}', 0)
              - metric(ms0, 'adakv:request_success_total{finished_reason="abort"}', 0))
    lengths = (metric(ms_idle, 'adakv:request_success_total{finished_reason="length"}', 0)
               - metric(ms0, 'adakv:request_success_total{finished_reason="length"}', 0))
    gen_metric = (metric(ms_idle, "adakv:generation_tokens_total")
                  - metric(ms0, "adakv:generation_tokens_total"))
    if (running, waiting) != (0, 0) or free1 != total1:
        failures.append(f"{name}: {a.idle_timeout:.0f}s after the last client: {running} running, "
                        f"{waiting} waiting, {free1:.0f} of {total1:.0f} blocks free")
    ttft = [r.t_first - r.t_start for r in results if r.t_first]
    e2e = [r.t_end - r.t_start for r in results if r.t_end and not r.disconnected and not r.error]
    print(f"  requests {len(requests)}: completed {completed}, disconnected "
          f"{sum(r.disconnected for r in results)}, failed {len(requests) - completed - sum(r.disconnected for r in results)}")
    print(f"  tokens: prompt {prompt_tokens}, generated {gen_tokens} in the completed streams "
          f"(adakv:generation_tokens_total +{gen_metric:.0f}, incl. the disconnected)")
    print(f"  wall {wall:.1f}s; generated {gen_metric / wall:.1f} tok/s; "
          f"TTFT p50 {pct(ttft, 50):.1f}s max {pct(ttft, 100):.1f}s; e2e p50 {pct(e2e, 50):.1f}s "
          f"max {pct(e2e, 100):.1f}s")
    print(f"  peak running {peak_running:.0f}, peak waiting {peak_waiting:.0f}; "
          f"preemptions +{pre:.0f}; finished length +{lengths:.0f}, abort +{aborts:.0f}")
    print(f"  free blocks: before {free0:.0f} of {total0:.0f}, lowest seen {min_free:.0f}, "
          f"after (idle) {free1:.0f} of {total1:.0f} "
          f"({metric(ms_idle, 'adakv:kv_cache_cached_free_blocks', 0):.0f} of them cached)")
    hits = (metric(ms_idle, "adakv:prefix_cache_hits_total", 0)
            - metric(ms0, "adakv:prefix_cache_hits_total", 0))
    queries = (metric(ms_idle, "adakv:prefix_cache_queries_total", 0)
               - metric(ms0, "adakv:prefix_cache_queries_total", 0))
    print(f"  prefix cache: {hits:.0f} of {queries:.0f} looked-up tokens found cached")
    return {"pre": pre, "wall": wall, "results": results}


# float32 KV: the greedy texts alone and under pressure must match, and a preempted request
# recomputes its keys in another summation order, which bf16 rounding can turn into a flipped
# near-tied token.
KV_DTYPE = "f32"


def probe(a, prompt):
    """`adakv generate` on a ~1000-token prompt: tokens per word and full-cache bytes per token."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
        path = f.name
    cmd = [a.adakv, "generate", "--prompt-file", path, "--max-tokens", "1", "--temperature", "0",
           "--policy", "full", "--json", "--threads", "1", "--kv-dtype", KV_DTYPE]
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive")))
    os.unlink(path)
    if p.returncode != 0:
        sys.exit(f"{shlex.join(cmd)} failed:\n{p.stderr}")
    d = json.loads(p.stdout)
    return d["prompt_tokens"], d["kv"]["full_bytes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--adakv", default=os.path.join(REPO, "build", "adakv"))
    ap.add_argument("--url", help="use this running server (no start/stop, no pool sizing)")
    ap.add_argument("--tp", type=int, default=1, help="ranks (mpirun -np) of the started server")
    ap.add_argument("--small", action="store_true",
                    help="12 clients, prompts 80-240 tokens, max_tokens 96, a pool for 3")
    ap.add_argument("--clients", type=int)
    ap.add_argument("--min-prompt", type=int, help="prompt tokens, shortest (default 500)")
    ap.add_argument("--max-prompt", type=int, help="prompt tokens, longest (default 4000)")
    ap.add_argument("--max-tokens", type=int, help="tokens generated per request (default 128; --small 96)")
    ap.add_argument("--policy", default="full", help="kv_policy of every request (default full)")
    ap.add_argument("--budget", help="kv_budget of every request (default: the server's)")
    ap.add_argument("--fit", type=float,
                    help="size the pool to hold this many average prompts with the full cache "
                         "(default 8; --small 3)")
    ap.add_argument("--pool-mb", type=float, help="--kv-pool-mb of the server (overrides --fit)")
    ap.add_argument("--disconnect-share", type=float, default=0.25,
                    help="phase 2: this share of clients close midway (0: no phase 2)")
    ap.add_argument("--check-alone", type=int,
                    help="resend this many phase-1 requests one at a time; their greedy text "
                         "must match (default 8; --small 3)")
    ap.add_argument("--server-args", default="", help="more flags for `adakv serve`")
    ap.add_argument("--request-timeout", type=float, default=1800)
    ap.add_argument("--idle-timeout", type=float, default=30,
                    help="seconds to wait for the server to be idle with every block free")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-mix", action="store_true",
                    help="a third of the requests ask about one shared document with "
                         "kv_compress_context (kv_policy adakv), a third start with the same "
                         "document under policy full (prefix caching), the rest are plain")
    a = ap.parse_args()
    small = a.small
    # Admission reserves a prompt's blocks and stops at the first waiting prompt that does not
    # fit, so what is left free is less than one prompt; preemption needs the running sequences'
    # growth (max_tokens each) to exceed it. --small keeps prompts short next to max_tokens
    # (3 x 96 generated > the longest prompt of 240): preemption is certain, not luck.
    a.clients = a.clients or (12 if small else 64)
    a.min_prompt = a.min_prompt or (80 if small else 500)
    a.max_prompt = a.max_prompt or (240 if small else 4000)
    a.max_tokens = a.max_tokens or (96 if small else 128)
    a.fit = a.fit or (3 if small else 8)
    if a.check_alone is None:
        a.check_alone = 3 if small else 8
    a.adakv = os.path.abspath(a.adakv)
    t_all = time.monotonic()

    # --- the prompts: evenly spread lengths in a shuffled order, each its own offset in the text
    calib_words = 800
    if a.url:
        tokens_per_word, bytes_per_token = 1.2, None
    else:
        n_tok, full_bytes = probe(a, text_of(calib_words, 0))
        tokens_per_word = n_tok / calib_words
        bytes_per_token = full_bytes / n_tok
    rng = random.Random(a.seed)
    targets = [a.min_prompt + (a.max_prompt - a.min_prompt) * i // max(1, a.clients - 1)
               for i in range(a.clients)]
    rng.shuffle(targets)
    requests = []
    for i, target in enumerate(targets):
        n_words = max(1, int(target / tokens_per_word))
        body = {"prompt": text_of(n_words, rng.randrange(len(WORDS))), "max_tokens": a.max_tokens,
                "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}, "kv_policy": a.policy}
        if a.budget:
            body["kv_budget"] = float(a.budget) if re.fullmatch(r"[0-9.]+", a.budget) else a.budget
        requests.append({"body": body, "approx_tokens": target, "prompt_tokens": None})
    if a.cache_mix:
        # Token-id prompts: the shared document's length in tokens is known exactly.
        doc = [rng.randrange(1000, 30000) for _ in range(a.min_prompt)]
        for i, r in enumerate(requests):
            if i % 3 == 2:
                continue
            tail = [rng.randrange(1000, 30000) for _ in range(20 + 10 * (i % 5))]
            r["body"]["prompt"] = doc + tail
            r["approx_tokens"] = len(doc) + len(tail)
            if i % 3 == 0:
                r["body"].update(kv_policy="adakv", kv_compress_context=True,
                                 kv_context_tokens=len(doc))
            else:
                r["body"]["kv_policy"] = "full"

    # --- the server
    flags = shlex.split(a.server_args)
    if a.url:
        u = urllib.parse.urlparse(a.url)
        server = Server(u.hostname, u.port or 80)
    else:
        avg = sum(targets) / len(targets) + a.max_tokens
        biggest = max(targets) + a.max_tokens
        pool_mb = a.pool_mb or math.ceil(a.fit * avg * bytes_per_token / a.tp / 2 ** 20)
        pool_bytes = pool_mb * 2 ** 20 * a.tp
        print(f"full cache: {bytes_per_token:.0f} bytes per token (all ranks); prompts "
              f"{min(targets)}-{max(targets)} tokens (avg {avg - a.max_tokens:.0f}) + "
              f"{a.max_tokens} generated")
        print(f"pool {pool_mb} MiB per rank x {a.tp}: holds ~{pool_bytes / (avg * bytes_per_token):.1f} "
              f"average requests with the full cache (~{pool_bytes / (biggest * bytes_per_token):.1f} "
              f"of the longest); all {a.clients} would need "
              f"{sum(targets) * bytes_per_token / 2 ** 20 / a.tp:.0f} MiB per rank")
        if pool_bytes < biggest * bytes_per_token:
            sys.exit("the pool cannot hold the longest request alone: raise --fit or --pool-mb")
        flags = ["--kv-pool-mb", str(pool_mb), "--max-num-seqs", str(max(64, a.clients)),
                 "--kv-dtype", KV_DTYPE] + flags
        server = Server.start(a.adakv, a.tp, flags)
        print(f"server up on {server.host}:{server.port}: {shlex.join(server.cmd)}")
    status, models = server.get("/v1/models")
    name = json.loads(models)["data"][0]["id"] if status == 200 else None
    for r in requests:
        if name:
            r["body"]["model"] = name

    failures = []
    try:
        p1 = run_phase("phase 1", server, requests, a, set(), failures)
        if p1["pre"] <= 0:
            failures.append("phase 1: adakv:num_preemptions_total did not grow: the pool was not "
                            "under pressure; raise --max-tokens (or lower --fit / --pool-mb)")
        if a.check_alone and server.alive():
            k = min(a.check_alone, len(requests))
            print(f"\n== greedy text alone vs under pressure: {k} requests, one at a time", flush=True)
            t0 = time.monotonic()
            same = 0
            for req in requests[:k]:
                if "text" not in req:
                    continue
                r = complete_alone(server, req["body"], a.request_timeout)
                alone = r["choices"][0]["text"]
                if alone == req["text"]:
                    same += 1
                else:
                    first = next((i for i, (x, y) in enumerate(zip(alone, req["text"])) if x != y),
                                 min(len(alone), len(req["text"])))
                    failures.append(f"greedy text of a ~{req['approx_tokens']}-token prompt differs "
                                    f"alone from under pressure at char {first}: alone "
                                    f"{alone[first:first + 40]!r}, pressured "
                                    f"{req['text'][first:first + 40]!r}")
            print(f"  same text: {same}/{k} ({time.monotonic() - t0:.1f}s)")
        if a.disconnect_share > 0 and server.alive():
            n_cut = max(1, round(a.clients * a.disconnect_share))
            order = list(range(a.clients))
            random.Random(a.seed + 1).shuffle(order)
            run_phase(f"phase 2 (disconnect share {a.disconnect_share})", server, requests, a,
                      set(order[:n_cut]), failures)
        if server.health() != 200:
            failures.append(f"/health -> {server.health()} at the end")
    finally:
        rc = server.stop(a.tp)
    if rc != 0:
        failures.append(f"the server exited with {rc} after SIGTERM/SIGUSR1 (want 0)")
        tail = "\n".join(server.stderr().splitlines()[-30:])
        print(f"--- server stderr (tail) ---\n{tail}")

    print(f"\n== {'small ' if small else ''}load check, {a.clients} clients, policy {a.policy}: "
          f"{time.monotonic() - t_all:.1f}s in all; server exit {rc}")
    if failures:
        print(f"FAILED ({len(failures)}):")
        for f in failures[:40]:
            print("  - " + f)
        if len(failures) > 40:
            print(f"  ... and {len(failures) - 40} more")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
