#!/usr/bin/env python3
"""Serving benchmark: `adakv serve` (full, snapkv, adakv) next to llama.cpp's own llama-server at
the same KV memory, on the same GGUF file, the same threads and the same prompts.

  python3 tests/tools/bench_serve.py [--kv-mb 400] [--prompt-tokens 4000] [--max-tokens 128]
      [--rates 0.1,0.2,0.4,inf] [--requests 16] [--repeats 1] [--threads N]
      [--columns llama,full,snapkv,adakv] [--budget 0.2] [--adakv-kv-dtype bf16] [--json OUT]
  python3 tests/tools/bench_serve.py --report OUT      (the table of an earlier --json OUT)

Columns, run one after the other (never two servers at once), each on a fresh server:
  llama   llama-server -m GGUF -t T -tb T -c CTX --parallel P --metrics --cache-ram 0 -ctk D -ctv D:
          N = the tokens that fit --kv-mb in llama.cpp's KV dtype D (--llama-kv-dtype, f16 by
          default: bytes/token = 2 (K and V) * layers * KV heads * head dim * 2 bytes),
          P = max(1, N // (prompt + max_tokens)) slots, each of N // P tokens rounded down to a
          multiple of 256 (llama.cpp pads a slot's context up to one; P drops while a slot would be
          shorter than prompt + max_tokens), CTX = P * slot. Slots and KV MiB in the table are what
          the server's log says it made. The binary comes from --llama-server, else
          `cluster/setup-node.sh serve-peer`'s directory ($ADAKV_HOME/llama.cpp/build/bin).
  full, snapkv, adakv
          build/adakv serve --port 0 --threads T --kv-pool-mb MB --policy POLICY [--budget B]
          [--kv-dtype D], MB = --kv-mb; the port is read from the line
          `[adakv] serving NAME on http://HOST:PORT` on its stderr. Any other policy of
          `adakv serve` (streaming, pyramidkv, ...) is a column name too.
Layers, KV heads and head dim come from the GGUF header.

Prompts: --requests distinct windows per step of exactly --prompt-tokens token ids out of GPL-3
prose (/usr/share/common-licenses/GPL-3, repeated as needed; every window starts at a different
place, so no server can reuse a prefix), tokenized once by llama-server's /tokenize (the GGUF's
tokenizer) and sent as the same token-id lists to every column. With --text-prompts, or without a
llama-server binary (--columns without llama and none built), the same texts are sent instead, their
word count sized on the first server with usage.prompt_tokens of a probe text (each prompt's count
then varies a little: the table shows the range that usage reports). Every request: POST
/v1/completions, "stream": true, "ignore_eos": true, "max_tokens": --max-tokens, temperature 0,
stream_options.include_usage, so every server generates the same number of tokens (checked with
usage.completion_tokens: "short of max_tokens" counts the requests that got fewer). Before the
steps, one short unmeasured request warms each server up.

Load (open loop): for each rate of --rates (requests/s; "inf" = all at once, a burst that shows
how many sequences the server holds at a time), --requests requests arrive as a Poisson process
(exponential gaps from a fixed seed, so every column sees the same schedule); a step ends when all
its requests are done, then the next rate starts on the same server. --concurrency C1,C2 adds
closed-loop steps instead: C clients, each sending its next request when the last one ends, until
--requests are done.

Per step and column:
  in flight (server)   mean and peak over the step of the running sequences, sampled from
                       GET /metrics every --sample-s (adakv:num_requests_running,
                       llamacpp:requests_processing); waiting likewise (adakv:num_requests_waiting,
                       llamacpp:requests_deferred)
  in flight (client)   time-weighted mean and peak of the requests sent and not yet answered
  output tok/s         completion tokens of the step / (last response end - first request sent)
  TTFT p50/p99         first SSE chunk with text, after the request was sent
  ITL p50/p99          gaps between consecutive SSE chunks with text, all requests pooled
  E2E p50              request sent -> [DONE]
  KV usage peak        adakv:kv_cache_usage_perc (this llama-server exports no KV usage)
  preemptions          adakv:num_preemptions_total over the step (adakv only)
  prompt tokens        min and max of usage.prompt_tokens; a warning on stderr when llama-server
                       took prompt tokens from its cache (its timings.prompt_n)
With --repeats R, the whole run (every column) is repeated R times, columns interleaved, and the
table shows medians. The table: one block per step, rows = metrics, columns = the servers, then
the ratios adakv/full and adakv/llama. The checks the issue asks for are printed last (adakv's
peak running sequences >= 4x full's, its output tok/s above full's, both at the step where each is
largest) along with where adakv stands against llama-server. --json OUT writes every raw number.
Standard library only (plain python3).
"""
import argparse
import http.client
import json
import math
import os
import random
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADAKV_HOME = os.environ.get("ADAKV_HOME", os.path.expanduser("~/.cache/adakv"))
DEFAULT_MODEL = os.path.join(ADAKV_HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
CORPUS = "/usr/share/common-licenses/GPL-3"
KV_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "q8_0": 34 / 32, "q4_0": 18 / 32, "e4m3": 1}


