#!/usr/bin/env python3
"""`adakv router` in front of two `adakv serve` replicas (data parallelism), through the
official `openai` client: 16 concurrent clients are all answered and spread over both
replicas; a replica killed mid-stream ends its own requests with errors while the other keeps
serving, and the router's /health and /metrics say so; questions about one compressed context
all go to the replica that caches it.

  ~/.cache/adakv/venv/bin/python tests/server/test_replica_router.py --adakv build/adakv
      [--kill-tokens N] [unittest options, e.g. -k test_16_clients]
"""
import argparse
import os
import signal
import sys
import threading
import time
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_openai_api as base  # noqa: E402

ARGS = None


def stream_text(c, name, max_tokens, prompt):
    """Streams one completion; returns (text, finish_reason) or raises on an error event."""
    text, finish = "", None
    for ch in c.completions.create(model=name, prompt=prompt, max_tokens=max_tokens,
                                   temperature=0, stream=True, extra_body={"ignore_eos": True}):
        for choice in ch.choices:
            text += choice.text or ""
            finish = choice.finish_reason or finish
    return text, finish


def run_clients(srv, n, max_tokens, on_started=None):
    """n concurrent streaming clients; returns [(text, finish) or the exception] in order."""
    results = [None] * n
    started = threading.Barrier(n + 1) if on_started else None

    def client(i):
        c = openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=300)
        try:
            if started:
                started.wait()
            results[i] = stream_text(c, srv.name, max_tokens, f"Story {i}: once upon a time")
        except Exception as e:  # noqa: BLE001 - the test inspects what each client saw
            results[i] = e
    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    if on_started:
        started.wait()
        on_started()
    for t in threads:
        t.join(600)
    return results


class Router(unittest.TestCase):
    def start(self):
        return base.RoutedServer(ARGS.adakv, 1, ["--kv-pool-mb", "256", "--threads", "1"], 2)

    def test_16_clients_all_answered_over_both_replicas(self):
        srv = self.start()
        try:
            t0 = time.monotonic()
            results = run_clients(srv, 16, 16)
            errors = [r for r in results if isinstance(r, Exception)]
            self.assertEqual(errors, [], f"{len(errors)} of 16 clients failed")
            self.assertTrue(all(f == "length" for _, f in results), results)
            ms = base.parse_metrics(srv.metrics()[1])
            routed = [ms[f'adakv:router_requests_total{{replica="{i}"}}'] for i in (0, 1)]
            done = base.metric(ms, "adakv:request_success_total")
            print(f"\n[test] 16 clients in {time.monotonic() - t0:.1f}s; routed {routed}; "
                  f"finished {done:.0f}", file=sys.stderr)
            self.assertEqual(sum(routed), 16)
            self.assertGreater(min(routed), 0, "one replica got every request")
            self.assertEqual(done, 16)
            self.assertEqual(srv.stop(signal.SIGTERM), 0)
        finally:
            srv.kill()

    def test_questions_about_one_context_go_where_it_is_cached(self):
        # Three documents; each is asked one question, then four at once. Routed by load alone,
        # the four would split over the replicas (ties go to fewer requests in flight) and
        # those sent to the other replica would compress the document again; routed by the
        # context, all find it cached.
        srv = self.start()
        try:
            c = openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0, timeout=300)

            def ask(system, q):
                r = c.chat.completions.create(
                    model=srv.name, max_tokens=2, temperature=0,
                    messages=[{"role": "system", "content": system},
                              {"role": "user", "content": f"Question {q}: who wrote it?"}],
                    extra_body={"kv_compress_context": True})
                return r.usage.prompt_tokens_details.cached_tokens

            for doc in range(3):
                system = f"Document {doc}. " + base.long_text(150, offset=40 * doc)
                self.assertEqual(ask(system, 0), 0, f"document {doc}")
                cached = [None] * 4

                def later(i):
                    cached[i] = ask(system, i + 1)
                threads = [threading.Thread(target=later, args=(i,)) for i in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(300)
                self.assertTrue(all(n and n > 0 for n in cached), f"document {doc}: {cached}")
            ms = base.parse_metrics(srv.metrics()[1])
            routed = [ms[f'adakv:router_requests_total{{replica="{i}"}}'] for i in (0, 1)]
            print(f"\n[test] 15 questions about 3 documents routed {routed}", file=sys.stderr)
            self.assertEqual(sum(routed), 15)
            self.assertTrue(all(n % 5 == 0 for n in routed), routed)
        finally:
            srv.kill()

    def test_a_killed_replica_fails_only_its_own_requests(self):
        srv = self.start()
        try:
            victim = srv.replicas[1]

            def kill_soon():
                time.sleep(1.5)
                os.killpg(victim.proc.pid, signal.SIGKILL)
            t0 = time.monotonic()
            results = run_clients(srv, 8, ARGS.kill_tokens, on_started=kill_soon)
            failed = [r for r in results if isinstance(r, Exception)]
            answered = [r for r in results if not isinstance(r, Exception)]
            print(f"\n[test] replica 1 killed after 1.5 s: {len(answered)} of 8 answered, "
                  f"{len(failed)} ended with an error ({time.monotonic() - t0:.1f}s): "
                  f"{[str(e)[:80] for e in failed[:2]]}", file=sys.stderr)
            self.assertGreater(len(failed), 0, "no request was on the killed replica")
            self.assertGreater(len(answered), 0, "the surviving replica answered nothing")
            self.assertTrue(all(f == "length" and len(t) > 0 for t, f in answered), answered)
            # The router takes new requests on the replica left, and says which one is down.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                ms = base.parse_metrics(srv.metrics()[1])
                if ms.get('adakv:router_replica_up{replica="1",url="http://%s:%d"}'
                          % (victim.host, victim.port)) == 0:
                    break
                time.sleep(0.2)
            else:
                self.fail("the router's /metrics never showed replica 1 down")
            self.assertEqual(srv.get("/health")[0], 200)
            after = run_clients(srv, 4, 8)
            self.assertEqual([r for r in after if isinstance(r, Exception)], [], after)
            srv.replicas = srv.replicas[:1]  # the killed one has no exit code to check
            self.assertEqual(srv.stop(signal.SIGTERM), 0)
        finally:
            srv.kill()


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    ap.add_argument("--adakv", default=os.path.join(base.REPO, "build", "adakv"))
    # What each request asks for while a replica is killed: enough to be still streaming 1.5 s
    # in (a sanitizer build, many times slower, needs fewer).
    ap.add_argument("--kill-tokens", type=int, default=400)
    ARGS, rest = ap.parse_known_args()
    ARGS.adakv = os.path.abspath(ARGS.adakv)
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
