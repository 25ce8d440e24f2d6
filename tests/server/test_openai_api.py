#!/usr/bin/env python3
"""`adakv serve` through the official `openai` client: the OpenAI-compatible API end to end.

One server for the whole file (started with --port 0, stopped with SIGTERM at the end; it must
exit 0). Run with the venv that has the `openai` package:

  ~/.cache/adakv/venv/bin/python tests/server/test_openai_api.py --adakv build/adakv [--tp 1|3]
      [--replicas 2]
      [unittest options, e.g. -v or -k test_stop]

--replicas 2 starts two servers behind `adakv router` and runs the suite against the router;
--dp 2 starts one mpirun job of `adakv serve --dp 2` (two replicas, the router on rank 0).

--tp 3 starts the server as three ranks of an mpirun job (rank 0 serves HTTP) and stops it by
signalling mpirun (SIGUSR1, which mpirun forwards to every rank; --stop-signal TERM to try
SIGTERM instead). The reference runs of `adakv generate` go through the same launcher, so greedy
outputs are compared at the same tensor-parallel size.
"""
import argparse
import base64
import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import openai

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
DEFAULT_NAME = "SmolLM2-135M-Instruct"
EOS = 2  # <|im_end|> / end of text of the default model (what `generate --json` lists last)

ARGS = None    # the command line (parsed before unittest sees it)
SERVER = None  # the running Server


# ---------------------------------------------------------------------------------------------
# The server process