def log(*a):
    print("[bench_serve]", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- GGUF header (shapes only)

def gguf_kv(path):
    """The metadata key/values of a GGUF file (arrays are skipped, their values are None)."""
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
              11: "<q", 12: "<d"}
    out = {}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        _version, _n_tensors, n_kv = struct.unpack("<IQQ", f.read(20))

        def string():
            (n,) = struct.unpack("<Q", f.read(8))
            return f.read(n).decode("utf-8", "replace")

        def value(t):
            if t == 8:
                return string()
            if t == 9:
                (et,), (n,) = struct.unpack("<I", f.read(4)), struct.unpack("<Q", f.read(8))
                if et in scalar:
                    f.seek(n * struct.calcsize(scalar[et]), 1)
                else:
                    for _ in range(n):
                        value(et)
                return None
            fmt = scalar[t]
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        for _ in range(n_kv):
            key = string()
            (t,) = struct.unpack("<I", f.read(4))
            out[key] = value(t)
    return out


def model_shape(path):
    kv = gguf_kv(path)
    arch = kv["general.architecture"]
    layers = kv[f"{arch}.block_count"]
    heads = kv[f"{arch}.attention.head_count"]
    kv_heads = kv.get(f"{arch}.attention.head_count_kv") or heads
    head_dim = kv.get(f"{arch}.attention.key_length") or kv[f"{arch}.embedding_length"] // heads
    return {"arch": arch, "layers": layers, "kv_heads": kv_heads, "head_dim": head_dim}


def kv_bytes_per_token(shape, dtype):
    return 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * KV_BYTES[dtype]


# ---------------------------------------------------------------- servers

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(host, port, path, timeout=10):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def http_post_json(host, port, path, body, timeout=600):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode("utf-8", "replace")
        return r.status, (json.loads(data) if data.strip().startswith(("{", "[")) else data)
    finally:
        c.close()


class Server:
    """One server process; .host/.port once ready; stderr goes to a log file."""

    def __init__(self, name, kind, cmd, log_path, port=None):
        self.name, self.kind, self.cmd, self.log_path = name, kind, cmd, log_path
        self.host, self.port = "127.0.0.1", port
        self.proc = None

    def start(self, timeout=300):
        log(f"{self.name}: {' '.join(self.cmd)}")
        self.logf = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.logf, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.fail(f"exited with {self.proc.returncode} before it was ready")
            if self.port is None:
                with open(self.log_path, errors="replace") as f:
                    m = re.search(r"\[adakv\] serving (\S+) on http://([^:\s]+):(\d+)", f.read())
                if m:
                    self.served_name, self.host, self.port = m.group(1), m.group(2), int(m.group(3))
            if self.port is not None:
                try:
                    if http_get(self.host, self.port, "/health", timeout=5)[0] == 200:
                        return self
                except OSError:
                    pass
            time.sleep(0.2)
        self.fail("not ready in time")

    def fail(self, why):
        self.stop()
        with open(self.log_path, errors="replace") as f:
            tail = f.read()[-3000:]
        sys.exit(f"{self.name}: {why}\n{' '.join(self.cmd)}\n--- {self.log_path} (tail)\n{tail}")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                rc = self.proc.wait(timeout=60)
                if rc != 0:
                    log(f"{self.name}: exited with {rc} on SIGINT (see {self.log_path})")
            except subprocess.TimeoutExpired:
                log(f"{self.name}: still running 60 s after SIGINT, killed")
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.logf.close()

    def raw_metrics(self):
        _, text = http_get(self.host, self.port, "/metrics", timeout=5)
        vals = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                parts = line.rsplit(" ", 1)
                if len(parts) == 2:
                    try:
                        vals[parts[0]] = float(parts[1])
                    except ValueError:
                        pass
        return vals

    def metrics(self):
        """(running, waiting, kv_usage, preemptions_total) from GET /metrics."""
        vals = self.raw_metrics()
        if self.kind == "llama":
            return (vals.get("llamacpp:requests_processing"),
                    vals.get("llamacpp:requests_deferred"),
                    vals.get("llamacpp:kv_cache_usage_ratio"), None)
        return (vals.get("adakv:num_requests_running"), vals.get("adakv:num_requests_waiting"),
                vals.get("adakv:kv_cache_usage_perc"), vals.get("adakv:num_preemptions_total"))


