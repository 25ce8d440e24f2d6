#!/usr/bin/env python3
"""`adakv launch -- serve` (TP 3 under mpirun) stopped as operators stop it: SIGTERM (what
Slurm and Kubernetes send) or SIGINT (Ctrl-C) to the launcher drains the streams in flight for
--drain-s, each ends with a finish_reason and [DONE], the launcher exits 0 and no rank is left.

  ~/.cache/adakv/venv/bin/python tests/server/test_launch_drain.py --adakv build/adakv
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
import unittest

import openai

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = None
DRAIN_S = 4


def ranks_left(port):
    out = subprocess.run(["pgrep", "-f", f"serve --port {port}"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


class LaunchDrain(unittest.TestCase):
    def launch(self):
        err = tempfile.NamedTemporaryFile("w+b", prefix="adakv-launch-", suffix=".err")
        port = 18000 + os.getpid() % 1000
        cmd = [ARGS.adakv, "launch", "--cluster", os.path.join(REPO, "configs/cluster/local.yaml"),
               "--", "serve", "--port", str(port), "--drain-s", str(DRAIN_S)]
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, env=env, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = Path(err.name).read_bytes().decode("utf-8", "replace")
            m = re.search(r"\[adakv\] serving (\S+) on http://([^\s:]+):(\d+)", text)
            if m:
                return proc, err, m.group(1), f"http://{m.group(2)}:{m.group(3)}/v1", port
            if proc.poll() is not None:
                self.fail(f"launch exited {proc.returncode} before serving:\n{text}")
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        self.fail("the server did not come up in 120 s")

    def stop_while_streaming(self, sig):
        proc, err, name, url, port = self.launch()
        try:
            c = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
            seen = {"chunks": 0, "finish": None, "error": None}
            streaming = threading.Event()

            def stream():
                try:
                    for ch in c.completions.create(model=name, prompt="Once upon a time",
                                                   max_tokens=4000, stream=True,
                                                   extra_body={"ignore_eos": True}):
                        seen["chunks"] += 1
                        streaming.set()
                        for choice in ch.choices:
                            seen["finish"] = choice.finish_reason or seen["finish"]
                except Exception as e:  # noqa: BLE001 - asserted below
                    seen["error"] = e
                streaming.set()
            t = threading.Thread(target=stream)
            t.start()
            self.assertTrue(streaming.wait(60), "no chunk within 60 s")
            t0 = time.monotonic()
            proc.send_signal(sig)
            rc = proc.wait(DRAIN_S + 30)
            took = time.monotonic() - t0
            t.join(30)
            text = Path(err.name).read_bytes().decode("utf-8", "replace")
            print(f"\n[test] {sig.name} to adakv launch: exit {rc} after {took:.1f}s; the stream "
                  f"got {seen['chunks']} chunks, finish_reason {seen['finish']}", file=sys.stderr)
            self.assertIsNone(seen["error"], f"the stream was cut: {seen['error']}")
            self.assertIn(seen["finish"], ("abort", "length"), text)
            self.assertEqual(rc, 0, text)
            self.assertGreaterEqual(took, DRAIN_S - 1, "it did not wait for the drain")
            self.assertLess(took, DRAIN_S + 15, text)
            self.assertIn("draining for up to", text)
            deadline = time.monotonic() + 5
            while ranks_left(port) and time.monotonic() < deadline:
                time.sleep(0.2)
            self.assertEqual(ranks_left(port), [], "ranks are left")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def test_sigterm_drains(self):
        self.stop_while_streaming(signal.SIGTERM)

    def test_sigint_drains(self):
        self.stop_while_streaming(signal.SIGINT)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    ap.add_argument("--adakv", default=os.path.join(REPO, "build", "adakv"))
    ARGS, rest = ap.parse_known_args()
    ARGS.adakv = os.path.abspath(ARGS.adakv)
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