class Server:
    """`adakv serve --port 0 ...`, directly (TP 1) or as the ranks of an mpirun job."""

    def __init__(self, adakv, tp, extra, start_timeout_s=120.0, dp=1, pp=1):
        self.adakv, self.tp, self.dp, self.pp = adakv, tp, dp, pp
        self.env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none")
        # Idle CPU threads sleep instead of spinning: on a few cores shared with other jobs (ctest -j,
        # a compile) spinning threads slow every run down several times. OMP_WAIT_POLICY=active
        # in the environment keeps spinning.
        self.env.setdefault("OMP_WAIT_POLICY", "passive")
        # With replicas (--dp) the job has tp x pp x dp ranks; generate_ref's runs are one
        # replica's (tp x pp).
        launcher = MPIRUN + ["-np", str(tp * pp * dp)] if tp * pp * dp > 1 else []
        cmd = launcher + [adakv, "serve", "--port", "0"] + \
            ([] if "--threads" in extra else self.threads()) + \
            (["--dp", str(dp)] if dp > 1 else []) + self.layout() + extra
        deadline = time.monotonic() + start_timeout_s
        m = self.start(cmd, "adakv-serve-", r"\[adakv\] serving (\S+) on http://([^\s:]+):(\d+)",
                       "'[adakv] serving NAME on http://HOST:PORT'", deadline)
        self.name, self.host, self.port = m.group(1), m.group(2), int(m.group(3))
        while time.monotonic() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                self.fail(f"exited with {self.proc.returncode} before /health answered 200")
            time.sleep(0.1)
        self.kill()
        self.fail(f"GET /health did not answer 200 within {start_timeout_s}s")

    def start(self, cmd, prefix, ready, what, deadline):
        """Starts cmd in its own process group (a hung one is killed with everything under it),
        stderr to a file; returns the match of `ready` in its stderr, or fails by the deadline."""
        self.cmd = cmd
        self.err_file = tempfile.NamedTemporaryFile("w+b", prefix=prefix, suffix=".err")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.err_file, env=self.env, start_new_session=True)
        ready = re.compile(ready)
        while time.monotonic() < deadline:
            m = ready.search(self.stderr())
            if m:
                return m
            if self.proc.poll() is not None:
                self.fail(f"exited with {self.proc.returncode} before it was ready")
            time.sleep(0.1)
        self.kill()
        self.fail(f"printed no {what} in time")

    def launcher(self):
        ranks = self.tp * getattr(self, "pp", 1)
        return MPIRUN + ["-np", str(ranks)] if ranks > 1 else []

    def layout(self):
        """The flags of one replica's layout beyond TP (serve and generate_ref alike)."""
        return ["--pp", str(self.pp)] if getattr(self, "pp", 1) > 1 else []

    def threads(self):
        # ranks sharing a few cores: one thread each (as the e2e tensor-parallel tests run them)
        ranks = self.tp * getattr(self, "dp", 1) * getattr(self, "pp", 1)
        return ["--threads", "1"] if ranks > 1 else []

    @property
    def base_url(self):
        return f"http://{self.host}:{self.port}/v1"

    def stderr(self):
        self.err_file.flush()
        with open(self.err_file.name, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def fail(self, why):
        raise RuntimeError(f"adakv serve {why}\ncommand: {shlex.join(self.cmd)}\n"
                           f"--- its stderr ---\n{self.stderr()}--- end of stderr ---")

    def get(self, path, timeout=10):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read().decode("utf-8", "replace"), dict(r.getheaders())
        finally:
            conn.close()

    def raw(self, method, path, body=None, headers=None, timeout=30):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read().decode("utf-8", "replace"), {k.lower(): v for k, v in r.getheaders()}
        finally:
            conn.close()

    def metrics(self):
        status, text, headers = self.get("/metrics")
        if status != 200:
            raise AssertionError(f"GET /metrics -> {status}: {text[:500]}")
        return parse_metrics(text), text, headers

    def stop(self, sig, timeout_s=60, signalled=False):
        """Signals the server (or mpirun) and returns its exit code; kills it after timeout_s.
        signalled: the signal was sent already; only wait (a second one may mean "now")."""
        if self.proc.poll() is None:
            if not signalled:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                self.fail(f"did not exit within {timeout_s}s of signal {sig!r} (killed)")
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


class RoutedServer:
    """`adakv router` in front of n `adakv serve` replicas (each a Server at the same TP): the
    suite's client talks to the router as it would to one server."""

    def __init__(self, adakv, tp, extra, replicas, start_timeout_s=120.0):
        self.replicas = [Server(adakv, tp, extra, start_timeout_s) for _ in range(replicas)]
        first = self.replicas[0]
        self.adakv, self.tp, self.env, self.name = adakv, tp, first.env, first.name
        cmd = [adakv, "router", "--port", "0"] + \
            [a for r in self.replicas for a in ("--replica", f"http://{r.host}:{r.port}")]
        m = self.start(cmd, "adakv-router-", r"\[adakv\] routing on http://([^\s:]+):(\d+)",
                       "'[adakv] routing on http://HOST:PORT'", time.monotonic() + start_timeout_s)
        self.host, self.port = m.group(1), int(m.group(2))

    start = Server.start
    launcher = Server.launcher
    layout = Server.layout
    threads = Server.threads
    base_url = Server.base_url
    stderr = Server.stderr
    get = Server.get
    raw = Server.raw
    metrics = Server.metrics

    def fail(self, why):
        raise RuntimeError(f"adakv router {why}\ncommand: {shlex.join(self.cmd)}\n"
                           f"--- its stderr ---\n{self.stderr()}--- end of stderr ---")

    def stop(self, sig, timeout_s=60, signalled=False):
        """Stops the router with sig (its exit code is returned), then every replica."""
        rc = Server.stop(self, signal.SIGTERM if sig == signal.SIGUSR1 else sig, timeout_s,
                         signalled)
        for r in self.replicas:
            r_sig = signal.SIGUSR1 if r.tp > 1 else signal.SIGTERM
            if r.stop(r_sig, timeout_s) != 0:
                r.fail(f"exited with {r.proc.returncode} (expected 0)")
        return rc

    def kill(self):
        Server.kill(self)
        for r in self.replicas:
            r.kill()


def parse_metrics(text):
    """Prometheus text -> {'name' or 'name{labels}': value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def metric(ms, name):
    """A metric's value; for a labelled family without labels given, the sum of its series."""
    if name in ms:
        return ms[name]
    # Behind `adakv router` each series also comes once per replica (replica="i"): the
    # unlabelled ones are already the sums.
    series = [v for k, v in ms.items() if k.startswith(name + "{") and 'replica="' not in k]
    if not series:
        raise AssertionError(f"/metrics has no {name}")
    return sum(series)


# ---------------------------------------------------------------------------------------------
# Inputs


def goldens():
    """Texts with their token ids, from the tokenizer goldens (HF tokenizers' ids)."""
    out = {}
    with open(os.path.join(REPO, "tests", "data", "tokenizer_goldens.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            text = base64.b64decode(d["text_b64"])
            if d["kind"] == "text":
                out[text.decode("utf-8", "replace")] = d["ids"]
            elif d["kind"] == "chat" and d.get("add_generation_prompt"):
                out[json.dumps(d["chat"])] = d["ids"]
    return out


def long_text(n_words, offset=0):
    """Deterministic prose of n_words words (the GPL-3 text, else a generated stand-in)."""
    try:
        with open("/usr/share/common-licenses/GPL-3") as f:
            words = f.read().split()
    except OSError:
        words = [f"word{(i * 7919) % 997}" for i in range(5000)]
    return " ".join(words[(offset + k) % len(words)] for k in range(n_words))


SHORT = "The capital of France is"
CHAT_Q = "What is the capital of France?"


def generate_ref(prompt, max_tokens, chat=False, extra=()):
    """`adakv generate --prompt P --max-tokens N --temperature 0 --json` at the server's TP."""
    cmd = SERVER.launcher() + [SERVER.adakv, "generate", "--prompt", prompt, "--max-tokens",
                               str(max_tokens), "--temperature", "0", "--json"] + SERVER.threads() \
        + SERVER.layout() + list(extra)
    if chat:
        cmd.append("--chat")
    p = subprocess.run(cmd, capture_output=True, text=True, env=SERVER.env, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"{shlex.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    # Under mpirun only rank 0 prints; take the first JSON object line.
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"{shlex.join(cmd)} printed no JSON:\n{p.stdout}\n{p.stderr}")


def extra(obj, key):
    """An extra (non-OpenAI) field of a response object, e.g. `kv`."""
    if obj is None:
        return None
    ex = getattr(obj, "model_extra", None) or {}
    return ex.get(key, getattr(obj, key, None))


# ---------------------------------------------------------------------------------------------
# The module fixture


def setUpModule():
    global SERVER
    extra_flags = ["--kv-pool-mb", str(ARGS.kv_pool_mb)] + shlex.split(ARGS.server_args)
    t0 = time.monotonic()
    if ARGS.replicas > 1:
        SERVER = RoutedServer(ARGS.adakv, ARGS.tp, extra_flags, ARGS.replicas,
                              start_timeout_s=ARGS.start_timeout)
    else:
        SERVER = Server(ARGS.adakv, ARGS.tp, extra_flags, start_timeout_s=ARGS.start_timeout,
                        dp=ARGS.dp, pp=ARGS.pp)
    print(f"\n[test] server up in {time.monotonic() - t0:.1f}s: {SERVER.name} at "
          f"{SERVER.base_url} (tp {ARGS.tp}, {ARGS.replicas} replica(s))", file=sys.stderr)


def tearDownModule():
    if SERVER is None:
        return
    sig = signal.SIGUSR1 if (ARGS.tp * ARGS.dp * ARGS.pp > 1 and ARGS.stop_signal == "auto") \
        else \
        {"auto": signal.SIGTERM, "TERM": signal.SIGTERM, "INT": signal.SIGINT,
         "USR1": signal.SIGUSR1}[ARGS.stop_signal]
    t0 = time.monotonic()
    rc = SERVER.stop(sig)
    print(f"[test] server stopped by {sig.name} in {time.monotonic() - t0:.1f}s, exit {rc}",
          file=sys.stderr)
    if rc != 0:
        SERVER.fail(f"exited with {rc} after {sig.name} (expected 0)")


DURATIONS = {}


class TimedTest(unittest.TestCase):
    """Records each test's wall time (printed, slowest first, at the end)."""

    def setUp(self):
        self._t0 = time.monotonic()
        self.c = client()

    def tearDown(self):
        DURATIONS[self.id().split(".", 1)[-1]] = time.monotonic() - self._t0


def client(**kw):
    return openai.OpenAI(base_url=SERVER.base_url, api_key="unused", max_retries=0, timeout=300,
                         **kw)


# ---------------------------------------------------------------------------------------------
# Tests


class Completions(TimedTest):
    def test_served_name(self):
        self.assertEqual(SERVER.name, DEFAULT_NAME)

    def test_models(self):
        models = self.c.models.list()
        ids = [m.id for m in models.data]
        self.assertEqual(ids, [SERVER.name])
        m = models.data[0]
        self.assertEqual(m.object, "model")
        self.assertEqual(m.owned_by, "adakv")
        self.assertEqual(extra(m, "max_model_len"), 8192)

    def test_non_streaming_shape(self):
        r = self.c.completions.create(model=SERVER.name, prompt=SHORT, max_tokens=6,
                                      temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.model, SERVER.name)
        self.assertTrue(r.id)
        self.assertEqual(len(r.choices), 1)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertTrue(r.choices[0].text)
        kv = extra(r, "kv")
        self.assertIsInstance(kv, dict, "the response has no top-level `kv` object")
        for k in ("policy", "full_bytes", "kept_bytes", "kept_share", "kept_tokens_per_head",
                  "preemptions"):
            self.assertIn(k, kv)

    def test_model_may_be_omitted(self):
        # The openai client requires `model`; a raw body without it must work.
        status, body, _ = SERVER.raw("POST", "/v1/completions",
                                     json.dumps({"prompt": SHORT, "max_tokens": 2}),
                                     {"Content-Type": "application/json"})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["usage"]["completion_tokens"], 2)

    def test_stream_equals_non_stream(self):
        kw = dict(model=SERVER.name, prompt=SHORT, max_tokens=12, temperature=0,
                  extra_body={"ignore_eos": True})
        full = self.c.completions.create(**kw)
        chunks = list(self.c.completions.create(stream=True, **kw))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        self.assertEqual(text, full.choices[0].text)
        self.assertEqual(len({ch.id for ch in chunks}), 1, "chunks of one stream carry one id")
        finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices
                    and ch.choices[0].finish_reason]
        self.assertEqual(finishes, ["length"])
        last = [ch for ch in chunks if ch.choices][-1]
        self.assertEqual(last.choices[0].finish_reason, "length")
        self.assertIsInstance(extra(last, "kv"), dict, "the last choice chunk has no `kv`")

    def test_max_tokens_length(self):
        r = self.c.completions.create(model=SERVER.name, prompt=SHORT, max_tokens=5,
                                      temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 5)
        # max_completion_tokens is the newer name for the same thing
        r = self.c.completions.create(model=SERVER.name, prompt=SHORT, temperature=0,
                                      extra_body={"ignore_eos": True, "max_completion_tokens": 3})
        self.assertEqual(r.usage.completion_tokens, 3)

    def test_default_max_tokens_16(self):
        r = self.c.completions.create(model=SERVER.name, prompt=SHORT, temperature=0,
                                      extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 16)
        self.assertEqual(r.choices[0].finish_reason, "length")

    def test_usage_exact_and_token_ids(self):
        g = goldens()
        for text in (SHORT, next(t for t in g if t.startswith("Ada-KV allocates"))):
            ids = g[text]
            with self.subTest(prompt=text[:30]):
                a = self.c.completions.create(model=SERVER.name, prompt=text, max_tokens=4,
                                              temperature=0, extra_body={"ignore_eos": True})
                b = self.c.completions.create(model=SERVER.name, prompt=ids, max_tokens=4,
                                              temperature=0, extra_body={"ignore_eos": True})
                self.assertEqual(a.usage.prompt_tokens, len(ids))
                self.assertEqual(b.usage.prompt_tokens, len(ids))
                for r in (a, b):
                    self.assertEqual(r.usage.completion_tokens, 4)
                    self.assertEqual(r.usage.total_tokens,
                                     r.usage.prompt_tokens + r.usage.completion_tokens)
                self.assertEqual(a.choices[0].text, b.choices[0].text,
                                 "text prompt and its token ids give different continuations")

    def test_prompt_list_of_one_string(self):
        a = self.c.completions.create(model=SERVER.name, prompt=[SHORT], max_tokens=4,
                                      temperature=0, extra_body={"ignore_eos": True})
        b = self.c.completions.create(model=SERVER.name, prompt=SHORT, max_tokens=4,
                                      temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(a.choices[0].text, b.choices[0].text)
        self.assertEqual(a.usage.prompt_tokens, b.usage.prompt_tokens)

    def test_stream_include_usage(self):
        chunks = list(self.c.completions.create(
            model=SERVER.name, prompt=SHORT, max_tokens=7, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        self.assertGreaterEqual(len(chunks), 2)
        last = chunks[-1]
        self.assertEqual(last.choices, [], "the usage chunk must have no choices")
        self.assertIsNotNone(last.usage)
        self.assertEqual(last.usage.prompt_tokens, 5)
        self.assertEqual(last.usage.completion_tokens, 7)
        self.assertEqual(last.usage.total_tokens, 12)
        self.assertTrue(all(ch.usage is None for ch in chunks[:-1]),
                        "only the final chunk carries usage")
        # without include_usage: no usage chunk
        chunks = list(self.c.completions.create(
            model=SERVER.name, prompt=SHORT, max_tokens=3, temperature=0, stream=True,
            extra_body={"ignore_eos": True}))
        self.assertTrue(all(ch.choices for ch in chunks), "a usage chunk without include_usage")

    def test_stop_strings(self):
        full = self.c.completions.create(model=SERVER.name, prompt=SHORT, max_tokens=16,
                                         temperature=0, extra_body={"ignore_eos": True})
        text = full.choices[0].text
        # a stop string from the middle of the greedy text
        mid = len(text) // 2
        stop = text[mid:mid + 3]
        self.assertTrue(stop.strip(), f"greedy text too short for the test: {text!r}")
        want = text[:text.index(stop)]
        for stop_arg in (stop, ["@@never@@", stop]):
            for stream in (False, True):
                with self.subTest(stop=stop_arg, stream=stream):
                    r = self.c.completions.create(model=SERVER.name, prompt=SHORT, max_tokens=16,
                                                  temperature=0, stop=stop_arg, stream=stream,
                                                  extra_body={"ignore_eos": True})
                    if stream:
                        chunks = list(r)
                        got = "".join(ch.choices[0].text for ch in chunks if ch.choices)
                        finish = [ch.choices[0].finish_reason for ch in chunks
                                  if ch.choices and ch.choices[0].finish_reason]
                        self.assertEqual(finish, ["stop"])
                    else:
                        got = r.choices[0].text
                        self.assertEqual(r.choices[0].finish_reason, "stop")
                        self.assertLess(r.usage.completion_tokens, 16)
                    self.assertNotIn(stop, got)
                    self.assertEqual(got, want, f"full greedy text {text!r}, stop {stop!r}")

    def test_seed(self):
        kw = dict(model=SERVER.name, prompt="Once upon a time", max_tokens=16, temperature=0.8,
                  extra_body={"ignore_eos": True})
        a = self.c.completions.create(seed=1234, **kw).choices[0].text
        b = self.c.completions.create(seed=1234, **kw).choices[0].text
        self.assertEqual(a, b, "same seed, same request -> same text")
        others = [self.c.completions.create(seed=s, **kw).choices[0].text for s in (1, 2, 3)]
        self.assertTrue(any(o != a for o in others),
                        f"seeds 1234, 1, 2, 3 all gave {a!r} at temperature 0.8")

    def test_greedy_equals_generate_full(self):
        ref = generate_ref(SHORT, 12, extra=["--policy", "full"])
        r = self.c.completions.create(model=SERVER.name, prompt=SHORT, max_tokens=12,
                                      temperature=0, extra_body={"kv_policy": "full"})
        self.assertEqual(r.choices[0].text, ref["text"])
        self.assertEqual(r.choices[0].finish_reason, ref["finish_reason"])
        self.assertEqual(r.usage.prompt_tokens, ref["prompt_tokens"])
        self.assertEqual(r.usage.completion_tokens, len(ref["tokens"]))
        self.assertEqual(extra(r, "kv")["policy"], "full")

    def test_greedy_equals_generate_default_compression(self):
        # long enough that the default policy (the model's preset) really evicts
        prompt = long_text(560, offset=100) + "\n\nIn short, this License"
        # the server leaves the preset's look-ahead off (generate keeps it)
        ref = generate_ref(prompt, 10, extra=["--lookahead", "0"])
        r = self.c.completions.create(model=SERVER.name, prompt=prompt, max_tokens=10,
                                      temperature=0)
        self.assertEqual(r.usage.prompt_tokens, ref["prompt_tokens"])
        kv = extra(r, "kv")
        self.assertEqual(kv["policy"], ref["kv"]["policy"])
        self.assertLess(kv["kept_bytes"], kv["full_bytes"],
                        f"the default compression kept everything of {r.usage.prompt_tokens} tokens")
        self.assertEqual(r.choices[0].text, ref["text"])
        self.assertEqual(r.choices[0].finish_reason, ref["finish_reason"])

    def test_per_request_compression(self):
        prompt = long_text(750, offset=900)
        kw = dict(model=SERVER.name, prompt=prompt, max_tokens=4, temperature=0)
        r = self.c.completions.create(extra_body={"kv_policy": "adakv", "kv_budget": 0.2}, **kw)
        self.assertGreater(r.usage.prompt_tokens, 800)
        kv = extra(r, "kv")
        self.assertEqual(kv["policy"], "adakv")
        self.assertLess(kv["kept_bytes"], kv["full_bytes"])
        self.assertLess(kv["kept_share"], 1.0)
        f = self.c.completions.create(extra_body={"kv_policy": "full"}, **kw)
        kvf = extra(f, "kv")
        self.assertEqual(kvf["policy"], "full")
        self.assertEqual(kvf["kept_bytes"], kvf["full_bytes"])
        self.assertEqual(kvf["full_bytes"], kv["full_bytes"])


    def test_concurrent_greedy_same_as_alone(self):
        prompts = [SHORT, "Once upon a time", "def fibonacci(n):", long_text(120, offset=400)]
        kw = dict(model=SERVER.name, max_tokens=10, temperature=0, extra_body={"ignore_eos": True})
        alone = [self.c.completions.create(prompt=p, **kw).choices[0].text for p in prompts]
        together = [None] * len(prompts)
        errors = []

        def one(i):
            try:
                together[i] = client().completions.create(prompt=prompts[i], **kw).choices[0].text
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(errors, [])
        self.assertEqual(together, alone, "greedy text in a batch differs from alone")

    def test_unicode_stream(self):
        # multi-byte characters split across tokens: the stream must not cut them
        kw = dict(model=SERVER.name, prompt="Tokyo in Japanese is 東京. Osaka in Japanese is",
                  max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
        full = self.c.completions.create(**kw).choices[0].text
        pieces = [ch.choices[0].text for ch in self.c.completions.create(stream=True, **kw)
                  if ch.choices]
        self.assertEqual("".join(pieces), full)
        self.assertNotIn("\ufffd", full)

    def test_pipelined_keep_alive(self):
        # two requests written at once on one connection: answered in order
        bodies = [json.dumps({"prompt": SHORT, "max_tokens": n, "ignore_eos": True}).encode()
                  for n in (3, 1)]
        req = b"".join(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                       b"\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b
                       for b in bodies)
        with socket.create_connection((SERVER.host, SERVER.port), timeout=60) as s:
            s.sendall(req)
            f = s.makefile("rb")
            got = []
            for _ in bodies:
                status = f.readline()
                self.assertIn(b" 200 ", status)
                length = None
                while True:
                    h = f.readline().strip()
                    if not h:
                        break
                    k, _, v = h.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                self.assertIsNotNone(length, "a non-streaming answer without Content-Length")
                got.append(json.loads(f.read(length))["usage"]["completion_tokens"])
        self.assertEqual(got, [3, 1])


class Chat(TimedTest):
    def test_chat_non_streaming_and_usage(self):
        r = self.c.chat.completions.create(model=SERVER.name, max_tokens=24, temperature=0,
                                           messages=[{"role": "user", "content": CHAT_Q}])
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertTrue(r.choices[0].message.content)
        ids = goldens()[json.dumps([{"role": "user", "content": CHAT_Q}])]
        self.assertEqual(r.usage.prompt_tokens, len(ids))
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        self.assertIsInstance(extra(r, "kv"), dict)

    def test_chat_greedy_equals_generate(self):
        ref = generate_ref(CHAT_Q, 24, chat=True, extra=["--policy", "full"])
        r = self.c.chat.completions.create(model=SERVER.name, max_tokens=24, temperature=0,
                                           messages=[{"role": "user", "content": CHAT_Q}],
                                           extra_body={"kv_policy": "full"})
        self.assertEqual(r.choices[0].message.content, ref["text"])
        self.assertEqual(r.choices[0].finish_reason, ref["finish_reason"])
        self.assertEqual(r.usage.prompt_tokens, ref["prompt_tokens"])
        # generate lists the end-of-text token it stopped at; it is a generated token
        self.assertEqual(r.usage.completion_tokens, len(ref["tokens"]),
                         f"generate's tokens: {ref['tokens']}")

    def test_chat_default_compression_equals_generate(self):
        ref = generate_ref(CHAT_Q, 24, chat=True)
        r = self.c.chat.completions.create(model=SERVER.name, max_tokens=24, temperature=0,
                                           messages=[{"role": "user", "content": CHAT_Q}])
        self.assertEqual(r.choices[0].message.content, ref["text"])

    def test_chat_stream_equals_non_stream(self):
        kw = dict(model=SERVER.name, max_tokens=10, temperature=0,
                  messages=[{"role": "system", "content": "You are terse."},
                            {"role": "user", "content": [{"type": "text", "text": "Name a color."}]}],
                  extra_body={"ignore_eos": True})
        full = self.c.chat.completions.create(**kw)
        chunks = list(self.c.chat.completions.create(stream=True,
                                                     stream_options={"include_usage": True}, **kw))
        self.assertEqual(chunks[0].object, "chat.completion.chunk")
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, full.choices[0].message.content)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 10)
        self.assertEqual(chunks[-1].usage.prompt_tokens, full.usage.prompt_tokens)
        finishes = [ch.choices[0].finish_reason for ch in chunks
                    if ch.choices and ch.choices[0].finish_reason]
        self.assertEqual(finishes, ["length"])
        self.assertIsInstance(extra([ch for ch in chunks if ch.choices][-1], "kv"), dict)

    def test_chat_stop_and_length(self):
        kw = dict(model=SERVER.name, temperature=0,
                  messages=[{"role": "user", "content": CHAT_Q}])
        full = self.c.chat.completions.create(max_tokens=16, **kw).choices[0].message.content
        stop = " of "
        if stop not in full:
            self.skipTest(f"greedy answer {full!r} has no {stop!r}")
        r = self.c.chat.completions.create(max_tokens=16, stop=[stop], **kw)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].message.content, full[:full.index(stop)])
        r = self.c.chat.completions.create(max_completion_tokens=3, **kw)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 3)


