"""The harness of the hostile-client tests (test_hostile_*.py): a real dumpd with small limits,
a well-behaved client beside the hostile ones, and the checks every scenario ends with.

Every scenario runs a real `dumpd` (build/bin/dumpd) with small limits (BASE_SETTINGS), a
BENIGN client (a dumpd.Client in its own process that dumps one tensor per iteration and
flushes, reporting each flush's latency) and a status probe (`dumpctl status --json` in a loop).
Whatever the hostile client does, the test asserts at the end (Harness.finish):

  * every flush of the benign client completed within 1 s, and its files hold exactly what it
    dumped (np.load);
  * every `dumpctl status` answered within 1 s;
  * SIGTERM ends dumpd with exit code 0 within shutdown_timeout_ms + 5 s (+ EXIT_SLACK_S).

Hostile clients are raw protocol clients from rawclient.py (their own memfd ring, Hello and
control words), or agent processes of rawclient.py (rawagent.Agent) running as uid 1234/1235.

The settings use worker_priority "normal": with "idle" (SCHED_IDLE) the daemon's writers only
get CPU time the test processes leave over, and on a 2-core machine the test's own busy loops
would then make the benign flushes slow for a reason that has nothing to do with isolation.

Needs root (a second uid, setpriv, chown): importing this module skips the importing test
module otherwise.
"""

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import DUMPCTL, Daemon

if os.geteuid() != 0:
    pytest.skip("hostile-client tests need root (they run clients as uids 1234 and 1235)",
                allow_module_level=True)

import rawclient as rc  # noqa: E402  (after the skip: it generates protobuf code)
from rawagent import Agent  # noqa: E402

rc.pb2()  # once, before any agent starts: they find it through $DUMPD_TEST_PB2_DIR

UID_A, UID_B = 1234, 1235

BASE_SETTINGS = {
    "socket_mode": "0666",  # clients of other uids connect too
    "handshake_timeout_ms": 500,
    "shutdown_timeout_ms": 3000,
    "max_open_directories": 16,
    "max_pending_frame_bytes": 16 << 20,
    "min_free_bytes": 0,
    "worker_priority": "normal",  # see the module docstring
}
LATENCY_LIMIT_S = 1.0
# dumpd's own give-up timer fires exactly at shutdown_timeout_ms + 5 s (Server::kShutdownGrace);
# this much more is allowed for the process to exit and for the measurement itself.
EXIT_SLACK_S = 0.5
BENIGN_ELEMENTS = 256


# ---------------------------------------------------------------- small helpers


def job_config(path, **common):
    """A job config dict; `path=None` leaves "path" out."""
    c = {"dump_mode": 0, "path": str(path), "net_name": "Net", "iteration": "all",
         "saved_data": "tensor", "input_output": 0, "kernels": [],
         "support_device": [0, 1, 2, 3, 4, 5, 6, 7]}
    if path is None:
        del c["path"]
    c.update(common)
    return {"common_dump_settings": c, "e2e_dump_settings": {"enable": True, "trans_flag": True}}


def write_job(workdir, name, config):
    p = Path(workdir) / name
    p.write_text(json.dumps(config, indent=1))
    p.chmod(0o644)
    return p


