#!/usr/bin/env python3
"""Compress once, ask many, through `adakv serve` and the official openai client.

- Questions about one document (chat: the document in the system message, one question per
  request, "kv_compress_context": true): the first request compresses the document without the
  question, the others prefill only their question (usage.prompt_tokens_details.cached_tokens,
  adakv:prefix_cache_hits_total), and every answer equals the answer of a server without
  caching, which compresses the same context from scratch for each request.
- A five-turn chat reuses its compressed context every turn (computed prompt tokens per turn
  printed); with policy full, prefix caching gives every turn the text it gets without caching.
- Mixed load (cached contexts, compressed and full prompts, two streams cut midway): once idle,
  free + cached-unreferenced blocks are the whole pool, on both servers.

  ~/.cache/adakv/venv/bin/python tests/server/test_compress_once.py --adakv build/adakv [--tp 3]
      [--pp 2] [--context-scoring window|output-aware|reconstruct]
  (--doc-words 5000 --questions 8 --kv-pool-mb 1024: the 6-7k-token acceptance run)
"""
import argparse
import json
import os
import socket
import sys
import threading
import time
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_openai_api as base  # noqa: E402

ARGS = None
CACHED = None    # the server under test (prefix caching on, the default)
UNCACHED = None  # the same server with --no-prefix-caching
CODES = [4821, 7306, 1957, 6634, 2498, 8813, 3072, 5560]


def document(n_words, keys):
    """n_words of prose with `keys` door codes spread through it."""
    words = base.long_text(n_words, offset=17).split()
    for k in reversed(range(keys)):
        at = (k + 1) * len(words) // (keys + 1)
        words.insert(at, f"The code of door {k + 1} is {CODES[k]}.")
    return " ".join(words)


def chat(srv, messages, compress=True, policy=None, max_tokens=12):
    """One greedy chat request; returns (text, usage)."""
    extra = {"kv_compress_context": True} if compress else {}
    if compress and ARGS.context_scoring:
        extra["kv_context_scoring"] = ARGS.context_scoring
    if policy:
        extra["kv_policy"] = policy
    c = openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=600)
    r = c.chat.completions.create(model=srv.name, messages=messages, max_tokens=max_tokens,
                                  temperature=0, extra_body=extra)
    return r.choices[0].message.content, r.usage


def prefix_counters(srv):
    ms, _, _ = srv.metrics()
    return (base.metric(ms, "adakv:prefix_cache_queries_total"),
            base.metric(ms, "adakv:prefix_cache_hits_total"))


def idle_pool(srv, timeout=60.0):
    """(free, total, running, waiting) once idle or at the timeout. Free counts the pool's free
    blocks (the worker's) plus the cached ones no request references (the scheduler's), so the
    two accounts must agree for free to reach the total."""
    deadline = time.monotonic() + timeout
    while True:
        ms, _, _ = srv.metrics()
        free = base.metric(ms, "adakv:kv_cache_free_blocks")
        total = base.metric(ms, "adakv:kv_cache_total_blocks")
        running = base.metric(ms, "adakv:num_requests_running")
        waiting = base.metric(ms, "adakv:num_requests_waiting")
        if (free == total and running == 0 and waiting == 0) or time.monotonic() > deadline:
            return free, total, running, waiting
        time.sleep(0.2)