class Errors(TimedTest):
    def bad(self, param, fn, **kw):
        with self.assertRaises(openai.BadRequestError) as cm:
            fn(**kw)
        e = cm.exception
        self.assertEqual(e.param, param, f"{e.body}")
        self.assertEqual(e.type, "invalid_request_error", f"{e.body}")
        self.assertEqual(e.code, "400", f"{e.body}")
        self.assertTrue(isinstance(e.body, dict) and e.body.get("message"), f"{e.body}")

    def test_bad_requests(self):
        comp, chat = self.c.completions.create, self.c.chat.completions.create
        msgs = [{"role": "user", "content": "hi"}]
        cases = [
            ("max_tokens", comp, dict(prompt=SHORT, max_tokens=0)),
            ("temperature", comp, dict(prompt=SHORT, temperature=-1)),
            ("top_p", comp, dict(prompt=SHORT, top_p=0)),
            ("top_p", comp, dict(prompt=SHORT, top_p=1.5)),
            ("n", comp, dict(prompt=SHORT, n=65)),
            ("best_of", comp, dict(prompt=SHORT, best_of=2)),
            # logprobs and echo are supported (tests/server/test_openai_sampling.py); out of range:
            ("logprobs", comp, dict(prompt=SHORT, logprobs=21)),
            ("echo", comp, dict(prompt=SHORT, echo="yes")),
            ("kv_policy", comp, dict(prompt=SHORT, extra_body={"kv_policy": "bogus"})),
            ("kv_budget", comp, dict(prompt=SHORT, extra_body={"kv_budget": -1})),
            ("kv_window", comp, dict(prompt=SHORT, extra_body={"kv_window": -5})),
            ("prompt", comp, dict(prompt=[1, 2, 10 ** 9])),
            ("prompt", comp, dict(prompt=long_text(9000))),
            ("max_tokens", comp, dict(prompt=SHORT, max_tokens=8190)),
            ("messages", chat, dict(messages=[])),
            ("messages", chat, dict(messages=[{"role": "wizard", "content": "hi"}])),
            ("max_tokens", chat, dict(messages=msgs, max_tokens=0)),
            ("top_logprobs", chat, dict(messages=msgs, logprobs=True, top_logprobs=21)),
        ]
        for param, fn, kw in cases:
            with self.subTest(param=param, body=str(kw)[:80]):
                self.bad(param, fn, model=SERVER.name, **kw)

    def test_unknown_model(self):
        for fn, kw in ((self.c.completions.create, dict(prompt=SHORT)),
                       (self.c.chat.completions.create,
                        dict(messages=[{"role": "user", "content": "hi"}]))):
            with self.assertRaises(openai.NotFoundError) as cm:
                fn(model="no-such-model", max_tokens=2, **kw)
            self.assertEqual(cm.exception.param, "model", f"{cm.exception.body}")
            self.assertEqual(cm.exception.code, "404", f"{cm.exception.body}")

    def test_raw_http_errors(self):
        j = {"Content-Type": "application/json"}
        status, body, h = SERVER.raw("POST", "/v1/completions", "{not json", j)
        self.assertEqual(status, 400, body)
        self.assertIn("application/json", h.get("content-type", ""))
        err = json.loads(body)["error"]
        self.assertEqual(err["type"], "invalid_request_error")
        self.assertEqual(err["code"], 400)
        status, body, _ = SERVER.raw("POST", "/v1/completions", "[1, 2]", j)
        self.assertEqual(status, 400, body)
        status, body, _ = SERVER.raw("POST", "/v1/completions", json.dumps({"max_tokens": 2}), j)
        self.assertEqual(status, 400, body)
        self.assertEqual(json.loads(body)["error"]["param"], "prompt")
        status, body, _ = SERVER.raw("GET", "/v1/nope")
        self.assertEqual(status, 404, body)
        self.assertEqual(json.loads(body)["error"]["type"], "not_found_error")
        status, body, h = SERVER.raw("GET", "/v1/completions")
        self.assertEqual(status, 405, body)
        self.assertIn("POST", h.get("allow", ""))
        status, body, _ = SERVER.raw("POST", "/health")
        self.assertEqual(status, 405, body)