def rss_bytes(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Sampler:
    """Calls `fn` every `period` s on a thread; keeps the maximum (for RSS and fd counts)."""

    def __init__(self, fn, period=0.005):
        self.fn, self.period = fn, period
        self.max = fn()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.max = max(self.max, self.fn())
            except OSError:
                return  # the process is gone
            self._stop.wait(self.period)

    def stop(self):
        self._stop.set()
        self._t.join()
        return self.max


def make_dir(path, mode=0o755, owner=None):
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def tree_snapshot(root):
    """{relative path: (type, uid, gid, mode, bytes or None)} of everything beneath root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            data = p.read_bytes() if p.is_file() else None
            out[str(p.relative_to(root))] = (p.is_dir(), st.st_uid, st.st_gid, st.st_mode, data)
    return out


# ---------------------------------------------------------------- agent processes


def values(i, n=16):
    return np.arange(n, dtype=np.float32) + np.float32(i)


# ---------------------------------------------------------------- the benign neighbour


class BenignClient:
    """The well-behaved neighbour: a dumpd.Client process dumping tensors of known values, one
    iteration at a time, flushing after each (rawclient.py benign)."""

    def __init__(self, harness, root=None, rank=7, uid=None, iterations=0, env=None,
                 config=None):
        self.root = Path(root) if root is not None else harness.workdir / "benign"
        self.rank = rank
        cfg = config if config is not None else job_config(self.root)
        self.config = write_job(harness.workdir, f"benign-{rank}-{uid}.json", cfg)
        self.agent = Agent("benign", "--socket", harness.daemon.socket, "--config", self.config,
                           "--rank", rank, "--iterations", iterations,
                           "--elements", BENIGN_ELEMENTS, uid=uid, env=env)
        self.stopped = False

    def flushes(self):
        return self.agent.of("flush")

    def wait_started(self, timeout=30):
        return self.agent.wait(lambda e: e["event"] in ("flush", "error"), timeout,
                               "the benign client's first flush")

    def wait_flushes(self, n, after=None, timeout=30):
        after = time.monotonic() if after is None else after
        deadline = time.monotonic() + timeout
        while True:
            got = [e for e in self.flushes() if e["at"] > after]
            if len(got) >= n:
                return got
            errors = self.agent.of("error")
            assert not errors, errors
            assert time.monotonic() < deadline, (
                f"benign client made {len(got)} of {n} flushes in {timeout} s "
                f"(last: {self.flushes()[-1:]})")
            with self.agent.cv:
                self.agent.cv.wait(0.1)

    def wait_end(self, timeout=60):
        """Waits for the agent's last line (done or error) and its exit; returns that line."""
        ev = self.agent.wait(lambda e: e["event"] in ("done", "error"), timeout,
                             "the benign client to end")
        self.agent.finish(timeout)
        return ev

    def stop(self, timeout=60):
        self.agent.close_stdin()
        self.stopped = True
        return self.wait_end(timeout)

    def problems(self, expect_error=False):
        out = []
        flushes = self.flushes()
        if not flushes:
            out.append("benign client made no flush at all")
        slow = [e for e in flushes if e["latency"] >= LATENCY_LIMIT_S]
        if slow:
            worst = max(slow, key=lambda e: e["latency"])
            out.append(f"{len(slow)} of {len(flushes)} benign flushes took >= "
                       f"{LATENCY_LIMIT_S} s (worst {worst['latency']:.3f} s at iteration "
                       f"{worst['it']})")
        errors = self.agent.of("error")
        if errors and not expect_error:
            out.append(f"benign client failed: {errors}")
        out += self.file_problems({e["it"] for e in flushes})
        return out

    def file_problems(self, flushed):
        out = []
        base = self.root / f"rank_{self.rank}" / "Net" / "0"
        found = set()
        if base.exists():
            for d in base.iterdir():
                it = int(d.name)
                files = sorted(d.glob("*.npy"))
                if len(files) != 1:
                    out.append(f"benign iteration {it}: {len(files)} npy files")
                for f in files:
                    a = np.load(f)
                    if a.dtype != np.float32 or not np.array_equal(
                            a, rc.benign_values(it, BENIGN_ELEMENTS)):
                        out.append(f"benign file {f} does not hold what was dumped")
                found.add(it)
        missing = sorted(flushed - found)
        if missing:
            out.append(f"benign iterations flushed but without a file: {missing[:10]}")
        return out


class StatusProbe:
    """`dumpctl status --json` in a loop on a thread, recording each call's latency."""

    def __init__(self, socket_path, period=0.05):
        self.socket = socket_path
        self.period = period
        self.samples = []  # (start, latency, ok, detail)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                out = subprocess.run([DUMPCTL, "--socket", self.socket, "status", "--json"],
                                     capture_output=True, text=True, timeout=10)
                ok = out.returncode == 0
                detail = out.stderr.strip()
                if ok:
                    json.loads(out.stdout)
            except (subprocess.TimeoutExpired, ValueError) as e:
                ok, detail = False, repr(e)
            self.samples.append((t0, time.monotonic() - t0, ok, detail))
            self._stop.wait(self.period)

    def stop(self):
        self._stop.set()
        self._t.join(timeout=30)

    def problems(self):
        if not self.samples:
            return ["the status probe made no call"]
        out = []
        bad = [s for s in self.samples if not s[2]]
        if bad:
            out.append(f"{len(bad)} of {len(self.samples)} dumpctl status calls failed: "
                       f"{bad[0][3]}")
        worst = max(s[1] for s in self.samples)
        if worst >= LATENCY_LIMIT_S:
            n = sum(1 for s in self.samples if s[1] >= LATENCY_LIMIT_S)
            out.append(f"{n} of {len(self.samples)} dumpctl status calls took >= "
                       f"{LATENCY_LIMIT_S} s (worst {worst:.3f} s)")
        return out


def dumpctl_status(socket_path, uid=None):
    """(status JSON, latency) of one `dumpctl status --json`, run as `uid` through setpriv."""
    cmd = [DUMPCTL, "--socket", socket_path, "status", "--json"]
    if uid is not None:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] + cmd
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    latency = time.monotonic() - t0
    assert out.returncode == 0, f"dumpctl status as uid {uid}: {out.stderr}"
    return json.loads(out.stdout), latency


# ---------------------------------------------------------------- the harness


# ---------------------------------------------------------------- the harness