class CompressOnce(unittest.TestCase):
    def test_questions_prefill_only_themselves_and_answer_as_from_scratch(self):
        doc = document(ARGS.doc_words, ARGS.questions)
        system = "Answer from this document.\n\n" + doc

        def ask(srv, k):
            msgs = [{"role": "system", "content": system},
                    {"role": "user", "content": f"What is the code of door {k + 1}?"}]
            t0 = time.monotonic()
            text, usage = chat(srv, msgs)
            return text, usage, time.monotonic() - t0

        q0, h0 = prefix_counters(CACHED)
        cached = [ask(CACHED, k) for k in range(ARGS.questions)]
        q1, h1 = prefix_counters(CACHED)
        scratch = [ask(UNCACHED, k) for k in range(ARGS.questions)]
        context = cached[1][1].prompt_tokens_details.cached_tokens
        print(f"\n  document context: {context} tokens; prompts {cached[0][1].prompt_tokens}.."
              f"{max(c[1].prompt_tokens for c in cached)}")
        right = 0
        for k, ((text, usage, s), (text0, usage0, s0)) in enumerate(zip(cached, scratch)):
            got = usage.prompt_tokens_details.cached_tokens
            print(f"  question {k + 1}: cached {got:5d} of {usage.prompt_tokens} prompt tokens, "
                  f"{s:5.2f}s (from scratch {s0:5.2f}s)  {text!r}")
            right += str(CODES[k]) in text
            self.assertEqual(got, 0 if k == 0 else context, f"question {k + 1}")
            self.assertEqual(usage0.prompt_tokens_details.cached_tokens, 0)
            self.assertEqual(text, text0, f"question {k + 1}: cached and from-scratch answers")
        print(f"  {right} of {ARGS.questions} codes right")
        self.assertGreater(context, 0.8 * cached[0][1].prompt_tokens)
        self.assertLess(context, cached[0][1].prompt_tokens)
        self.assertEqual(h1 - h0, (ARGS.questions - 1) * context, "prefix_cache_hits_total")
        self.assertGreaterEqual(q1 - q0, ARGS.questions * context, "prefix_cache_queries_total")

    def test_a_five_turn_chat_reuses_its_context(self):
        doc = document(ARGS.doc_words, 3)
        for policy in (None, "full"):
            msgs = [{"role": "system", "content": "Answer from this document.\n\n" + doc}]
            plain = list(msgs)
            print(f"\n  policy {policy or 'default'}:")
            for turn in range(5):
                q = f"What is the code of door {turn % 3 + 1}? Answer in a few words."
                msgs.append({"role": "user", "content": q})
                plain.append({"role": "user", "content": q})
                text, usage = chat(CACHED, msgs, compress=policy is None, policy=policy)
                cached = usage.prompt_tokens_details.cached_tokens
                print(f"  turn {turn + 1}: {usage.prompt_tokens} prompt tokens, {cached} cached, "
                      f"{usage.prompt_tokens - cached} computed")
                if turn > 0:
                    self.assertGreater(cached, 0.8 * usage.prompt_tokens, f"turn {turn + 1}")
                if policy == "full":
                    text0, usage0 = chat(UNCACHED, plain, compress=False, policy=policy)
                    self.assertEqual(usage0.prompt_tokens_details.cached_tokens, 0)
                    self.assertEqual(text, text0, f"turn {turn + 1}: with and without caching")
                msgs.append({"role": "assistant", "content": text})
                plain.append({"role": "assistant", "content": text})

    def test_the_pool_never_loses_a_block(self):
        doc = document(ARGS.doc_words // 2, 2)
        bodies = []
        for k in range(4):
            bodies.append({"messages": [{"role": "system", "content": doc},
                                        {"role": "user", "content": f"Door {k % 2 + 1}?"}],
                           "kv_compress_context": True})
            bodies.append({"messages": [{"role": "user", "content": base.long_text(150 + 40 * k)}],
                           "kv_policy": "full" if k % 2 else "adakv"})
        for srv in (CACHED, UNCACHED):
            errors = []

            def one(i):
                body = dict(bodies[i], model=srv.name, max_tokens=24, temperature=0,
                            ignore_eos=True, stream=i in (2, 5))
                try:
                    if body["stream"]:
                        cut_stream(srv, body)
                    else:
                        s, text, _ = srv.raw("POST", "/v1/chat/completions", json.dumps(body),
                                             {"Content-Type": "application/json"}, timeout=600)
                        if s != 200:
                            errors.append(f"request {i}: {s} {text[:300]}")
                except Exception as e:  # noqa: BLE001
                    errors.append(f"request {i}: {e!r}")

            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            free, total, running, waiting = idle_pool(srv)
            ms, _, _ = srv.metrics()
            print(f"\n  idle: free {free:.0f} of {total:.0f} blocks, of them cached (no request "
                  f"uses them) {base.metric(ms, 'adakv:kv_cache_cached_free_blocks'):.0f}")
            self.assertEqual((free, running, waiting), (total, 0, 0))


class BadFields(unittest.TestCase):
    def test_bad_context_fields_are_refused_by_name(self):
        chat1 = [{"role": "user", "content": "Hello there."}]
        chat2 = [{"role": "system", "content": "A document."}, {"role": "user", "content": "Q?"}]
        cases = [
            ("/v1/chat/completions", {"messages": chat2, "kv_compress_context": "yes"},
             "kv_compress_context"),
            ("/v1/chat/completions", {"messages": chat1, "kv_compress_context": True},
             "kv_compress_context"),
            ("/v1/chat/completions", {"messages": chat2, "kv_compress_context": True,
                                      "kv_context_tokens": 3}, "kv_context_tokens"),
            ("/v1/completions", {"prompt": "one two three four", "kv_compress_context": True},
             "kv_context_tokens"),
            ("/v1/completions", {"prompt": "one two three four", "kv_compress_context": True,
                                 "kv_context_tokens": 4000}, "kv_context_tokens"),
            ("/v1/completions", {"prompt": "one two three four", "kv_context_tokens": 2},
             "kv_context_tokens"),
            ("/v1/chat/completions", {"messages": chat2, "kv_compress_context": True,
                                      "kv_context_scoring": "query"}, "kv_context_scoring"),
            ("/v1/chat/completions", {"messages": chat2, "kv_compress_context": True,
                                      "kv_context_scoring": 1}, "kv_context_scoring"),
            ("/v1/chat/completions", {"messages": chat2, "kv_compress_context": True,
                                      "kv_context_policy": "streaming"}, "kv_context_policy"),
            ("/v1/chat/completions", {"messages": chat2, "kv_compress_context": True,
                                      "kv_context_policy": ["adakv"]}, "kv_context_policy"),
        ]
        for path, body, param in cases:
            with self.subTest(body=body):
                status, text, _ = CACHED.raw("POST", path, json.dumps(dict(body, max_tokens=2)),
                                             {"Content-Type": "application/json"})
                self.assertEqual(status, 400, text)
                self.assertEqual(json.loads(text)["error"]["param"], param, text)
        # A good completion with a stated context: its first tokens, cached the second time.
        body = {"prompt": base.long_text(120), "kv_compress_context": True,
                "kv_context_tokens": 100, "max_tokens": 2, "temperature": 0}
        got = []
        for _ in range(2):
            status, text, _ = CACHED.raw("POST", "/v1/completions", json.dumps(body),
                                         {"Content-Type": "application/json"})
            self.assertEqual(status, 200, text)
            got.append(json.loads(text)["usage"]["prompt_tokens_details"]["cached_tokens"])
        self.assertEqual(got, [0, 100])


def cut_stream(srv, body):
    """Opens a stream, reads two events, and closes the connection."""
    s = socket.create_connection((srv.host, srv.port), timeout=600)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    got = b""
    while got.count(b"data: ") < 2:
        part = s.recv(4096)
        if not part:
            break
        got += part
    s.close()


def main():
    global ARGS, CACHED, UNCACHED
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    ap.add_argument("--adakv", default=os.path.join(base.REPO, "build", "adakv"))
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--doc-words", type=int, default=700)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--kv-pool-mb", default="256")
    ap.add_argument("--context-scoring", default=None,
                    help="kv_context_scoring of every compressed context (default: the server's)")
    ap.add_argument("--start-timeout", type=float, default=120)
    ARGS, rest = ap.parse_known_args()
    base.ARGS = argparse.Namespace(adakv=ARGS.adakv, tp=ARGS.tp)
    common = ["--kv-pool-mb", ARGS.kv_pool_mb, "--kv-dtype", "f32"]
    CACHED = base.Server(ARGS.adakv, ARGS.tp, common, start_timeout_s=ARGS.start_timeout,
                         pp=ARGS.pp)
    try:
        UNCACHED = base.Server(ARGS.adakv, ARGS.tp, common + ["--no-prefix-caching"],
                               start_timeout_s=ARGS.start_timeout, pp=ARGS.pp)
        try:
            prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        finally:
            UNCACHED.kill()
    finally:
        CACHED.kill()
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
