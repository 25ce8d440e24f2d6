#!/usr/bin/env python3
"""Malformed and hostile requests against `adakv serve`, over raw sockets.

Starts the server itself (--port 0; the port comes from its `[adakv] serving NAME on
http://HOST:PORT` line on stderr), sends each case of the tables below and checks the status, the
OpenAI error body {"error": {"message", "type", "param", "code"}} and, where the contract says
so, the field named in `param` and whether the connection is closed. After every case the server
must still run and answer GET /health with 200. At the end it gets SIGTERM and must exit 0 within
its drain time, and its stderr must hold no sanitizer report.

Python 3 standard library only. Usage:
    python3 tests/server/bad_input_suite.py [--adakv build/adakv] [--only REGEX] [--list]
Exit status: 0 when every case passed, 1 otherwise.
"""

import argparse
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 2  # --timeout-s: slow headers and idle connections
MAX_BODY_MB = 1  # --max-body-mb
MAX_HEADER_KB = 16  # --max-header-kb
DRAIN_S = 5  # --drain-s
API_KEY = "sk-adakv-test-0123456789"
SANITIZER_MARKS = ("AddressSanitizer", "runtime error:", "LeakSanitizer")

ANY = object()  # expected param: not checked


class OneOf(tuple):
    """Expected param: any of these values."""

    def __new__(cls, *values):
        return super().__new__(cls, values)


# The contract's error type per status (statuses it does not name are not checked).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


# ---------------------------------------------------------------------------------------------
# HTTP/1.1 client on a raw socket


class ProtocolError(Exception):
    pass


class Response:
    def __init__(self, version, status, reason, headers, body):
        self.version, self.status, self.reason = version, status, reason
        self.headers = headers  # list of (lower-case name, value)
        self.body = body

    def header(self, name, default=None):
        for k, v in self.headers:
            if k == name:
                return v
        return default

    def json(self):
        return json.loads(self.body.decode("utf-8"))


def parse_response(buf, eof):
    """(Response, bytes consumed) from the front of buf, or None while more bytes are needed."""
    if len(buf) >= 5 and not buf.startswith(b"HTTP/"):
        raise ProtocolError("not an HTTP response: %r" % buf[:100])
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if eof and buf:
            raise ProtocolError("connection closed inside a response header: %r" % buf[:200])
        return None
    lines = buf[:end].split(b"\r\n")
    m = re.match(rb"HTTP/(\d\.\d) (\d{3})(?: (.*))?$", lines[0])
    if not m:
        raise ProtocolError("bad status line %r" % lines[0][:200])
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ProtocolError("bad response header line %r" % line[:200])
        headers.append((name.decode("latin-1").strip().lower(), value.decode("latin-1").strip()))
    resp = Response(m.group(1).decode(), int(m.group(2)), (m.group(3) or b"").decode("latin-1"),
                    headers, b"")
    pos = end + 4
    if 100 <= resp.status < 200 or resp.status in (204, 304):
        return resp, pos
    if "chunked" in (resp.header("transfer-encoding") or "").lower():
        body = []
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size_field = buf[pos:eol].split(b";")[0].strip()
            try:
                size = int(size_field, 16)
            except ValueError:
                raise ProtocolError("bad chunk size %r" % size_field[:50])
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", eol)  # no trailers: "0\r\n\r\n"
                if buf[eol:eol + 4] == b"\r\n\r\n":
                    trailer_end = eol
                if trailer_end < 0:
                    break
                resp.body = b"".join(body)
                return resp, trailer_end + 4
            if len(buf) < eol + 2 + size + 2:
                break
            body.append(buf[eol + 2:eol + 2 + size])
            if buf[eol + 2 + size:eol + 4 + size] != b"\r\n":
                raise ProtocolError("chunk not followed by CRLF")
            pos = eol + 4 + size
        if eof:
            raise ProtocolError("connection closed inside a chunked body")
        return None
    length = resp.header("content-length")
    if length is not None:
        n = int(length)
        if len(buf) - pos < n:
            if eof:
                raise ProtocolError("connection closed after %d of %d body bytes" %
                                    (len(buf) - pos, n))
            return None
        resp.body = buf[pos:pos + n]
        return resp, pos + n
    if not eof:  # body until the connection closes
        return None
    resp.body = buf[pos:]
    return resp, len(buf)


class Conn:
    def __init__(self, port, timeout=60):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.eof = False
        self.reset = False

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, deadline):
        """Reads more bytes; False at EOF (or reset). Raises socket.timeout past the deadline."""
        if self.eof:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("timed out")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(1 << 16)
        except ConnectionResetError:
            self.reset = True
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_response(self, timeout=60):
        """The next response, or None when the server closed the connection before any byte."""
        deadline = time.monotonic() + timeout
        while True:
            parsed = parse_response(self.buf, self.eof)
            if parsed:
                resp, used = parsed
                self.buf = self.buf[used:]
                if 100 <= resp.status < 200:
                    continue
                return resp
            if self.eof and not self.buf:
                return None
            self._fill(deadline)

    def closed_within(self, seconds):
        """(closed, bytes that arrived meanwhile): waits for EOF or a reset."""
        deadline = time.monotonic() + seconds
        extra = self.buf
        self.buf = b""
        try:
            while self._fill(deadline):
                extra += self.buf
                self.buf = b""
        except socket.timeout:
            return False, extra
        return True, extra

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def request(method, path, body=None, headers=(), version="HTTP/1.1", content_type=True):
    """Raw request bytes. body: bytes (sent as is) or a JSON value (dumped)."""
    lines = ["%s %s %s" % (method, path, version), "Host: 127.0.0.1"]
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
    if body is not None:
        if content_type:
            lines.append("Content-Type: application/json")
        lines.append("Content-Length: %d" % len(body))
    lines.extend(headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def post(path, body, headers=(), **kw):
    return request("POST", path, body, headers, **kw)


def get(path, headers=(), **kw):
    return request("GET", path, None, headers, **kw)


def completion(**fields):
    body = {"prompt": "Hi", "max_tokens": 1, "temperature": 0}
    body.update(fields)
    return body


def chat(**fields):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}
    body.update(fields)
    return body


def without(d, *keys):
    return {k: v for k, v in d.items() if k not in keys}


CMPL, CHAT = "/v1/completions", "/v1/chat/completions"


# ---------------------------------------------------------------------------------------------
# Response checks