class Harness:
    """dumpd with the test settings, a benign client beside and a status probe."""

    def __init__(self, workdir, settings=None, benign=True, daemon_env=None):
        self.workdir = Path(workdir)
        self.workdir.chmod(0o755)  # uids 1234/1235 read configs and import rawclient
        self.settings = {**BASE_SETTINGS, **(settings or {})}
        saved = {k: os.environ.get(k) for k in (daemon_env or {})}
        os.environ.update(daemon_env or {})
        try:
            self.daemon = Daemon(self.workdir, settings=self.settings)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.pid = self.daemon.proc.pid
        self.socket = self.daemon.socket
        self.cleanups = []
        self.agents = []
        self.finished = False
        self.probe = StatusProbe(self.socket)
        self.benign = None
        if benign:
            self.benign = BenignClient(self)
            ev = self.benign.wait_started()
            assert ev["event"] == "flush", ev

    # -- pieces for tests
    def agent(self, *args, **kwargs):
        a = Agent(*args, **kwargs)
        self.agents.append(a)
        return a

    def benign_client(self, **kwargs):
        b = BenignClient(self, **kwargs)
        self.agents.append(b.agent)
        return b

    def raw_session(self, root, config, **kwargs):
        """A RawSession as root (this process); closed after dumpd has stopped."""
        cfg = config if isinstance(config, str) else json.dumps(config)
        s = rc.RawSession(self.socket, cfg, str(root), **kwargs)
        self.cleanups.append(s.close)
        return s

    def status(self, uid=None):
        st, latency = dumpctl_status(self.socket, uid)
        assert latency < LATENCY_LIMIT_S, f"dumpctl status took {latency:.3f} s"
        return st

    def session_of_rank(self, rank, st=None):
        st = st or self.status()
        found = [s for s in st["sessions"] if s["rank"] == rank]
        return found[0] if found else None

    def log(self):
        if not self.daemon.log.closed:
            self.daemon.log.flush()
        return self.daemon.log_path.read_bytes()

    def exit_limit_s(self):
        return self.settings["shutdown_timeout_ms"] / 1000.0 + 5.0 + EXIT_SLACK_S

    def sigterm(self):
        """SIGTERM; returns (exit code, seconds it took)."""
        t0 = time.monotonic()
        self.daemon.proc.send_signal(signal.SIGTERM)
        try:
            code = self.daemon.proc.wait(timeout=self.exit_limit_s() + 30)
        except subprocess.TimeoutExpired:
            self.daemon.proc.kill()
            code = "killed after hanging"
        return code, time.monotonic() - t0

    def finish(self, stop_benign_first=True, benign_expect_error=False, then=None):
        """The common end of every scenario: stop the benign client (or leave it running
        through the SIGTERM), stop the probe, SIGTERM dumpd; then assert everything, with
        the problems `then()` (run after dumpd exited) returns."""
        problems = []
        if self.benign is not None and stop_benign_first:
            end = self.benign.stop()
            if end["event"] != "done":
                problems.append(f"benign client did not close cleanly: {end}")
        self.probe.stop()
        problems += self.probe.problems()
        code, took = self.sigterm()
        self.finished = True
        if self.benign is not None and not stop_benign_first:
            self.benign.wait_end()
        if self.benign is not None:
            problems += self.benign.problems(expect_error=benign_expect_error)
        if code != 0:
            problems.append(f"dumpd exited with {code} after SIGTERM")
        if took > self.exit_limit_s():
            problems.append(f"dumpd took {took:.2f} s to exit after SIGTERM (limit "
                            f"{self.exit_limit_s():.1f} s)")
        self.took = took
        print(f"dumpd exited with {code} {took:.2f} s after SIGTERM")  # shown with -rP / -s
        if then is not None:
            problems += then()
        self.abort()
        assert not problems, "\n".join(problems) + "\n--- dumpd log (tail) ---\n" + \
            self.log().decode(errors="replace")[-4000:]

    def abort(self):
        """Kills whatever is left (teardown after a failure; a no-op after finish())."""
        self.probe.stop()
        if self.daemon.proc.poll() is None:
            self.daemon.proc.kill()
            self.daemon.proc.wait()
        if self.benign is not None:
            self.benign.agent.kill()
        for a in self.agents:
            a.kill()
        while self.cleanups:
            try:
                self.cleanups.pop()()
            except OSError:
                pass
        if not self.daemon.log.closed:
            self.daemon.log.close()


@pytest.fixture
def harness(workdir):
    made = []

    def start(**kwargs):
        h = Harness(workdir, **kwargs)
        made.append(h)
        return h

    yield start
    for h in made:
        h.abort()


class Committer:
    """Commits op records from a thread until `count` are done or stop() is called."""

    def __init__(self, ring, count=None, iteration=lambda i: i // 50, name="Default/Hostile-op",
                 poke=None, timeout=2.0):
        self.ring, self.count, self.iteration, self.name = ring, count, iteration, name
        self.poke, self.timeout = poke, timeout
        self.committed = 0
        self.errors = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        i = 0
        while not self._stop.is_set() and (self.count is None or i < self.count):
            if self.poke:
                self.poke(self.ring, i)
            try:
                self.ring.commit_op(0, self.iteration(i), f"{self.name}{i % 1000}", values(i),
                                    timeout=self.timeout)
                self.committed += 1
            except TimeoutError:
                continue  # ring full (dumpd stopped reading it): try again until stopped
            except Exception as e:  # noqa: BLE001  (reported by the test)
                self.errors.append(repr(e))
                return
            i += 1

    def stop(self):
        self._stop.set()
        self._t.join(timeout=30)

    def join(self, timeout):
        self._t.join(timeout)
        assert not self._t.is_alive(), f"committer still running ({self.committed} committed)"
