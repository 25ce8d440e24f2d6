#!/usr/bin/env python3
"""A streaming request that waits in the scheduler's queue gets its response header and an SSE
comment (": keep-alive") at once, and another comment every --sse-keepalive-s while it waits,
before its first token; a bad streaming request still gets a JSON 400, not a stream; the
official openai client reads a stream that began with comments as any other.

One server with --max-num-seqs 1: a long request holds the only sequence slot while the others
queue; closing it (an abort) lets them run.

  ~/.cache/adakv/venv/bin/python tests/server/test_stream_keepalive.py --adakv build/adakv
"""
import argparse
import json
import os
import re
import socket
import sys
import threading
import time
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_openai_api as base  # noqa: E402

ARGS = None
SERVER = None
KEEPALIVE_S = 1.0  # the server's --sse-keepalive-s here


class RawStream:
    """A POST over a plain socket, its chunked SSE body decoded as it arrives: the status, the
    headers, and each event with the seconds after the request was sent when it came."""

    def __init__(self, srv, path, body):
        self.sock = socket.create_connection((srv.host, srv.port), timeout=60)
        data = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {srv.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode()
        self.t0 = time.monotonic()
        self.sock.sendall(head + data)
        self.raw, self.body, self.sse = b"", b"", b""
        self.status, self.headers, self.header_at = None, {}, None
        self.events = []  # (seconds, event text without its blank line)
        self.ended = False

    def seconds(self):
        return time.monotonic() - self.t0

    def comments(self):
        return [e for e in self.events if e[1].startswith(":")]

    def data(self):
        return [e for e in self.events if not e[1].startswith(":")]

    def read_until(self, done, timeout):
        """Reads until done() or the timeout (then returns False) or the end of the response."""
        deadline = time.monotonic() + timeout
        while not done():
            if self.ended or time.monotonic() >= deadline:
                return done()
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                got = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not got:
                self.ended = True
                continue
            self.raw += got
            self._parse()
        return True

    def _parse(self):
        if self.status is None:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.raw[:end].decode("latin-1").split("\r\n")
            self.status = int(lines[0].split()[1])
            self.headers = {k.strip().lower(): v.strip()
                            for k, v in (ln.split(":", 1) for ln in lines[1:])}
            self.header_at = self.seconds()
            self.raw = self.raw[end + 4:]
        if self.headers.get("transfer-encoding") != "chunked":
            self.body += self.raw
            self.raw = b""
            return
        while True:  # complete chunks: size line, data, CRLF
            line_end = self.raw.find(b"\r\n")
            if line_end < 0:
                return
            size = int(self.raw[:line_end], 16)
            if len(self.raw) < line_end + 2 + size + 2:
                return
            chunk = self.raw[line_end + 2:line_end + 2 + size]
            self.raw = self.raw[line_end + 2 + size + 2:]
            if size == 0:
                self.ended = True
                return
            self.sse += chunk
            while b"\n\n" in self.sse:
                event, self.sse = self.sse.split(b"\n\n", 1)
                self.events.append((self.seconds(), event.decode("utf-8")))

    def close(self):
        self.sock.close()


def waiting_requests():
    m = re.search(r"^adakv:num_requests_waiting (\S+)$", SERVER.get("/metrics")[1], re.M)
    return float(m.group(1)) if m else -1


class QueuedStream(unittest.TestCase):
    def setUp(self):
        self.c = openai.OpenAI(base_url=SERVER.base_url, api_key="none", max_retries=0,
                               timeout=300)

    def hold_the_slot(self):
        """A long stream that runs in the only sequence slot (its first chunk read); close() it
        to free the slot."""
        stream = self.c.completions.create(
            model=SERVER.name, prompt=base.SHORT, max_tokens=4000, temperature=0, stream=True,
            extra_body={"ignore_eos": True, "kv_policy": "full"})
        next(iter(stream))
        return stream

    def wait_queued(self, n=1):
        deadline = time.monotonic() + 30
        while waiting_requests() < n:
            self.assertLess(time.monotonic(), deadline, "the request never queued")
            time.sleep(0.05)

    def test_queued_stream_gets_its_header_and_keepalives_before_its_first_token(self):
        holder = self.hold_the_slot()
        s = RawStream(SERVER, "/v1/completions",
                      {"model": SERVER.name, "prompt": base.SHORT, "max_tokens": 4,
                       "temperature": 0, "stream": True, "ignore_eos": True})
        try:
            self.assertTrue(s.read_until(lambda: s.events, timeout=30),
                            "no byte of the queued stream in 30 s")
            print(f"\nqueued stream: header after {s.header_at:.3f} s, first event "
                  f"{s.events[0][1]!r} after {s.events[0][0]:.3f} s", file=sys.stderr)
            self.assertEqual(s.status, 200)
            self.assertTrue(s.headers.get("content-type", "").startswith("text/event-stream"))
            self.assertLess(s.header_at, 2.0)
            self.assertTrue(s.events[0][1].startswith(":"), s.events[0][1])
            self.assertLess(s.events[0][0], 2.0)
            self.wait_queued()  # still waiting: what came was not its first token
            # More comments while it waits, about one per interval.
            s.read_until(lambda: len(s.events) >= 3, timeout=3 * KEEPALIVE_S + 2)
            self.assertEqual(s.data(), [], "a token came while the slot was held")
            times = [t for t, _ in s.comments()]
            self.assertGreaterEqual(len(times), 3, s.events)
            for a, b in zip(times, times[1:]):
                self.assertGreater(b - a, 0.5 * KEEPALIVE_S, times)
                self.assertLess(b - a, 2.5 * KEEPALIVE_S, times)
            holder.close()  # an abort: the slot frees and the queued request runs
            self.assertTrue(s.read_until(lambda: s.ended, timeout=120), "the stream never ended")
            data = [e for _, e in s.data()]
            self.assertEqual(data[-1], "data: [DONE]")
            chunks = [json.loads(e[len("data: "):]) for e in data[:-1]]
            self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
            self.assertTrue("".join(c["choices"][0]["text"] for c in chunks).strip(), chunks)
        finally:
            s.close()
            holder.close()

    def test_openai_client_reads_a_stream_that_began_with_keepalives(self):
        body = dict(model=SERVER.name, prompt=base.SHORT, max_tokens=6, temperature=0,
                    extra_body={"ignore_eos": True})
        expected = self.c.completions.create(**body).choices[0].text
        holder = self.hold_the_slot()
        got = {}

        def queued():
            try:
                chunks = list(self.c.completions.create(stream=True, **body))
                got["text"] = "".join(ch.choices[0].text for ch in chunks if ch.choices)
                got["finish"] = chunks[-1].choices[0].finish_reason
            except Exception as e:  # noqa: BLE001 - reported below
                got["error"] = e
        t = threading.Thread(target=queued)
        try:
            t.start()
            self.wait_queued()
            time.sleep(2.5 * KEEPALIVE_S)  # comments go out meanwhile
            self.assertEqual(got, {}, "the queued stream ended while the slot was held")
        finally:
            holder.close()
            t.join(120)
        self.assertNotIn("error", got, got.get("error"))
        self.assertEqual(got.get("text"), expected)
        self.assertEqual(got.get("finish"), "length")

    def test_bad_streaming_requests_still_get_a_json_400(self):
        holder = self.hold_the_slot()
        try:
            for body, param in (
                    ({"prompt": base.SHORT, "stream": True, "top_p": 0}, "top_p"),
                    # Within the context, but more KV blocks than the pool holds.
                    ({"prompt": base.SHORT, "stream": True, "max_tokens": 8000}, None)):
                with self.subTest(param=param):
                    s = RawStream(SERVER, "/v1/completions", body)
                    try:
                        self.assertTrue(s.read_until(lambda: s.ended, timeout=30))
                    finally:
                        s.close()
                    self.assertEqual(s.status, 400, s.body[:300])
                    self.assertTrue(s.headers.get("content-type", "").startswith(
                        "application/json"))
                    err = json.loads(s.body)["error"]
                    self.assertEqual(err["code"], 400)
                    if param:
                        self.assertEqual(err["param"], param)
                    else:
                        self.assertIn("KV pool", err["message"])
        finally:
            holder.close()


def main():
    global ARGS, SERVER
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    ap.add_argument("--adakv", default=os.path.join(base.REPO, "build", "adakv"))
    ap.add_argument("--start-timeout", type=float, default=120)
    ARGS, rest = ap.parse_known_args()
    base.ARGS = argparse.Namespace(adakv=ARGS.adakv, tp=1)
    SERVER = base.Server(ARGS.adakv, 1,
                         ["--kv-pool-mb", "128", "--max-num-seqs", "1",
                          "--sse-keepalive-s", str(KEEPALIVE_S)],
                         start_timeout_s=ARGS.start_timeout)
    try:
        prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    finally:
        SERVER.kill()
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