class Metrics(TimedTest):
    GAUGES = ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
              "kv_cache_free_blocks", "kv_cache_total_blocks", "kv_cache_bytes_held",
              "kv_cache_bytes_saved", "kv_cache_cached_blocks", "kv_cache_cached_free_blocks"]
    COUNTERS = ["num_preemptions_total", "prompt_tokens_total", "generation_tokens_total",
                "request_success_total", "kv_bytes_saved_total", "prefix_cache_queries_total",
                "prefix_cache_hits_total"]
    HISTOGRAMS = ["time_to_first_token_seconds", "inter_token_latency_seconds",
                  "e2e_request_latency_seconds", "request_kv_kept_share"]

    def test_names_and_format(self):
        ms, text, headers = SERVER.metrics()
        ctype = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        self.assertIn("text/plain", ctype)
        self.assertIn("version=0.0.4", ctype)
        for g in self.GAUGES + self.COUNTERS:
            metric(ms, "adakv:" + g)
        for h in self.HISTOGRAMS:
            metric(ms, f"adakv:{h}_sum")
            metric(ms, f"adakv:{h}_count")
            buckets = [k for k in ms if k.startswith(f"adakv:{h}_bucket{{")]
            self.assertTrue(any('le="+Inf"' in b for b in buckets), f"{h}: no +Inf bucket")
        self.assertLessEqual(metric(ms, "adakv:kv_cache_free_blocks"),
                             metric(ms, "adakv:kv_cache_total_blocks"))
        self.assertGreater(metric(ms, "adakv:kv_cache_total_blocks"), 0)
        u = metric(ms, "adakv:kv_cache_usage_perc")
        self.assertTrue(0.0 <= u <= 1.0, u)
        for reason in ("stop", "length", "abort"):
            self.assertIn(f'adakv:request_success_total{{finished_reason="{reason}"}}', ms)
        # /metrics needs no key and is not JSON
        self.assertIn("# TYPE adakv:num_preemptions_total counter", text)

    def wait_counters(self, before, want, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            ms, _, _ = SERVER.metrics()
            got = {k: metric(ms, k) - before[k] for k in want}
            if got == want or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    def test_counters_move(self):
        names = ["adakv:prompt_tokens_total", "adakv:generation_tokens_total",
                 'adakv:request_success_total{finished_reason="length"}',
                 "adakv:e2e_request_latency_seconds_count",
                 "adakv:time_to_first_token_seconds_count",
                 "adakv:request_kv_kept_share_count"]
        ms, _, _ = SERVER.metrics()
        before = {k: metric(ms, k) for k in names}
        r = client().completions.create(model=SERVER.name, prompt=SHORT, max_tokens=6,
                                        temperature=0, extra_body={"ignore_eos": True})
        want = {names[0]: r.usage.prompt_tokens, names[1]: r.usage.completion_tokens,
                names[2]: 1, names[3]: 1, names[4]: 1, names[5]: 1}
        self.assertEqual(self.wait_counters(before, want), want)

    def test_kv_bytes_saved_moves(self):
        ms, _, _ = SERVER.metrics()
        before = metric(ms, "adakv:kv_bytes_saved_total")
        r = client().completions.create(model=SERVER.name, prompt=long_text(750, offset=2000),
                                        max_tokens=2, temperature=0,
                                        extra_body={"kv_policy": "snapkv", "kv_budget": 0.2})
        kv = extra(r, "kv")
        self.assertLess(kv["kept_bytes"], kv["full_bytes"])
        deadline = time.monotonic() + 5
        while True:
            ms, _, _ = SERVER.metrics()
            saved = metric(ms, "adakv:kv_bytes_saved_total") - before
            if saved == kv["full_bytes"] - kv["kept_bytes"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(saved, kv["full_bytes"] - kv["kept_bytes"])


class Disconnect(TimedTest):
    def idle_pool(self, timeout=15.0):
        deadline = time.monotonic() + timeout
        while True:
            ms, _, _ = SERVER.metrics()
            free = metric(ms, "adakv:kv_cache_free_blocks")
            total = metric(ms, "adakv:kv_cache_total_blocks")
            running = metric(ms, "adakv:num_requests_running")
            waiting = metric(ms, "adakv:num_requests_waiting")
            if (free == total and running == 0 and waiting == 0) or time.monotonic() > deadline:
                return free, total, running, waiting
            time.sleep(0.1)

    def open_stream(self, body):
        s = socket.create_connection((SERVER.host, SERVER.port), timeout=60)
        data = json.dumps(body).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
        return s

    def test_client_disconnects_mid_stream(self):
        body = {"model": SERVER.name, "prompt": long_text(300, offset=50), "max_tokens": 400,
                "temperature": 0, "ignore_eos": True, "stream": True}
        s = self.open_stream(body)
        got = b""
        while got.count(b"data: ") < 3:
            part = s.recv(4096)
            self.assertTrue(part, f"server closed the stream early: {got[-500:]!r}")
            got += part
        self.assertIn(b"200", got.split(b"\r\n", 1)[0])
        self.assertIn(b"text/event-stream", got.lower())
        ms, _, _ = SERVER.metrics()
        self.assertLess(metric(ms, "adakv:kv_cache_free_blocks"),
                        metric(ms, "adakv:kv_cache_total_blocks"), "a live stream holds no blocks")
        s.close()
        t0 = time.monotonic()
        free, total, running, waiting = self.idle_pool()
        self.assertEqual((free, running, waiting), (total, 0, 0),
                         f"{time.monotonic() - t0:.1f}s after the disconnect: free {free} of "
                         f"{total} blocks, {running} running, {waiting} waiting")
        # it still serves
        r = client().completions.create(model=SERVER.name, prompt=SHORT, max_tokens=3,
                                        temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 3)
        self.assertEqual(SERVER.get("/health")[0], 200)

    def test_client_disconnects_before_first_token(self):
        # a request whose client goes away while its (long) prompt is still being prefilled
        body = {"model": SERVER.name, "prompt": long_text(1500, offset=3000), "max_tokens": 50,
                "temperature": 0, "ignore_eos": True, "stream": True,
                "kv_policy": "full"}
        s = self.open_stream(body)
        time.sleep(0.2)
        s.close()
        free, total, running, waiting = self.idle_pool(timeout=30)
        self.assertEqual((free, running, waiting), (total, 0, 0))
        self.assertEqual(SERVER.get("/health")[0], 200)


class ApiKeyAndDrain(TimedTest):
    """A second server with --api-key and a short --drain-s: 401s, then SIGTERM mid-request."""

    def test_api_key_then_drain(self):
        key = "sk-test-key"
        srv = Server(ARGS.adakv, ARGS.tp, ["--kv-pool-mb", "256", "--api-key", key, "--drain-s", "2",
                                           "--max-body-mb", "0.01", "--max-header-kb", "2",
                                           "--timeout-s", "2"]
                     + shlex.split(ARGS.server_args), start_timeout_s=ARGS.start_timeout)
        try:
            # /health and /metrics need no key; /v1/* do
            self.assertEqual(srv.get("/health")[0], 200)
            self.assertEqual(srv.get("/metrics")[0], 200)
            status, body, _ = srv.raw("GET", "/v1/models")
            self.assertEqual(status, 401, body)
            self.assertEqual(json.loads(body)["error"]["type"], "authentication_error")
            c = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="wrong",
                              max_retries=0, timeout=60)
            with self.assertRaises(openai.AuthenticationError):
                c.completions.create(model=srv.name, prompt=SHORT, max_tokens=2)
            c = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key=key,
                              max_retries=0, timeout=120)
            self.assertEqual(c.models.list().data[0].id, srv.name)
            r = c.completions.create(model=srv.name, prompt=SHORT, max_tokens=2)
            self.assertEqual(r.usage.completion_tokens, 2)

            # limits: a body over --max-body-mb (10 KiB) -> 413, headers over --max-header-kb
            # (2 KiB) -> 431, headers not finished within --timeout-s (2 s) -> 408
            auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
            big = json.dumps({"prompt": "x " * 8000, "max_tokens": 1})
            self.assertEqual(srv.raw("POST", "/v1/completions", big, auth)[0], 413)
            self.assertEqual(srv.raw("GET", "/v1/models", None,
                                     dict(auth, **{"X-Filler": "y" * 4000}))[0], 431)
            with socket.create_connection((srv.host, srv.port), timeout=20) as sk:
                sk.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")  # never finished
                t0 = time.monotonic()
                answer = b""
                while True:
                    part = sk.recv(4096)
                    if not part:
                        break
                    answer += part
                self.assertIn(b" 408 ", answer.split(b"\r\n", 1)[0] + b" ",
                              f"after {time.monotonic() - t0:.1f}s: {answer[:200]!r}")
                self.assertLess(time.monotonic() - t0, 10)
            self.assertEqual(srv.get("/health")[0], 200)

            # SIGTERM while a long stream runs: it gets --drain-s (2 s) to finish, then ends with
            # finish_reason "abort"; the server exits 0.
            stream = c.completions.create(model=srv.name, prompt=SHORT, max_tokens=4000,
                                          temperature=0, stream=True,
                                          stream_options={"include_usage": True},
                                          extra_body={"ignore_eos": True, "kv_policy": "full"})
            it = iter(stream)
            first = next(it)
            self.assertTrue(first.choices)
            sig = signal.SIGUSR1 if ARGS.tp > 1 else signal.SIGTERM
            t0 = time.monotonic()
            srv.proc.send_signal(sig)
            time.sleep(0.3)
            try:
                status = srv.get("/health", timeout=5)[0]
            except OSError as e:
                status = f"refused ({e.__class__.__name__})"
            self.assertIn(status, (503,) if isinstance(status, int) else (status,),
                          "/health while draining")
            rest = list(it)
            waited = time.monotonic() - t0
            finishes = [ch.choices[0].finish_reason for ch in [first] + rest
                        if ch.choices and ch.choices[0].finish_reason]
            self.assertEqual(finishes, ["abort"], f"after {waited:.1f}s")
            self.assertEqual(rest[-1].choices, [])
            self.assertLess(rest[-1].usage.completion_tokens, 4000)
            self.assertLess(waited, 15, "the stream outlived --drain-s 2 by far")
            rc = srv.stop(sig, timeout_s=30, signalled=True)
            self.assertEqual(rc, 0, f"exit status after {sig.name}\n{srv.stderr()}")
        finally:
            srv.kill()