def error_problems(resp, status):
    """What is wrong with an error response's body; and its param (ANY when unreadable)."""
    problems = []
    ct = resp.header("content-type") or ""
    if not ct.startswith("application/json"):
        problems.append("Content-Type %r" % ct)
    try:
        body = resp.json()
    except (ValueError, UnicodeDecodeError):
        return problems + ["body is not JSON: %r" % resp.body[:120]], ANY
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return problems + ["no 'error' object: %r" % resp.body[:120]], ANY
    missing = [k for k in ("message", "type", "param", "code") if k not in err]
    if missing:
        problems.append("error lacks %s" % ",".join(missing))
    if not isinstance(err.get("message"), str) or not err.get("message"):
        problems.append("message %r" % err.get("message"))
    want_type = ERROR_TYPES.get(status)
    if not isinstance(err.get("type"), str) or (want_type and err.get("type") != want_type):
        problems.append("type %r (want %r)" % (err.get("type"), want_type))
    param = err.get("param", ANY)
    if param is not ANY and param is not None and (not isinstance(param, str) or not param):
        problems.append("param %r (want a field name or null)" % (param,))
    code = err.get("code")
    if isinstance(code, bool) or code != status:
        problems.append("code %r (want %d)" % (code, status))
    return problems, param


def check_completion(resp):
    try:
        b = resp.json()
    except ValueError:
        return "body not JSON: %r" % resp.body[:120]
    if b.get("object") != "text_completion":
        return "object %r" % b.get("object")
    ch = b.get("choices") or [{}]
    if len(b.get("choices", [])) != 1 or not isinstance(ch[0].get("text"), str):
        return "choices %r" % b.get("choices")
    if ch[0].get("finish_reason") not in ("stop", "length"):
        return "finish_reason %r" % ch[0].get("finish_reason")
    u = b.get("usage") or {}
    if not all(isinstance(u.get(k), int) for k in ("prompt_tokens", "completion_tokens",
                                                     "total_tokens")):
        return "usage %r" % u
    if not isinstance(b.get("kv"), dict):
        return "no kv object"
    return None


def check_chat(resp):
    try:
        b = resp.json()
    except ValueError:
        return "body not JSON: %r" % resp.body[:120]
    if b.get("object") != "chat.completion":
        return "object %r" % b.get("object")
    ch = b.get("choices") or [{}]
    msg = ch[0].get("message") or {}
    if msg.get("role") != "assistant" or not isinstance(msg.get("content"), str):
        return "message %r" % msg
    if not isinstance(b.get("usage"), dict) or not isinstance(b.get("kv"), dict):
        return "usage/kv missing"
    return None


def check_models(resp):
    try:
        b = resp.json()
    except ValueError:
        return "body not JSON"
    if b.get("object") != "list" or not b.get("data") or b["data"][0].get("object") != "model":
        return "models body %r" % resp.body[:200]
    return None


def check_health(resp):
    return None if resp.body == b"" else "health body %r" % resp.body[:80]


def check_sse(resp):
    ct = resp.header("content-type") or ""
    if not ct.startswith("text/event-stream"):
        return "Content-Type %r" % ct
    text = resp.body.decode("utf-8", "replace")
    # Comments (": keep-alive") may come between events; clients skip them.
    events = [e for e in text.split("\n\n") if e.strip() and not e.startswith(":")]
    if not events or events[-1].strip() != "data: [DONE]":
        return "stream does not end with data: [DONE]: %r" % text[-120:]
    for e in events[:-1]:
        if not e.startswith("data: "):
            return "event %r" % e[:80]
        try:
            c = json.loads(e[6:])
        except ValueError:
            return "event not JSON %r" % e[:80]
        if c.get("object") != "text_completion":
            return "chunk object %r" % c.get("object")
    return None


def check_allow(methods):
    def check(resp):
        allow = resp.header("allow")
        if allow is None:
            return "no Allow header"
        have = {m.strip().upper() for m in allow.split(",")}
        return None if set(methods) <= have else "Allow %r (want %s)" % (allow, "/".join(methods))
    return check


# ---------------------------------------------------------------------------------------------
# Server


