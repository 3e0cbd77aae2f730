"""The processes the hostile-client tests and their benchmark drive beside dumpd: Agent, one
`rawclient.py COMMAND` child process whose JSON lines are collected on a thread, and
StatusLoop, `dumpctl status --json` in a loop.

Used by the hostile-client tests (hostile_harness.py) and by bench/hostile_bench.py, so it
needs neither pytest nor root.
"""

import json
import os
import subprocess
import threading
import time
from pathlib import Path

PY = "/usr/bin/python3"
RAWCLIENT = Path(__file__).resolve().parent / "rawclient.py"


class Agent:
    """A `rawclient.py COMMAND` process (optionally as another uid); its JSON lines are read
    on a thread and kept in `events` (each with `at`, the monotonic arrival time)."""

    def __init__(self, command, *args, uid=None, env=None):
        cmd = [PY, str(RAWCLIENT), command, *map(str, args)]
        if uid is not None:
            cmd += ["--uid", str(uid)]
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=full_env,
                                     cwd=str(RAWCLIENT.parent))
        self.events = []
        self.stderr = []
        self.done = False
        self.cv = threading.Condition()
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_out(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"event": "garbage", "line": line}
            ev["at"] = time.monotonic()
            with self.cv:
                self.events.append(ev)
                self.cv.notify_all()
        with self.cv:
            self.done = True
            self.cv.notify_all()

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def of(self, kind):
        with self.cv:
            return [e for e in self.events if e["event"] == kind]

    def wait(self, pred, timeout=30.0, what="an event"):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for ev in self.events:
                    if pred(ev):
                        return ev
                if self.done:
                    raise AssertionError(f"agent ended before {what}: {self.events[-3:]}\n"
                                         f"{''.join(self.stderr)}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}: {self.events[-3:]}")
                self.cv.wait(left)

    def close_stdin(self):
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def finish(self, timeout=60):
        self.close_stdin()
        rc_ = self.proc.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=5)
        return rc_

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class StatusLoop:
    """`dumpctl status --json` in a loop on a thread, `period` s apart (0: back to back).
    `samples` holds (start, latency, problem) per call: problem is None, or why the call
    failed (an exit code, no answer within `timeout`, or what `check(stdout)` returned)."""

    def __init__(self, dumpctl, socket, period=0.05, timeout=30.0, check=lambda stdout: None):
        self.cmd = [dumpctl, "--socket", socket, "status", "--json"]
        self.period, self.timeout, self.check = period, timeout, check
        self.samples = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                out = subprocess.run(self.cmd, capture_output=True, text=True,
                                     timeout=self.timeout)
                problem = (f"exit {out.returncode}: {out.stderr.strip()}" if out.returncode
                           else self.check(out.stdout))
            except subprocess.TimeoutExpired:
                problem = f"no answer within {self.timeout} s"
            self.samples.append((t0, time.monotonic() - t0, problem))
            self._stop.wait(self.period)

    def stop(self):
        self._stop.set()
        self._t.join(timeout=self.timeout + 5)