class QueueLimit(TimedTest):
    """A third server with --max-num-seqs 1 --max-queue 1: one request runs, one waits, the next
    is turned away with 429 and Retry-After; the two accepted ones still complete."""

    def test_429_past_max_queue(self):
        srv = Server(ARGS.adakv, ARGS.tp, ["--kv-pool-mb", "128", "--max-num-seqs", "1",
                                           "--max-queue", "1"] + shlex.split(ARGS.server_args),
                     start_timeout_s=ARGS.start_timeout)
        try:
            c = openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=300)
            body = dict(model=srv.name, prompt=SHORT, max_tokens=48, temperature=0, stream=True,
                        extra_body={"ignore_eos": True, "kv_policy": "full"})
            running = iter(c.completions.create(**body))
            next(running)  # the first request holds the only sequence slot
            results = {}

            def waiting_request():
                results["waiting"] = "".join(ch.choices[0].text for ch in
                                             c.completions.create(**body) if ch.choices)

            t = threading.Thread(target=waiting_request)
            t.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # until the second one is queued
                m = re.search(r"^adakv:num_requests_waiting (\S+)$", srv.get("/metrics")[1], re.M)
                if m and float(m.group(1)) >= 1:
                    break
                time.sleep(0.05)
            status, text, headers = srv.raw("POST", "/v1/completions",
                                            json.dumps({"prompt": SHORT, "max_tokens": 2}),
                                            {"Content-Type": "application/json"})
            self.assertEqual(status, 429, text)
            self.assertEqual(json.loads(text)["error"]["type"], "rate_limit_error")
            self.assertEqual(headers.get("retry-after"), "1")
            rest = list(running)
            self.assertEqual(rest[-1].choices[0].finish_reason, "length")
            t.join(timeout=300)
            self.assertTrue(results.get("waiting"), "the waiting request did not complete")
            self.assertEqual(srv.get("/health")[0], 200)
        finally:
            srv.kill()