class Server:
    def __init__(self, binary, extra, label):
        self.binary, self.extra, self.label = binary, extra, label
        self.proc = None
        self.logs = []  # stderr files of every start (restarts after a crash included)

    def start(self, startup_s=180):
        log = tempfile.NamedTemporaryFile(prefix="adakv_serve_%s_" % self.label, suffix=".log",
                                          delete=False)
        self.logs.append(log.name)
        cmd = [self.binary, "serve", "--host", "127.0.0.1", "--port", "0",
               "--timeout-s", str(TIMEOUT_S), "--max-body-mb", str(MAX_BODY_MB),
               "--max-header-kb", str(MAX_HEADER_KB), "--drain-s", str(DRAIN_S)] + self.extra
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + startup_s
        while time.monotonic() < deadline:
            m = re.search(r"\[adakv\] serving (\S+) on http://([^\s:/]+):(\d+)", self.stderr())
            if m:
                self.name, self.port = m.group(1), int(m.group(3))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        tail = self.stderr()[-3000:]
        self.kill()
        raise RuntimeError("server did not start (%s)\n$ %s\n%s" %
                           ("exited rc=%s" % self.proc.returncode
                            if self.proc.returncode is not None else "no serving line",
                            " ".join(cmd), tail))

    def stderr(self):
        out = []
        for name in self.logs:
            with open(name, "rb") as f:
                out.append(f.read().decode("utf-8", "replace"))
        return "\n".join(out)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def status_kb(self, field):
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1])
        except OSError:
            pass
        return None

    def terminate(self):
        """(exit status, seconds) after SIGTERM; None status when it had to be killed."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(DRAIN_S + 30)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        return rc, time.monotonic() - t0

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def health(port, timeout=30):
    c = Conn(port, timeout)
    try:
        c.send(get("/health", ["Connection: close"]))
        r = c.read_response(timeout)
        return r.status if r else None
    finally:
        c.close()


def metrics(port):
    c = Conn(port, 30)
    try:
        c.send(get("/metrics", ["Connection: close"]))
        r = c.read_response(30)
    finally:
        c.close()
    values = {}
    for line in r.body.decode("utf-8", "replace").splitlines():
        m = re.match(r"^(adakv:[a-z_]+)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return values


# ---------------------------------------------------------------------------------------------
# Cases. Each: a name, what to send (bytes, or a function of the server giving bytes), the
# expected status (or tuple of acceptable ones), the expected error param (ANY: unchecked;
# OneOf(...): any of those), `closes`: the server must close the connection after answering,
# `check`: a function of the response returning a problem or None. Cases with a `runner` send
# and judge themselves (streamed uploads, stalls, pipelining).


class Case:
    def __init__(self, name, send=None, status=None, param=ANY, closes=False, check=None,
                 runner=None, timeout=None):
        self.name, self.send, self.status, self.param = name, send, status, param
        self.closes, self.check, self.runner = closes, check, runner
        # A request the server should refuse at once gets 10 s (a hang fails fast), one that
        # runs the model 60 s.
        self.timeout = timeout or (10 if closes or status in (405, 431) else 60)

    def expected(self):
        if self.runner and self.status is None:
            return self.runner.__doc__.strip().splitlines()[0] if self.runner.__doc__ else "-"
        s = "/".join(map(str, self.status)) if isinstance(self.status, tuple) else str(self.status)
        if self.param is not ANY:
            s += " param=" + ("|".join(repr(p) for p in self.param)
                              if isinstance(self.param, OneOf) else repr(self.param))
        if self.closes:
            s += " +close"
        return s


def run_plain(srv, case):
    """Sends case.send on a new connection; returns (got, problems)."""
    data = case.send(srv) if callable(case.send) else case.send
    c = Conn(srv.port, case.timeout)
    problems = []
    try:
        try:
            c.send(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading everything
        try:
            resp = c.read_response(case.timeout)
        except socket.timeout:
            return "no response within %ds" % case.timeout, ["timeout"]
        except ProtocolError as e:
            return "bad response: %s" % e, ["protocol"]
        if resp is None:
            return "connection closed without a response%s" % (" (reset)" if c.reset else ""), \
                ["no response"]
        got = str(resp.status)
        want = case.status if isinstance(case.status, tuple) else (case.status,)
        if resp.status not in want:
            problems.append("status")
            got += " body=%r" % resp.body[:100]
        param = ANY
        if resp.status >= 400:
            errs, param = error_problems(resp, resp.status)
            problems += errs
            if param is not ANY:
                got += " param=%r" % (param,)
        if case.param is not ANY and resp.status >= 400:
            allowed = case.param if isinstance(case.param, OneOf) else (case.param,)
            if param not in allowed:
                problems.append("param")
        if case.check and resp.status in want:
            p = case.check(resp)
            if p:
                problems.append(p)
        if case.closes:
            closed, extra = c.closed_within(3)
            if not closed or extra:
                problems.append("connection not closed" if not closed else
                                "bytes after the response: %r" % extra[:80])
            got += " +close" if closed else " (kept open)"
        return got, problems
    finally:
        c.close()


def P(name, path, body, status, param=ANY, **kw):
    """A POST case with a JSON body (or raw bytes)."""
    return Case(name, post(path, body), status, param, **kw)


def PM(name, path, body_of_srv, status, param=ANY, **kw):
    """A POST case whose JSON body depends on the server (its model name)."""
    return Case(name, lambda srv: post(path, body_of_srv(srv)), status, param, **kw)


# --- runners ---------------------------------------------------------------------------------


def stream_upload(srv, head, body_iter, timeout=60):
    """Sends head, then the body's pieces while watching for the answer. Returns (response or
    None, body bytes sent before the answer, whether the connection closed after it, the send
    error if sending failed: a broken pipe once the server answered and closed is fine)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(head)
    s.setblocking(False)
    pending = memoryview(b"")
    sent, buf, eof, send_err, resp, done = 0, b"", False, None, None, False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            want_write = send_err is None and not done
            r, w, _ = select.select([s], [s] if want_write else [], [], 0.5)
            if r:
                try:
                    data = s.recv(1 << 16)
                except ConnectionResetError:
                    data = b""
                if not data:
                    eof = True
                buf += data
                parsed = parse_response(buf, eof) if buf else None
                if parsed:
                    resp, used = parsed
                    buf = buf[used:]
                    break
                if eof:
                    break
            if w:
                if not len(pending):
                    try:
                        pending = memoryview(next(body_iter))
                    except StopIteration:
                        done = True
                        continue
                try:
                    n = s.send(pending)
                except BlockingIOError:
                    n = 0
                except (BrokenPipeError, ConnectionResetError) as e:
                    send_err, n = e.__class__.__name__, 0
                sent += n
                pending = pending[n:]
        closed = eof
        if resp is not None and not closed:
            end = time.monotonic() + 3
            while time.monotonic() < end:
                r, _, _ = select.select([s], [], [], 0.2)
                if r:
                    try:
                        data = s.recv(1 << 16)
                    except ConnectionResetError:
                        data = b""
                    if not data:
                        closed = True
                        break
        return resp, sent, closed, send_err
    finally:
        s.close()


def fill_chunks(total, size=1 << 16, byte=b"a"):
    block = byte * size
    sent = 0
    while sent < total:
        n = min(size, total - sent)
        yield block[:n]
        sent += n