def find_llama_server(arg):
    if arg:
        return arg
    d = os.path.join(ADAKV_HOME, "llama.cpp", "build", "bin")
    p = os.path.join(d, "llama-server")
    return p if os.access(p, os.X_OK) else None


# ---------------------------------------------------------------- one streamed request

def stream_request(server, body, timeout):
    """Sends one streaming completion now and times its chunks."""
    rec = {"t_send": None, "chunks": [], "status": None, "error": None, "usage": None,
           "finish_reason": None}
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        payload = json.dumps(body)
        rec["t_send"] = time.perf_counter()
        conn.request("POST", "/v1/completions", body=payload,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        rec["status"] = resp.status
        if resp.status != 200:
            rec["error"] = resp.read().decode("utf-8", "replace")[:500]
            rec["t_end"] = time.perf_counter()
            return rec
        while True:
            line = resp.readline()
            if not line:
                break
            t = time.perf_counter()
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                ev = json.loads(data)
            except ValueError:
                rec["error"] = f"bad SSE data: {data[:200]!r}"
                continue
            if ev.get("usage"):
                rec["usage"] = ev["usage"]
            if ev.get("timings"):  # llama-server: prompt tokens it evaluated (not from cache)
                rec["prompt_evaluated"] = ev["timings"].get("prompt_n")
            if "error" in ev:
                rec["error"] = json.dumps(ev["error"])[:500]
            for ch in ev.get("choices") or []:
                if ch.get("text"):
                    rec["chunks"].append(t)
                if ch.get("finish_reason"):
                    rec["finish_reason"] = ch["finish_reason"]
        rec["t_end"] = time.perf_counter()
    except (OSError, http.client.HTTPException) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["t_end"] = time.perf_counter()
    finally:
        conn.close()
    return rec


class Sampler(threading.Thread):
    def __init__(self, server, period, inflight):
        super().__init__(daemon=True)
        self.server, self.period, self.inflight = server, period, inflight
        self.samples = []  # (t, running, waiting, kv_usage, client_inflight)
        self.stop_ev = threading.Event()

    def run(self):
        while not self.stop_ev.is_set():
            t = time.perf_counter()
            try:
                run_, wait_, kvu, _ = self.server.metrics()
                self.samples.append((t, run_, wait_, kvu, self.inflight[0]))
            except (OSError, http.client.HTTPException):
                pass
            self.stop_ev.wait(max(0.0, self.period - (time.perf_counter() - t)))


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_step(server, bodies, schedule, concurrency, args):
    """schedule: send offsets (open loop), or None with concurrency C (closed loop)."""
    inflight = [0]
    lock = threading.Lock()
    recs = [None] * len(bodies)
    sampler = Sampler(server, args.sample_s, inflight)
    pre0 = server.metrics()[3]
    sampler.start()
    t0 = time.perf_counter() + 0.2

    def one(i, offset):
        # inflight counts from the moment of sending (approximately: just before)
        now = time.perf_counter()
        if t0 + offset > now:
            time.sleep(t0 + offset - now)
        with lock:
            inflight[0] += 1
        recs[i] = stream_request(server, bodies[i], args.request_timeout)
        with lock:
            inflight[0] -= 1

    if schedule is not None:
        threads = [threading.Thread(target=one, args=(i, schedule[i]), daemon=True)
                   for i in range(len(bodies))]
        for th in threads:
            th.start()
    else:
        nxt = [0]

        def client():
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= len(bodies):
                    return
                one(i, 0)

        threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
        for th in threads:
            th.start()
    for th in threads:
        th.join()
    sampler.stop_ev.set()
    sampler.join()
    pre1 = server.metrics()[3]
    return summarize(recs, sampler.samples, pre0, pre1, args)


def summarize(recs, samples, pre0, pre1, args):
    ok = [r for r in recs if r and r["status"] == 200 and not r["error"]]
    bad = [r for r in recs if r not in ok]
    ttft, itl, e2e = [], [], []
    out_tokens, short = 0, 0
    prompt_tokens, cached = [], []
    for r in ok:
        if r["chunks"]:
            ttft.append(r["chunks"][0] - r["t_send"])
            itl.extend(b - a for a, b in zip(r["chunks"], r["chunks"][1:]))
        e2e.append(r["t_end"] - r["t_send"])
        u = r["usage"] or {}
        n = u.get("completion_tokens")
        if n is None:
            n = args.max_tokens if r["finish_reason"] == "length" else len(r["chunks"])
        if n != args.max_tokens:
            short += 1
        out_tokens += n
        if u.get("prompt_tokens") is not None:
            prompt_tokens.append(u["prompt_tokens"])
        if r.get("prompt_evaluated") is not None and u.get("prompt_tokens") is not None:
            cached.append(u["prompt_tokens"] - r["prompt_evaluated"])
    sent = [r["t_send"] for r in recs if r and r["t_send"]]
    ends = [r["t_end"] for r in recs if r and r.get("t_end")]
    t_first, t_last = (min(sent), max(ends)) if sent and ends else (0, 0)
    dur = max(t_last - t_first, 1e-9)
    # client-side in flight, exact: sweep the send/end events
    ev = sorted([(r["t_send"], 1) for r in recs if r and r["t_send"]] +
                [(r["t_end"], -1) for r in recs if r and r["t_send"]])
    cur, peak_c, area, last_t = 0, 0, 0.0, t_first
    for t, d in ev:
        area += cur * (t - last_t)
        cur += d
        peak_c = max(peak_c, cur)
        last_t = t
    win = [s for s in samples if t_first <= s[0] <= t_last]
    running = [s[1] for s in win if s[1] is not None]
    waiting = [s[2] for s in win if s[2] is not None]
    kvu = [s[3] for s in win if s[3] is not None]
    res = {
        "requests": len(recs), "ok": len(ok), "failed": len(bad),
        "errors": sorted({(r or {}).get("error") or f"HTTP {(r or {}).get('status')}"
                          for r in bad})[:5],
        "not_max_tokens": short,
        "prompt_tokens_reported": sorted(set(prompt_tokens)),
        "prompt_tokens_cached_max": max(cached) if cached else None,
        "prompt_tokens_min": min(prompt_tokens) if prompt_tokens else None,
        "prompt_tokens_max": max(prompt_tokens) if prompt_tokens else None,
        "duration_s": dur,
        "output_tokens": out_tokens,
        "output_tok_s": out_tokens / dur,
        "req_s": len(ok) / dur,
        "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99),
        "itl_p50_s": pct(itl, 50), "itl_p99_s": pct(itl, 99),
        "e2e_p50_s": pct(e2e, 50),
        "running_mean": statistics.fmean(running) if running else None,
        "running_peak": max(running) if running else None,
        "waiting_mean": statistics.fmean(waiting) if waiting else None,
        "kv_usage_peak": max(kvu) if kvu else None,
        "client_inflight_mean": area / dur,
        "client_inflight_peak": peak_c,
        "preemptions": (pre1 - pre0) if pre0 is not None and pre1 is not None else None,
        "samples": len(win),
    }
    return res


# ---------------------------------------------------------------- prompts

def corpus_words():
    with open(CORPUS) as f:
        return f.read().split()


def windows(seq, n, length):
    """n windows of `length` items of the cyclic sequence seq, starting len(seq) // n apart:
    distinct starts, so no two windows share a prefix a server could reuse."""
    stride = max(1, len(seq) // n)
    reps = (length + n * stride) // len(seq) + 2
    cyc = seq * reps
    return [cyc[i * stride:i * stride + length] for i in range(n)]


def token_prompts(tok_server, n, length):
    """n windows of `length` token ids from the corpus, tokenized by llama-server's /tokenize."""
    st, ids = http_post_json(tok_server.host, tok_server.port, "/tokenize",
                             {"content": " ".join(corpus_words()), "add_special": False})
    if st != 200:
        sys.exit(f"/tokenize failed: {st} {ids}")
    return windows(ids["tokens"], n, length)


def text_prompts(server, n, length):
    """n text windows of about `length` tokens, sized with usage.prompt_tokens on `server`."""
    words = corpus_words()
    half = max(1, len(words) // n // 2)
    probe = words[half:] + words[:half]  # starts between two prompts: no prefix to reuse later
    k = int(length / 1.3)
    for _ in range(6):
        st, r = http_post_json(server.host, server.port, "/v1/completions",
                               {"prompt": " ".join(probe[:k]), "max_tokens": 1,
                                "temperature": 0})
        if st != 200:
            sys.exit(f"sizing the text prompts failed: {st} {r}")
        got = r["usage"]["prompt_tokens"]
        if abs(got - length) <= 2:
            break
        k = max(1, int(k * length / got))
    return [" ".join(w) for w in windows(words, n, k)]


# ---------------------------------------------------------------- columns

def column_label(col, budget):
    return col if col in ("llama", "full") else f"{col} {budget}"


def make_server(col, args, shape, llama_bin, logdir, rep):
    logp = os.path.join(logdir, f"{col}.{rep}.log")
    if col == "llama":
        bpt = kv_bytes_per_token(shape, args.llama_kv_dtype)
        budget = int(args.kv_mb * 2**20 // bpt)
        need = args.prompt_tokens + args.max_tokens
        # llama.cpp pads each slot's context up to a multiple of 256: size the slots so that the
        # padded total stays within the budget
        par = max(1, budget // need)
        while par > 1 and budget // par // 256 * 256 < need:
            par -= 1
        ctx = max(budget // par // 256 * 256, 256) * par
        port = free_port()
        cmd = [llama_bin, "-m", args.model, "-t", str(args.threads), "-tb", str(args.threads),
               "-c", str(ctx), "--parallel", str(par), "--host", "127.0.0.1", "--port", str(port),
               "--metrics", "--cache-ram", "0", "--no-webui",
               "-ctk", args.llama_kv_dtype, "-ctv", args.llama_kv_dtype] + args.llama_arg
        s = Server("llama-server", "llama", cmd, logp, port)
        s.info = {"kv_dtype": args.llama_kv_dtype, "ctx_tokens": ctx, "parallel": par,
                  "kv_mb": ctx * bpt / 2**20, "bytes_per_token": bpt}
        return s
    cmd = [args.adakv, "serve", "--model", args.model, "--port", "0", "--host", "127.0.0.1",
           "--threads", str(args.threads), "--kv-pool-mb", str(args.kv_mb), "--policy", col]
    if col != "full":
        cmd += ["--budget", str(args.budget)]
    if args.adakv_kv_dtype:
        cmd += ["--kv-dtype", args.adakv_kv_dtype]
    cmd += args.adakv_arg
    s = Server(f"adakv {column_label(col, args.budget)}", "adakv", cmd, logp)
    dt = args.adakv_kv_dtype or "f32"
    s.info = {"kv_dtype": dt + ("" if args.adakv_kv_dtype else " (default)"),
              "ctx_tokens": int(args.kv_mb * 2**20 // kv_bytes_per_token(shape, dt)),
              "kv_mb": args.kv_mb, "bytes_per_token": kv_bytes_per_token(shape, dt)}
    return s


def describe(srv):
    """What the started server says of its KV memory, into srv.info."""
    if srv.kind == "llama":
        with open(srv.log_path, errors="replace") as f:
            m = re.search(r"n_slots = (\d+), n_ctx_slot = (\d+)", f.read())
        if m:
            srv.info["parallel"] = int(m.group(1))
            srv.info["ctx_tokens"] = int(m.group(1)) * int(m.group(2))
            srv.info["kv_mb"] = srv.info["ctx_tokens"] * srv.info["bytes_per_token"] / 2**20
    else:
        v = srv.raw_metrics()
        if "adakv:kv_cache_total_blocks" in v:
            srv.info["kv_blocks"] = int(v["adakv:kv_cache_total_blocks"])


def bodies_for(prompts, args):
    return [{"prompt": p, "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
             "stream": True, "stream_options": {"include_usage": True}} for p in prompts]


def steps_of(args):
    steps = []
    for r in [x for x in args.rates.split(",") if x]:
        steps.append(("rate", float("inf") if r == "inf" else float(r)))
    for c in [x for x in (args.concurrency or "").split(",") if x]:
        steps.append(("conc", int(c)))
    return steps


def step_name(step):
    kind, v = step
    if kind == "conc":
        return f"concurrency {v}"
    return "burst (all at once)" if v == float("inf") else f"rate {v:g} req/s"


def schedule_for(step, n, seed):
    kind, v = step
    if kind == "conc":
        return None
    if v == float("inf"):
        return [0.0] * n
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(v)
    return out


# ---------------------------------------------------------------- report

ROWS = [
    ("in flight, server mean", "running_mean", "{:.2f}"),
    ("in flight, server peak", "running_peak", "{:.0f}"),
    ("waiting, server mean", "waiting_mean", "{:.2f}"),
    ("in flight, client mean", "client_inflight_mean", "{:.2f}"),
    ("in flight, client peak", "client_inflight_peak", "{:.0f}"),
    ("output tok/s", "output_tok_s", "{:.1f}"),
    ("requests/s", "req_s", "{:.3f}"),
    ("TTFT p50 (s)", "ttft_p50_s", "{:.3f}"),
    ("TTFT p99 (s)", "ttft_p99_s", "{:.3f}"),
    ("ITL p50 (ms)", "itl_p50_s", "ms"),
    ("ITL p99 (ms)", "itl_p99_s", "ms"),
    ("E2E p50 (s)", "e2e_p50_s", "{:.2f}"),
    ("KV usage peak", "kv_usage_peak", "{:.2f}"),
    ("preemptions", "preemptions", "{:.0f}"),
    ("prompt tokens min", "prompt_tokens_min", "{:.0f}"),
    ("prompt tokens max", "prompt_tokens_max", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
    ("short of max_tokens", "not_max_tokens", "{:.0f}"),
]


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v, f):
    if v is None:
        return "-"
    if f == "ms":
        return f"{v * 1000:.1f}"
    return f.format(v)


def report(results, cols, labels, infos, steps, args, out=sys.stdout):
    w0 = 24
    info_keys = (("kv_dtype", "KV dtype"), ("kv_mb", "KV MiB"),
                 ("ctx_tokens", "KV tokens uncompressed"), ("parallel", "slots (--parallel)"),
                 ("kv_blocks", "KV pool blocks"))

    def info_cell(c, key):
        v = infos[c].get(key, "-")
        return f"{v:.0f}" if isinstance(v, float) else str(v)

    ws = [max(12, len(labels[c]) + 2, *(len(info_cell(c, k)) + 2 for k, _ in info_keys))
          for c in cols]
    ratio_cols = []
    ada = next((c for c in cols if c == "adakv"), None)
    if ada and "full" in cols:
        ratio_cols.append(("adakv/full", "full"))
    if ada and "llama" in cols:
        ratio_cols.append(("adakv/llama", "llama"))
    head = "".ljust(w0) + "".join(labels[c].rjust(w) for c, w in zip(cols, ws)) + \
        "".join(n.rjust(13) for n, _ in ratio_cols)
    print(head, file=out)
    for key, label in info_keys:
        print(label.ljust(w0) + "".join(info_cell(c, key).rjust(w) for c, w in zip(cols, ws)),
              file=out)
    summary = {}
    for si, step in enumerate(steps):
        print(f"-- {step_name(step)}, {args.requests} requests of {args.prompt_tokens}+"
              f"{args.max_tokens} tokens"
              + (f", median of {args.repeats}" if args.repeats > 1 else ""),
              file=out)
        summary[si] = {}
        for c in cols:
            summary[si][c] = {k: med([rep[c][si][k] for rep in results]) for _, k, _ in ROWS}
        for label, key, f in ROWS:
            row = label.ljust(w0)
            for c, w in zip(cols, ws):
                row += fmt(summary[si][c][key], f).rjust(w)
            for _, other in ratio_cols:
                a, b = summary[si][ada][key], summary[si][other][key]
                row += (f"{a / b:.2f}x" if a is not None and b else "-").rjust(13)
            print(row, file=out)
    return summary


def checks(summary, cols, steps, out=sys.stdout):
    lines = []

    def best(c, key):
        vals = [summary[si][c][key] for si in range(len(steps)) if summary[si][c][key] is not None]
        return max(vals) if vals else None

    if "adakv" in cols and "full" in cols:
        a, f = best("adakv", "running_peak"), best("full", "running_peak")
        if a is not None and f:
            lines.append(f"adakv sustains {a:.0f} sequences at most, full {f:.0f}: {a / f:.2f}x "
                         f"({'meets' if a >= 4 * f else 'MISSES'} >= 4x)")
        a, f = best("adakv", "output_tok_s"), best("full", "output_tok_s")
        if a is not None and f:
            lines.append(f"adakv output {a:.1f} tok/s at best, full {f:.1f}: {a / f:.2f}x "
                         f"({'higher' if a > f else 'NOT higher'})")
    if "adakv" in cols and "llama" in cols:
        a, l_ = best("adakv", "output_tok_s"), best("llama", "output_tok_s")
        if a is not None and l_:
            lines.append(f"adakv vs llama-server, best output tok/s: {a:.1f} vs {l_:.1f} "
                         f"({a / l_:.2f}x)")
        for key, name in (("ttft_p50_s", "TTFT p50"), ("itl_p50_s", "ITL p50")):
            for si, step in enumerate(steps):
                a, l_ = summary[si]["adakv"][key], summary[si]["llama"][key]
                if a is not None and l_:
                    lines.append(f"adakv vs llama-server, {name} at {step_name(step)}: "
                                 f"{a * 1000:.1f} vs {l_ * 1000:.1f} ms ({a / l_:.2f}x)")
    for ln in lines:
        print("check: " + ln, file=out)
    return lines


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adakv", default=os.path.join(REPO, "build", "adakv"))
    ap.add_argument("--llama-server", default=None, help="default: $ADAKV_HOME/llama.cpp/build/bin")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--columns", default="llama,full,snapkv,adakv")
    ap.add_argument("--budget", default="0.2")
    ap.add_argument("--kv-mb", type=float, default=400, help="KV memory of every server, MiB")
    ap.add_argument("--adakv-kv-dtype", default=None, help="adakv serve --kv-dtype (default: the "
                    "server's own, f32)")
    ap.add_argument("--llama-kv-dtype", default="f16", help="llama-server -ctk/-ctv")
    ap.add_argument("--prompt-tokens", type=int, default=4000)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rates", default="0.1,0.2,0.4,inf", help="req/s; inf = a burst")
    ap.add_argument("--concurrency", default="", help="closed-loop steps, e.g. 4,16")
    ap.add_argument("--requests", type=int, default=16, help="requests per step")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 0)) or
                    os.cpu_count())
    ap.add_argument("--sample-s", type=float, default=0.5, help="GET /metrics period")
    ap.add_argument("--request-timeout", type=float, default=3600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--text-prompts", action="store_true", help="send text, not token ids")
    ap.add_argument("--adakv-arg", action="append", default=[], help="extra adakv serve argument")
    ap.add_argument("--llama-arg", action="append", default=[], help="extra llama-server argument")
    ap.add_argument("--log-dir", default=None, help="server logs (default: a temporary folder)")
    ap.add_argument("--json", default=None, help="write every number here")
    ap.add_argument("--report", default=None, metavar="JSON",
                    help="print the table and checks of an earlier run's --json file, run nothing")
    args = ap.parse_args()
    if args.report:
        with open(args.report) as f:
            d = json.load(f)
        a = argparse.Namespace(**d["args"])
        steps = [tuple(x) for x in d["step_specs"]]
        print(d["title"])
        summary = report(d["runs"], d["columns"], d["labels"], d["servers"], steps, a)
        checks(summary, d["columns"], steps)
        return 0

    cols = [c.strip() for c in args.columns.split(",") if c.strip()]
    steps = steps_of(args)
    if not steps:
        sys.exit("no steps: give --rates and/or --concurrency")
    shape = model_shape(args.model)
    llama_bin = find_llama_server(args.llama_server)
    if "llama" in cols and not llama_bin:
        sys.exit("no llama-server: run `cluster/setup-node.sh serve-peer` or give --llama-server")
    logdir = args.log_dir or tempfile.mkdtemp(prefix="bench_serve.")
    os.makedirs(logdir, exist_ok=True)
    labels = {c: ("llama-server" if c == "llama" else column_label(c, args.budget)) for c in cols}
    log(f"model {args.model}: {shape}; threads {args.threads}; KV {args.kv_mb} MiB; "
        f"logs in {logdir}")

    # The prompts, once, for every column.
    n_prompts = args.requests * len(steps)  # fresh prompts for every step
    if args.text_prompts or not llama_bin:
        prompts = None  # sized on the first server
    else:
        tok = Server("llama-server (tokenizer)", "llama",
                     [llama_bin, "-m", args.model, "-t", "1", "-c", "512", "--port",
                      str(p := free_port()), "--host", "127.0.0.1", "--no-webui"],
                     os.path.join(logdir, "tokenizer.log"), p).start()
        try:
            prompts = token_prompts(tok, n_prompts, args.prompt_tokens)
        finally:
            tok.stop()

    results, infos = [], {}
    for rep in range(args.repeats):
        per_col = {}
        for c in cols:
            srv = make_server(c, args, shape, llama_bin, logdir, rep)
            infos[c] = srv.info
            srv.start()
            try:
                describe(srv)
                if prompts is None:
                    prompts = text_prompts(srv, n_prompts, args.prompt_tokens)
                # warm-up: one short request, not measured
                st, r = http_post_json(srv.host, srv.port, "/v1/completions",
                                       {"prompt": "The quick brown fox", "max_tokens": 4,
                                        "temperature": 0})
                if st != 200:
                    srv.fail(f"warm-up request failed: {st} {r}")
                per_col[c] = []
                for si, step in enumerate(steps):
                    bodies = bodies_for(prompts[si * args.requests:(si + 1) * args.requests], args)
                    sched = schedule_for(step, len(bodies), args.seed + si)
                    res = run_step(srv, bodies, sched, step[1] if step[0] == "conc" else None, args)
                    res["step"] = step_name(step)
                    per_col[c].append(res)
                    log(f"{labels[c]} {step_name(step)}: {res['ok']}/{res['requests']} ok, "
                        f"{res['output_tok_s']:.1f} tok/s, running peak {res['running_peak']}, "
                        f"TTFT p50 {fmt(res['ttft_p50_s'], '{:.3f}')} s, "
                        f"ITL p50 {fmt(res['itl_p50_s'], 'ms')} ms"
                        + (f", errors {res['errors']}" if res["errors"] else ""))
                    pt = res["prompt_tokens_reported"]
                    if isinstance(prompts[0], list) and pt and pt != [args.prompt_tokens]:
                        log(f"  warning: usage.prompt_tokens {pt}, not {args.prompt_tokens}")
                    if (res["prompt_tokens_cached_max"] or 0) > 2:
                        log(f"  warning: up to {res['prompt_tokens_cached_max']} prompt tokens "
                            "came from llama-server's cache")
            finally:
                srv.stop()
        results.append(per_col)

    title = (f"model {os.path.basename(args.model)} ({shape['layers']} layers, {shape['kv_heads']} "
             f"KV heads x {shape['head_dim']}), {args.threads} threads, KV memory {args.kv_mb:g} "
             f"MiB, prompts of {args.prompt_tokens} tokens "
             f"({'text' if isinstance(prompts[0], str) else 'token ids'}), max_tokens "
             f"{args.max_tokens} with ignore_eos")
    print(title)
    summary = report(results, cols, labels, infos, steps, args)
    lines = checks(summary, cols, steps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "shape": shape, "columns": cols, "labels": labels,
                       "servers": infos, "steps": [step_name(s) for s in steps],
                       "step_specs": steps, "title": title,
                       "runs": results,
                       "median": {step_name(steps[si]): summary[si] for si in summary},
                       "checks": lines}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