# ---------------------------------------------------------------------------------------------


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    ap.add_argument("--adakv", default=os.path.join(REPO, "build", "adakv"))
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1,
                    help="pipeline stages of the server (and of the reference generate runs)")
    ap.add_argument("--dp", type=int, default=1,
                    help="n > 1: `adakv serve --dp n` (n replicas of --tp ranks under one mpirun)")
    ap.add_argument("--replicas", type=int, default=1,
                    help="n > 1: n servers behind `adakv router` (data-parallel replicas)")
    ap.add_argument("--kv-pool-mb", type=float, default=256)
    ap.add_argument("--server-args", default="", help="more flags for `adakv serve`")
    ap.add_argument("--start-timeout", type=float, default=120)
    ap.add_argument("--stop-signal", default="auto", choices=["auto", "TERM", "INT", "USR1"],
                    help="auto: SIGTERM to adakv at TP 1, SIGUSR1 to mpirun at TP > 1")
    ARGS, rest = ap.parse_known_args()
    ARGS.adakv = os.path.abspath(ARGS.adakv)
    t0 = time.monotonic()
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    slow = sorted(DURATIONS.items(), key=lambda kv: -kv[1])[:8]
    print("[test] slowest: " + ", ".join(f"{n} {d:.1f}s" for n, d in slow), file=sys.stderr)
    print(f"[test] {prog.result.testsRun} tests in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