def run_huge_body(srv, case):
    """413 +close, not buffered"""
    total = 100 << 20
    head = ("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            "\r\nContent-Length: %d\r\n\r\n" % total).encode()
    hwm0 = srv.status_kb("VmHWM")
    resp, sent, closed, send_err = stream_upload(srv, head, fill_chunks(total))
    hwm1 = srv.status_kb("VmHWM")
    problems = []
    if resp is None:
        return "no response (sent %d bytes%s)" % (sent, ", " + send_err if send_err else ""), \
            ["no response"]
    got = "%d after %.1f MB sent" % (resp.status, sent / 2**20)
    if resp.status != 413:
        problems.append("status")
    else:
        problems += error_problems(resp, 413)[0]
    if not closed:
        problems.append("connection not closed")
    got += " +close" if closed else " (kept open)"
    if sent >= total:
        problems.append("the whole body was read before answering")
    if hwm0 is not None and hwm1 is not None:
        grew = (hwm1 - hwm0) / 1024
        got += ", peak RSS +%.0f MB" % grew
        if grew > 40:
            problems.append("peak RSS grew by %.0f MB: the body was buffered" % grew)
    return got, problems


def run_chunked_over_limit(srv, case):
    """413 +close"""
    total = 8 << 20
    head = ("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            "\r\nTransfer-Encoding: chunked\r\n\r\n").encode()

    def chunks():
        for part in fill_chunks(total, 1 << 15):
            yield b"%x\r\n" % len(part) + part + b"\r\n"
        yield b"0\r\n\r\n"

    resp, sent, closed, send_err = stream_upload(srv, head, chunks())
    if resp is None:
        return "no response (sent %d bytes)" % sent, ["no response"]
    problems = [] if resp.status == 413 else ["status"]
    if resp.status == 413:
        problems += error_problems(resp, 413)[0]
    if not closed:
        problems.append("connection not closed")
    return "%d after %.1f MB +%s" % (resp.status, sent / 2**20, "close" if closed else "open"), \
        problems


def stall(srv, prefix, drip=None, allow_response=(408,), limit=2 * TIMEOUT_S + 1):
    """Sends prefix, then (drip) one more byte every 0.25 s, until the server answers or
    closes. Returns (got, problems): it must close within `limit` seconds (2x --timeout-s + 1 by
    default), having sent nothing or a 408."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    t0 = time.monotonic()
    buf, closed, closed_at, i = b"", False, None, 0
    try:
        s.sendall(prefix)
        while time.monotonic() - t0 < limit + 3:
            r, _, _ = select.select([s], [], [], 0.25)
            if r:
                try:
                    data = s.recv(1 << 16)
                except ConnectionResetError:
                    data = b""
                if not data:
                    closed, closed_at = True, time.monotonic() - t0
                    break
                buf += data
            elif drip:
                try:
                    s.send(drip[i % len(drip):i % len(drip) + 1])
                    i += 1
                except (BrokenPipeError, ConnectionResetError):
                    closed, closed_at = True, time.monotonic() - t0
                    break
    finally:
        s.close()
    problems = []
    got = ""
    if buf:
        try:
            parsed = parse_response(buf, True)
        except ProtocolError as e:
            parsed = None
            got = "garbage %r " % buf[:80]
            problems.append(str(e))
        if parsed:
            resp = parsed[0]
            got = "%d " % resp.status
            if resp.status not in allow_response:
                problems.append("status")
            else:
                problems += error_problems(resp, resp.status)[0]
    if closed:
        got += "closed after %.1fs" % closed_at
        if closed_at > limit:
            problems.append("closed late")
    else:
        got += "still open after %.1fs" % (time.monotonic() - t0)
        problems.append("not closed")
    return got, problems


def run_slow_headers(srv, case):
    """408 or close within 2x timeout"""
    return stall(srv, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")


def run_drip_headers(srv, case):
    """408 or close within 2x timeout"""
    return stall(srv, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: ",
                 drip=b"abcdefghijklmnopqrstuvwxyz")


def run_truncated_body(srv, case):
    """400/408 or close within 4x timeout"""
    head = post(CMPL, b"")
    head = head.replace(b"Content-Length: 0", b"Content-Length: 100") + b'{"prompt":'
    # The contract times headers only; the server gives a body a few times --timeout-s.
    return stall(srv, head, allow_response=(400, 408), limit=4 * TIMEOUT_S + 1)


def run_idle_keepalive(srv, case):
    """200, then closed silently within 2x timeout"""
    c = Conn(srv.port, 30)
    try:
        c.send(get("/health"))
        r = c.read_response(30)
        if r is None or r.status != 200:
            return "first response %s" % (r.status if r else None), ["status"]
        t0 = time.monotonic()
        closed, extra = c.closed_within(2 * TIMEOUT_S + 1)
        got = "200, then %s after %.1fs" % ("closed" if closed else "open",
                                            time.monotonic() - t0)
        problems = [] if closed else ["not closed"]
        if extra:
            problems.append("sent %r before closing (should close silently)" % extra[:60])
        return got, problems
    finally:
        c.close()


def pipeline(requests, checks, closes=False):
    """requests: list of bytes or functions of the server; checks: (status, check or None)."""
    def runner(srv, case):
        c = Conn(srv.port, 60)
        try:
            c.send(b"".join(r(srv) if callable(r) else r for r in requests))
            got, problems = [], []
            for status, check in checks:
                try:
                    resp = c.read_response(60)
                except (socket.timeout, ProtocolError) as e:
                    got.append("error:%s" % e)
                    problems.append("no response")
                    break
                if resp is None:
                    got.append("closed")
                    problems.append("missing response")
                    break
                got.append(str(resp.status))
                if resp.status != status:
                    problems.append("response %d: status %d, want %d, body %r" %
                                    (len(got), resp.status, status, resp.body[:100]))
                elif check:
                    p = check(resp)
                    if p:
                        problems.append("response %d: %s" % (len(got), p))
            if closes:
                closed, extra = c.closed_within(3)
                got.append("close" if closed else "open")
                if not closed or extra:
                    problems.append("connection not closed" if not closed else
                                    "more bytes: %r" % extra[:80])
            return ",".join(got), problems
        finally:
            c.close()
    runner.__doc__ = ",".join(str(s) for s, _ in checks) + (",close" if closes else "")
    return runner


def run_keepalive_after_error(srv, case):
    """400 then 200 on the same connection"""
    c = Conn(srv.port, 60)
    try:
        c.send(post(CMPL, b'{"prompt": '))
        r1 = c.read_response(60)
        if r1 is None:
            return "closed after the bad body", ["closed"]
        c.send(post(CMPL, completion()))
        r2 = c.read_response(60)
        got = "%d,%s" % (r1.status, r2.status if r2 else "closed")
        problems = []
        if r1.status != 400:
            problems.append("first status")
        if r2 is None or r2.status != 200:
            problems.append("second status")
        elif check_completion(r2):
            problems.append(check_completion(r2))
        return got, problems
    finally:
        c.close()


def run_disconnect_frees_kv(srv, case):
    """no leak: running 0 and free blocks back to total"""
    c = Conn(srv.port, 10)
    c.send(post(CMPL, completion(prompt="Tell me a long story about the sea.", max_tokens=3000,
                                 ignore_eos=True)))
    time.sleep(1.0)  # let it be scheduled and decode a little
    c.close()
    deadline = time.monotonic() + 30
    m = {}
    while time.monotonic() < deadline:
        m = metrics(srv.port)
        run = m.get("adakv:num_requests_running")
        free, total = m.get("adakv:kv_cache_free_blocks"), m.get("adakv:kv_cache_total_blocks")
        if run == 0 and free is not None and free == total:
            return "running=0 free=%d/%d" % (free, total), []
        time.sleep(0.5)
    return "after 30s: running=%s waiting=%s free=%s total=%s" % (
        m.get("adakv:num_requests_running"), m.get("adakv:num_requests_waiting"),
        m.get("adakv:kv_cache_free_blocks"), m.get("adakv:kv_cache_total_blocks")), \
        ["sequence not cancelled or KV blocks not returned"]


def run_disconnect_mid_body(srv, case):
    """no response; server unharmed"""
    c = Conn(srv.port, 10)
    c.send(post(CMPL, b"x" * 1000).split(b"\r\n\r\n")[0] + b"\r\n\r\n" + b'{"prompt": "Hi"')
    time.sleep(0.2)
    c.close()
    time.sleep(0.2)
    return "client gone", []


# --- the table --------------------------------------------------------------------------------

NESTED_ARRAYS = b"[" * 100000
NESTED_OBJECT = b'{"a":' * 10000 + b"1" + b"}" * 10000


def nest_field(depth):
    v = 1
    for _ in range(depth):
        v = [v]
    return v


LONG_TEXT = "hello " * 12000  # about 12000 tokens: over the 8192-token context
TOO_MANY_IDS = [28] * 9000


def main_cases(vocab):
    raw = lambda text: text if isinstance(text, bytes) else text.encode("latin-1")
    c = [
        # --- encoding and JSON syntax
        P("invalid UTF-8 in a JSON string", CMPL, b'{"prompt": "caf\xc3\x28 \xff\xfe", "max_tokens": 1}',
          400, OneOf(None, "prompt")),
        P("invalid UTF-8 in the raw body", CMPL, b'\xff\xfe\xfd{"prompt": "Hi", "max_tokens": 1}',
          400, None),
        P("overlong UTF-8 encoding in a string", CMPL,
          b'{"prompt": "\xc0\xaf\xe0\x80\xaf", "max_tokens": 1}', 400, OneOf(None, "prompt")),
        P("lone surrogate escape in a string", CMPL, b'{"prompt": "\\ud800x", "max_tokens": 1}',
          400, OneOf(None, "prompt")),
        P("UTF-8 encoded surrogate bytes", CMPL, b'{"prompt": "\xed\xa0\x80", "max_tokens": 1}',
          400, OneOf(None, "prompt")),
        P("valid non-ASCII and an escaped NUL", CMPL,
          completion(prompt="h\u00e9llo \u4e16\u754c \U0001F600 \u0000 end"), 200,
          check=check_completion),
        P("truncated JSON", CMPL, b'{"prompt": "Hi",', 400, None),
        P("JSON with trailing garbage", CMPL, b'{"prompt": "Hi", "max_tokens": 1} xyz', 400, None),
        P("two JSON documents", CMPL, b'{"prompt": "Hi"}{"prompt": "Hi"}', 400, None),
        P("JSON with comments", CMPL, b'{"prompt": "Hi" /* c */, "max_tokens": 1}', 400, None),
        P("body is a JSON array", CMPL, [1, 2], 400, None),
        P("body is a JSON string", CMPL, "hello", 400, None),
        P("body is JSON null", CMPL, b"null", 400, None),
        P("empty object: no prompt", CMPL, {}, 400, "prompt"),
        P("empty object: no messages", CHAT, {}, 400, "messages"),
        P("100000 nested arrays", CMPL, NESTED_ARRAYS, 400, None),
        P("nested object 10000 deep", CMPL, NESTED_OBJECT, 400, None),
        P("unknown field nested 70 deep", CMPL, completion(extra=nest_field(70)), 400, None),
        P("unknown field nested 20 deep (fine)", CMPL, completion(extra=nest_field(20)), 200,
          check=check_completion),
        P("number overflowing double (1e400)", CMPL,
          b'{"prompt": "Hi", "max_tokens": 1, "temperature": 1e400}', 400,
          OneOf(None, "temperature")),
        # --- max_tokens
        P("max_tokens -1", CMPL, completion(max_tokens=-1), 400, "max_tokens"),
        P("max_tokens 0", CMPL, completion(max_tokens=0), 400, "max_tokens"),
        P("max_tokens 1e12 (float)", CMPL, completion(max_tokens=1e12), 400, "max_tokens"),
        P("max_tokens 10**12", CMPL, completion(max_tokens=10**12), 400, "max_tokens"),
        P("max_tokens 2**64", CMPL, completion(max_tokens=2**64), 400, "max_tokens"),
        P("max_tokens 2**63", CMPL, completion(max_tokens=2**63), 400, "max_tokens"),
        P("max_tokens -2**63", CMPL, completion(max_tokens=-2**63), 400, "max_tokens"),
        P("max_tokens 1.5", CMPL, completion(max_tokens=1.5), 400, "max_tokens"),
        P("max_tokens \"5\"", CMPL, completion(max_tokens="5"), 400, "max_tokens"),
        P("max_tokens = context (prompt + max_tokens too long)", CMPL,
          completion(max_tokens=8192), 400, "max_tokens"),
        P("max_completion_tokens 0 (chat)", CHAT, chat(max_completion_tokens=0), 400,
          "max_completion_tokens"),
        # --- wrong types, out-of-range values
        P("prompt 5", CMPL, completion(prompt=5), 400, "prompt"),
        P("prompt null", CMPL, completion(prompt=None), 400, "prompt"),
        P("prompt an object", CMPL, completion(prompt={"text": "Hi"}), 400, "prompt"),
        P("messages \"x\"", CHAT, chat(messages="x"), 400, "messages"),
        P("messages []", CHAT, chat(messages=[]), 400, "messages"),
        P("temperature \"hot\"", CMPL, completion(temperature="hot"), 400, "temperature"),
        P("temperature -0.5", CMPL, completion(temperature=-0.5), 400, "temperature"),
        P("top_p 0", CMPL, completion(top_p=0), 400, "top_p"),
        P("top_p 1.5", CMPL, completion(top_p=1.5), 400, "top_p"),
        P("top_k \"a\"", CMPL, completion(top_k="a"), 400, "top_k"),
        P("top_k -2", CMPL, completion(top_k=-2), 400, "top_k"),
        P("seed 1.5", CMPL, completion(seed=1.5), 400, "seed"),
        P("seed \"1\"", CMPL, completion(seed="1"), 400, "seed"),
        P("stop 3", CMPL, completion(stop=3), 400, "stop"),
        P("stop [1]", CMPL, completion(stop=[1]), 400, "stop"),
        P("stop {}", CMPL, completion(stop={}), 400, "stop"),
        P("n 65", CMPL, completion(n=65), 400, "n"),
        P("best_of 2", CMPL, completion(best_of=2), 400, "best_of"),
        P("n 0", CMPL, completion(n=0), 400, "n"),
        P("n \"1\"", CMPL, completion(n="1"), 400, "n"),
        P("stream \"yes\"", CMPL, completion(stream="yes"), 400, "stream"),
        P("stream 1", CMPL, completion(stream=1), 400, "stream"),
        P("ignore_eos 1", CMPL, completion(ignore_eos=1), 400, "ignore_eos"),
        P("kv_policy \"bogus\"", CMPL, completion(kv_policy="bogus"), 400, "kv_policy"),
        P("kv_policy 5", CMPL, completion(kv_policy=5), 400, "kv_policy"),
        P("kv_budget -1", CMPL, completion(kv_budget=-1), 400, "kv_budget"),
        P("kv_budget \"abc\"", CMPL, completion(kv_budget="abc"), 400, "kv_budget"),
        P("kv_budget true", CMPL, completion(kv_budget=True), 400, "kv_budget"),
        P("kv_window 0", CMPL, completion(kv_window=0), 400, "kv_window"),
        P("kv_window 10**12", CMPL, completion(kv_window=10**12), 400, "kv_window"),
        P("kv_window \"8\"", CMPL, completion(kv_window="8"), 400, "kv_window"),
        P("chat: temperature \"hot\"", CHAT, chat(temperature="hot"), 400, "temperature"),
        P("stream with a bad field: a JSON 400, not a stream", CMPL,
          completion(stream=True, top_p=0), 400, "top_p"),
        # --- log probabilities: supported, within their ranges
        P("logprobs 21", CMPL, completion(logprobs=21), 400, "logprobs"),
        P("logprobs \"1\"", CMPL, completion(logprobs="1"), 400, "logprobs"),
        P("echo \"yes\"", CMPL, completion(echo="yes"), 400, "echo"),
        P("chat: logprobs 1", CHAT, chat(logprobs=1), 400, "logprobs"),
        P("chat: top_logprobs 21", CHAT, chat(logprobs=True, top_logprobs=21), 400,
          "top_logprobs"),
        P("logprobs 1 (fine)", CMPL, completion(logprobs=1), 200, check=check_completion),
        P("echo true (fine)", CMPL, completion(echo=True), 200, check=check_completion),
        P("chat: logprobs true (fine)", CHAT, chat(logprobs=True), 200, check=check_chat),
        # --- sampling fields out of range
        P("presence_penalty -3", CMPL, completion(presence_penalty=-3), 400, "presence_penalty"),
        P("frequency_penalty 2.5", CMPL, completion(frequency_penalty=2.5), 400,
          "frequency_penalty"),
        P("logit_bias outside the vocabulary", CMPL, completion(logit_bias={"50256": 5}), 400,
          "logit_bias"),
        P("logit_bias 200", CMPL, completion(logit_bias={"5": 200}), 400, "logit_bias"),
        P("logit_bias a list", CMPL, completion(logit_bias=[1, 2]), 400, "logit_bias"),
        P("repetition_penalty 0", CMPL, completion(repetition_penalty=0), 400,
          "repetition_penalty"),
        P("min_p -0.1", CMPL, completion(min_p=-0.1), 400, "min_p"),
        P("min_tokens 1.5", CMPL, completion(min_tokens=1.5), 400, "min_tokens"),
        P("stop_token_ids [\"a\"]", CMPL, completion(stop_token_ids=["a"]), 400,
          "stop_token_ids"),
        P("logprobs false (fine)", CMPL, completion(logprobs=False, echo=False), 200,
          check=check_completion),
        # --- unknown fields, model
        P("unknown fields are ignored", CMPL,
          completion(foo={"bar": [1, None, "x"]}, user="u1", frequency_penalty=0.0,
                     presence_penalty=0.0, best_of=1, suffix=None), 200, check=check_completion),
        P("chat: unknown fields are ignored", CHAT,
          chat(foo=[1, 2], user="u1", x_adakv_unknown={"a": None}), 200, check=check_chat),
        P("unknown model", CMPL, completion(model="gpt-4-nonexistent"), 404,
          OneOf("model", None)),
        P("chat: unknown model", CHAT, chat(model="../../etc/passwd"), 404, OneOf("model", None)),
        P("model 5", CMPL, completion(model=5), (400, 404), OneOf("model", None)),
        PM("the served model name (fine)", CMPL, lambda srv: completion(model=srv.name), 200,
           check=check_completion),
        # --- prompts
        P("prompt longer than the context (text)", CMPL, completion(prompt=LONG_TEXT), 400,
          "prompt"),
        P("prompt longer than the context (ids)", CMPL, completion(prompt=TOO_MANY_IDS), 400,
          "prompt"),
        P("chat: messages longer than the context", CHAT,
          chat(messages=[{"role": "user", "content": LONG_TEXT}]), 400, "messages"),
        P("token id = vocab size", CMPL, completion(prompt=[1, vocab]), 400, "prompt"),
        P("token id -1", CMPL, completion(prompt=[-1]), 400, "prompt"),
        P("token id 2**31", CMPL, completion(prompt=[2**31]), 400, "prompt"),
        P("token id 2**32 + 1", CMPL, completion(prompt=[2**32 + 1]), 400, "prompt"),
        P("token id 2**64", CMPL, completion(prompt=[2**64]), 400, "prompt"),
        P("token id 1.5", CMPL, completion(prompt=[1.5]), 400, "prompt"),
        P("token ids mixed with a string", CMPL, completion(prompt=[1, "a"]), 400, "prompt"),
        P("two token id lists (a batch)", CMPL, completion(prompt=[[1, 2], [3, 4]]), 400,
          "prompt"),
        P("list of lists of token ids", CMPL, completion(prompt=[[[1, 2]]]), 400, "prompt"),
        P("valid token ids (fine)", CMPL, completion(prompt=[19556, 28]), 200,
          check=check_completion),
        P("empty prompt \"\"", CMPL, completion(prompt=""), 400, "prompt"),
        P("empty prompt []", CMPL, completion(prompt=[]), 400, "prompt"),
        P("prompt [\"\"]", CMPL, completion(prompt=[""]), 400, "prompt"),
        P("prompt: list of one string (fine)", CMPL, completion(prompt=["Hi"]), 200,
          check=check_completion),
        P("prompt: list of two strings", CMPL, completion(prompt=["Hi", "there"]), 400, "prompt"),
        # --- messages
        P("role \"tool\"", CHAT, chat(messages=[{"role": "tool", "content": "x"}]), 400,
          "messages"),
        P("role 5", CHAT, chat(messages=[{"role": 5, "content": "x"}]), 400, "messages"),
        P("message without a role", CHAT, chat(messages=[{"content": "x"}]), 400, "messages"),
        P("message not an object", CHAT, chat(messages=["Hi"]), 400, "messages"),
        P("content 5", CHAT, chat(messages=[{"role": "user", "content": 5}]), 400, "messages"),
        P("content null", CHAT, chat(messages=[{"role": "user", "content": None}]), 400,
          "messages"),
        P("content an object", CHAT, chat(messages=[{"role": "user", "content": {"a": 1}}]), 400,
          "messages"),
        P("content: image part", CHAT,
          chat(messages=[{"role": "user", "content": [
              {"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}}]}]),
          400, "messages"),
        P("content: text part with a number", CHAT,
          chat(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]), 400,
          "messages"),
        P("content: list of text parts (fine)", CHAT,
          chat(messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]), 200,
          check=check_chat),
        P("chat: special tokens in content (fine)", CHAT,
          chat(messages=[{"role": "user", "content": "<|im_end|><|im_start|>system\nx"}]), 200,
          check=check_chat),
        P("stream true, 2 tokens (fine)", CMPL, completion(stream=True, max_tokens=2), 200,
          check=check_sse),
        # --- routes and methods
        Case("unknown route GET /v1/nope", get("/v1/nope"), 404),
        Case("unknown route GET /", get("/"), 404),
        Case("unknown route POST /v1/embeddings", post("/v1/embeddings", {"input": "x"}), 404),
        Case("path traversal", get("/../../../etc/passwd"), (400, 404)),
        Case("GET /v1/completions", get(CMPL), 405, check=check_allow(["POST"])),
        Case("DELETE /v1/chat/completions", request("DELETE", CHAT), 405,
             check=check_allow(["POST"])),
        Case("POST /health", post("/health", {}), 405, check=check_allow(["GET"])),
        Case("PUT /v1/models", request("PUT", "/v1/models", {}), 405,
             check=check_allow(["GET"])),
        # --- request line and headers
        Case("bad method token G@T", raw("G@T /health HTTP/1.1\r\nHost: x\r\n\r\n"), 400,
             closes=True),
        Case("garbage request line", raw("hello there\r\n\r\n"), 400, closes=True),
        Case("binary garbage (TLS hello)", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" +
             bytes(range(256)) + b"\r\n\r\n", 400, closes=True),
        Case("request line without a version", raw("GET /health\r\n\r\n"), 400, closes=True),
        Case("request line with 4 parts", raw("GET /health HTTP/1.1 x\r\nHost: x\r\n\r\n"), 400,
             closes=True),
        Case("header line without a colon", raw("GET /health HTTP/1.1\r\nHost: x\r\nBroken\r\n\r\n"),
             400, closes=True),
        Case("space before a header colon", raw(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\n{}{}{"),
            400, closes=True),
        Case("Content-Length abc", raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                       "Content-Length: abc\r\n\r\n{}"), 400, closes=True),
        Case("Content-Length -5", raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                      "Content-Length: -5\r\n\r\n{}"), 400, closes=True),
        Case("Content-Length 10**25", raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                          "Content-Length: 10000000000000000000000000\r\n\r\n{}"),
             (400, 413), closes=True),
        Case("two different Content-Lengths", raw(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
            "Content-Length: 3\r\n\r\n{}}"), 400, closes=True),
        Case("bad chunk size", raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
             400, closes=True),
        Case("Transfer-Encoding gzip", raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                           "Transfer-Encoding: gzip\r\n\r\n{}"),
             (400, 501), closes=True),
        Case("Transfer-Encoding gzip: the body is not a request", raw(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"
            "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"), (400, 501), closes=True),
        Case("Content-Length and chunked together", raw(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
            "Transfer-Encoding: chunked\r\n\r\n") + b"%x\r\n%s\r\n0\r\n\r\n" % (
                len(json.dumps(completion())), json.dumps(completion()).encode()),
             (200, 400), closes=True),
        Case("a 20 KB header", get("/health", ["X-Big: " + "a" * 20000]), 431),
        Case("1000 headers (30 KB)", get("/health", ["X-H%d: %s" % (i, "v" * 20)
                                                      for i in range(1000)]), 431),
        Case("a 20 KB URL", get("/" + "a" * 20000), (400, 414, 431)),
        Case("unknown method BREW", request("BREW", "/health"), (400, 405, 501)),
        # --- bodies
        Case("POST without a body or Content-Length", raw(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n"),
            (400, 411), OneOf(None, "prompt")),
        P("POST with Content-Length 0", CMPL, b"", 400, OneOf(None, "prompt")),
        Case("chunked body (fine)", raw(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n") + b"".join(
                b"%x\r\n%s\r\n" % (len(p), p) for p in
                [b'{"prompt": ', b'"Hi", "max', b'_tokens": 1, "temperature": 0}']) +
             b"0\r\n\r\n", 200, check=check_completion),
        Case("chunked body with extensions and a trailer (fine)", raw(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n") +
             b'10;ext=1\r\n{"prompt": "Hi",\r\n' + b'1c\r\n "max_tokens": 1, "seed": 7}\r\n' +
             b"0\r\nX-Trailer: y\r\n\r\n", 200, check=check_completion),
        Case("Expect: 100-continue, body sent at once (fine)",
             post(CMPL, completion(), ["Expect: 100-continue"]), 200, check=check_completion),
        P("body of 0.9 MB (under the limit)", CMPL,
          b'{"prompt": "Hi", "max_tokens": 1' + b" " * 900000 + b"}", 200,
          check=check_completion),
        P("body of 1.1 MB (over the limit)", CMPL,
          b'{"prompt": "Hi", "max_tokens": 1' + b" " * 1100000 + b"}", 413, closes=True),
        Case("100 MB body, streamed", runner=run_huge_body),
        Case("8 MB chunked body, streamed", runner=run_chunked_over_limit),
        Case("client gone mid-body", runner=run_disconnect_mid_body),
        # --- connection handling
        Case("HTTP/1.0 GET without keep-alive", raw("GET /health HTTP/1.0\r\n\r\n"), 200,
             closes=True),
        Case("HTTP/1.0 POST without keep-alive", post(CMPL, completion(), version="HTTP/1.0"),
             200, closes=True, check=check_completion),
        Case("HTTP/1.1 Connection: close", get("/v1/models", ["Connection: close"]), 200,
             closes=True, check=check_models),
        Case("pipelined: 2 GETs", runner=pipeline(
            [get("/health"), get("/v1/models")], [(200, check_health), (200, check_models)])),
        Case("pipelined: completion, chat, models", runner=pipeline(
            [post(CMPL, completion()), post(CHAT, chat()), get("/v1/models")],
            [(200, check_completion), (200, check_chat), (200, check_models)])),
        Case("pipelined: a JSON error in the middle", runner=pipeline(
            [get("/health"), post(CMPL, b'{"prompt":'), post(CMPL, completion())],
            [(200, check_health), (400, None), (200, check_completion)])),
        Case("pipelined: last has Connection: close", runner=pipeline(
            [get("/health"), get("/health", ["Connection: close"])],
            [(200, None), (200, None)], closes=True)),
        Case("pipelined: then a garbage request", runner=pipeline(
            [get("/health"), b"BOGUS\r\n\r\n", get("/health")],
            [(200, None), (400, None)], closes=True)),
        Case("keep-alive after a JSON error", runner=run_keepalive_after_error),
        Case("slow headers (stalled)", runner=run_slow_headers),
        Case("slow headers (one byte every 0.25 s)", runner=run_drip_headers),
        Case("body shorter than Content-Length", runner=run_truncated_body),
        Case("idle keep-alive connection", runner=run_idle_keepalive),
        Case("client gone mid-generation frees its KV", runner=run_disconnect_frees_kv,
             timeout=60),
        # Last: a server that cannot schedule it might hold up everything after it.
        P("prompt bigger than the KV pool, within the context", CMPL,
          completion(prompt=[28] * 3000), (200, 400), OneOf("prompt", None), timeout=180),
    ]
    return c


def auth(key):
    return ["Authorization: Bearer " + key]


def auth_cases():
    return [
        P("api-key: none", CMPL, completion(), 401),
        Case("api-key: wrong", post(CMPL, completion(), auth("wrong")), 401),
        Case("api-key: right key plus a suffix", post(CMPL, completion(), auth(API_KEY + "x")),
             401),
        Case("api-key: a prefix of the key", post(CMPL, completion(), auth(API_KEY[:-1])), 401),
        Case("api-key: empty bearer", post(CMPL, completion(), ["Authorization: Bearer "]), 401),
        Case("api-key: Basic scheme", post(CMPL, completion(), ["Authorization: Basic " +
                                                               API_KEY]), 401),
        Case("api-key: raw key, no scheme", post(CMPL, completion(), ["Authorization: " +
                                                                     API_KEY]), 401),
        Case("api-key: right (completion)", post(CMPL, completion(), auth(API_KEY)), 200,
             check=check_completion),
        Case("api-key: right (chat)", post(CHAT, chat(), auth(API_KEY)), 200, check=check_chat),
        Case("api-key: GET /v1/models without", get("/v1/models"), 401),
        Case("api-key: GET /v1/models with", get("/v1/models", auth(API_KEY)), 200,
             check=check_models),
        Case("api-key: /health needs none", get("/health"), 200),
        Case("api-key: /metrics needs none", get("/metrics"), 200),
        Case("api-key: bad JSON without a key", post(CMPL, b"{"), 401),
    ]


def chat_template_cases():
    """Under --chat-template mistral-v1, whose template takes alternating turns only."""
    def turns(*roles):
        return chat(messages=[{"role": r, "content": "x"} for r in roles])
    return [
        P("mistral-v1: user, user", CHAT, turns("user", "user"), 400, "messages"),
        P("mistral-v1: assistant first", CHAT, turns("assistant", "user"), 400, "messages"),
        P("mistral-v1: system after user", CHAT, turns("user", "system"), 400, "messages"),
        P("mistral-v1: system, user, assistant, user", CHAT,
          turns("system", "user", "assistant", "user"), 200, check=check_chat),
    ]


# ---------------------------------------------------------------------------------------------


def run_section(srv, cases, only, results):
    for case in cases:
        if only and not re.search(only, case.name):
            continue
        t0 = time.monotonic()
        try:
            if case.runner:
                got, problems = case.runner(srv, case)
            else:
                got, problems = run_plain(srv, case)
        except Exception as e:  # the client side failed: a broken case or a broken server
            got, problems = "client error %s: %s" % (e.__class__.__name__, e), ["exception"]
        # The server must survive every case and stay healthy.
        if not srv.alive():
            problems.append("SERVER DIED rc=%s" % srv.proc.returncode)
            got += " | server died rc=%s" % srv.proc.returncode
            tail = srv.stderr()[-2500:]
            print("----- server stderr tail -----\n%s\n------------------------------" % tail)
            srv.start()
        else:
            try:
                h = health(srv.port, 30)
            except Exception as e:
                h = "%s" % e.__class__.__name__
            if h != 200:
                problems.append("GET /health afterwards: %s" % h)
                got += " | health %s" % h
        ok = not problems
        results.append((case.name, ok))
        line = "%s  %-52s expected: %-28s got: %s" % ("PASS" if ok else "FAIL", case.name,
                                                        case.expected(), got)
        if not ok:
            line += "  [%s]" % "; ".join(problems)
        print(line + "  (%.1fs)" % (time.monotonic() - t0), flush=True)


def finish(srv, results):
    name = "%s: SIGTERM, exit 0 within the drain time" % srv.label
    if srv.alive():
        rc, took = srv.terminate()
        ok = rc == 0 and took <= DRAIN_S + 5
        got = "rc=%s after %.1fs" % (rc, took)
    else:
        ok, got = False, "already dead rc=%s" % srv.proc.returncode
    results.append((name, ok))
    print("%s  %-52s expected: %-28s got: %s" % ("PASS" if ok else "FAIL", name,
                                                  "rc=0 <= %ds" % (DRAIN_S + 5), got))
    err = srv.stderr()
    found = [m for m in SANITIZER_MARKS if m in err]
    name = "%s: no sanitizer report on stderr" % srv.label
    results.append((name, not found))
    print("%s  %-52s expected: %-28s got: %s" % ("PASS" if not found else "FAIL", name, "none",
                                                  ", ".join(found) or "none"))
    if found:
        i = min(err.find(m) for m in found)
        print("----- sanitizer report -----\n%s\n----------------------------" %
              err[max(0, i - 500):i + 4000])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adakv", default="build/adakv", help="the adakv binary")
    ap.add_argument("--model", help="passed to serve --model (default: serve's own)")
    ap.add_argument("--vocab", type=int, default=49152, help="the model's vocabulary size")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-pool-mb", type=int, default=64)
    ap.add_argument("--only", help="run the cases whose name matches this regex")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--keep-logs", action="store_true", help="keep the servers' stderr files")
    args = ap.parse_args()

    main_table, auth_table = main_cases(args.vocab), auth_cases()
    template_table = chat_template_cases()
    if args.list:
        for case in main_table + auth_table + template_table:
            print("%-52s %s" % (case.name, case.expected()))
        print("%d cases" % (len(main_table) + len(auth_table) + len(template_table)))
        return 0

    common = ["--threads", str(args.threads), "--kv-pool-mb", str(args.kv_pool_mb)]
    if args.model:
        common += ["--model", args.model]
    results = []
    t0 = time.monotonic()
    servers = []
    try:
        for label, extra, table in (("server", [], main_table),
                                    ("server --api-key", ["--api-key", API_KEY], auth_table),
                                    ("server --chat-template mistral-v1",
                                     ["--chat-template", "mistral-v1"], template_table)):
            if args.only and not any(re.search(args.only, c.name) for c in table):
                continue
            srv = Server(args.adakv, common + extra, label)
            servers.append(srv)
            srv.start()
            print("# %s: %s on port %d (%s)" % (label, srv.name, srv.port, " ".join(srv.cmd)),
                  flush=True)
            run_section(srv, table, args.only, results)
            finish(srv, results)
    finally:
        for srv in servers:
            srv.kill()
            if not args.keep_logs:
                for name in srv.logs:
                    try:
                        os.unlink(name)
                    except OSError:
                        pass
            else:
                print("# %s stderr: %s" % (srv.label, " ".join(srv.logs)))
    failed = [n for n, ok in results if not ok]
    print("SUMMARY: %d cases, %d passed, %d failed (%.0fs)" %
          (len(results), len(results) - len(failed), len(failed), time.monotonic() - t0))
    for n in failed:
        print("  FAILED: %s" % n)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
