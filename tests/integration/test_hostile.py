"""Hostile clients against the real dumpd (protocol 2 isolation), with well-behaved ones beside.

Every scenario runs a real `dumpd` (build/bin/dumpd) with small limits (BASE_SETTINGS), a
BENIGN client (a dumpd.Client in its own process that dumps one tensor per iteration and
flushes, reporting each flush's latency) and a status probe (`dumpctl status --json` in a loop).
Whatever the hostile client does, the test asserts at the end (Harness.finish):

  * every flush of the benign client completed within 1 s, and its files hold exactly what it
    dumped (np.load);
  * every `dumpctl status` answered within 1 s;
  * SIGTERM ends dumpd with exit code 0 within shutdown_timeout_ms + 5 s (+ EXIT_SLACK_S).

Hostile clients are raw protocol clients from rawclient.py (their own memfd ring, Hello and
control words), or agent processes of rawclient.py running as uid 1234/1235.

The settings use worker_priority "normal": with "idle" (SCHED_IDLE) the daemon's writers only
get CPU time the test processes leave over, and on a 2-core machine the test's own busy loops
would then make the benign flushes slow for a reason that has nothing to do with isolation.

Needs root (a second uid, setpriv, chown).
"""

import json
import os
import select
import signal
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import DUMPCTL, Daemon, wait_for

if os.geteuid() != 0:
    pytest.skip("hostile-client tests need root (they run clients as uids 1234 and 1235)",
                allow_module_level=True)

import rawclient as rc  # noqa: E402  (after the skip: it generates protobuf code)

rc.pb2()  # once, before any agent starts: they find it through $DUMPD_TEST_PB2_DIR

HERE = Path(__file__).resolve().parent
PY = "/usr/bin/python3"
RAWCLIENT = HERE / "rawclient.py"
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
                                     cwd=str(HERE))
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


def values(i, n=16):
    return np.arange(n, dtype=np.float32) + np.float32(i)


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


# ================================================================ 1. freeze


def test_old_style_hello_with_a_full_blocking_eventfd_is_refused_and_dumpd_keeps_serving(
        harness, workdir):
    h = harness()
    ring = rc.Ring(1 << 20)
    h.cleanups.append(ring.close)
    full = os.eventfd(0, os.EFD_CLOEXEC)  # blocking: a write of 1 would block forever
    os.eventfd_write(full, 0xFFFFFFFFFFFFFFFE)
    other = os.eventfd(0, os.EFD_CLOEXEC)
    root = os.open(make_dir(workdir / "old"), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    h.cleanups += [lambda: os.close(full), lambda: os.close(other), lambda: os.close(root)]
    cfg = json.dumps(job_config(workdir / "old"))
    # Protocol 1's Hello: ring, data doorbell, space doorbell, root. Also with major 2.
    for major in (1, 2):
        c = rc.Conn(h.socket)
        c.send(rc.make_hello(cfg, ring.total, protocol_major=major),
               fds=[ring.fd, full, other, root])
        replies = c.recv_until_eof(timeout=10)
        c.close()
        assert len(replies) == 1 and replies[0].HasField("error"), replies
        err = replies[0].error
        assert rc.error_code_name(err.code) in ("PROTOCOL", "UNSUPPORTED_VERSION"), err
        assert "file descriptors" in err.message or "protocol version 1" in err.message, err
        h.status()
    assert os.eventfd_read(full) == 0xFFFFFFFFFFFFFFFE, "dumpd touched the eventfd"
    # Still serving: a new raw session writes an op.
    s = h.raw_session(workdir / "old", job_config(workdir / "old"))
    s.ring.commit_op(0, 0, "Default/After-op0", values(3))
    assert s.flush(timeout=10).counts.tensors_written == 1
    h.benign.wait_flushes(3)
    h.finish()


def test_producer_stuck_waiting_and_busy_that_never_reads_its_socket_freezes_nobody(
        harness, workdir):
    h = harness()
    root = make_dir(workdir / "stuck")
    # 64 KiB ring: a small backlog in the shared writer queue (see tightloop()).
    s = h.raw_session(root, job_config(root), capacity=64 << 10, read_reply=False, rank=3)
    wait_for(lambda: (h.session_of_rank(3) or {}).get("state") == "active", 10,
             "the raw session to be active")
    ring = s.ring
    ring.polite = False
    ring.set("producer_waiting", 1)
    ring.set("producer_busy", 1)
    # Never read: Flush{0} is answered at once; thousands of them fill the reply queue and
    # both socket buffers.
    s.conn.sock.setblocking(False)
    frames = rc.encode_frame(rc.flush_request(0)) * 1000
    sent = 0
    try:
        for _ in range(1000):
            sent += s.conn.sock.send(frames)
    except BlockingIOError:
        pass
    assert sent > 0

    def scribble(r, i):
        r.set("space_wake", (i * 2654435761) & 0xFFFFFFFF)
        r.set("producer_waiting", 1)
        r.set("producer_busy", 1)

    start = time.monotonic()
    com = Committer(ring, count=3000, poke=scribble)
    h.benign.wait_flushes(20, after=start)
    com.join(60)
    assert not com.errors, com.errors
    h.benign.wait_flushes(5)
    # dumpd kept draining the ring of the stuck producer too.
    wait_for(lambda: h.session_of_rank(3)["records"] >= 3000, 30, "the hostile records")
    h.finish()


# ================================================================ 2. confused deputy


def test_uid_cannot_make_dumpd_write_into_a_root_only_directory(harness, workdir):
    h = harness()
    parent = make_dir(workdir / "parent", 0o755)
    secret = make_dir(parent / "secret", 0o700)
    b = h.benign_client(root=secret, rank=0, uid=UID_A, iterations=2)
    end = b.wait_end()
    assert end["event"] == "error", end
    assert "Permission denied" in end["message"] or "permission" in end["message"], end
    assert os.listdir(secret) == [], "dumpd created files for uid 1234 in a root-only directory"
    h.finish()


@pytest.mark.parametrize("rank_mode", [0o700, 0o755], ids=["rank_0700", "rank_0755"])
def test_uid_cannot_read_or_change_another_users_tree(harness, workdir, rank_mode):
    h = harness()
    shared = make_dir(workdir / "shared", 0o1777)
    first = h.benign_client(root=shared, rank=0, uid=UID_B, iterations=3)
    assert first.wait_end()["event"] == "done"
    assert not first.problems()
    os.chmod(shared / "rank_0", rank_mode)
    before = tree_snapshot(shared)
    meta = "rank_0/.dump_metadata"
    for f in (f"{meta}/data_dump.json", f"{meta}/manifest.jsonl"):
        assert before[f][4], f"{f} missing or empty after uid 1235's session"
    assert len([k for k in before if k.endswith(".npy")]) == 3

    second = h.benign_client(root=shared, rank=0, uid=UID_A, iterations=3)
    end = second.wait_end()
    after = tree_snapshot(shared)
    assert after == before, "uid 1234's session changed uid 1235's tree: " + str(
        sorted(set(after.items()) ^ set(before.items()))[:5])
    mine = [k for k, v in after.items() if v[1] == UID_A]
    assert mine == [], mine
    assert end["event"] == "error", f"uid 1234's session could not write, but it did not fail: {end}"
    assert "ermission denied" in end["message"], end
    h.finish()


def test_everything_dumpd_creates_for_a_uid_belongs_to_it(harness, workdir):
    h = harness()
    own = make_dir(workdir / "own", 0o755, owner=UID_A)
    b = h.benign_client(root=own, rank=0, uid=UID_A, iterations=3)
    assert b.wait_end()["event"] == "done"
    assert not b.problems()
    entries = tree_snapshot(own)
    assert len([k for k in entries if k.endswith(".npy")]) == 3
    wrong = {k: (v[1], v[2]) for k, v in entries.items() if (v[1], v[2]) != (UID_A, UID_A)}
    assert wrong == {}, wrong
    h.finish()


# ================================================================ 3. fd exhaustion


def test_5000_iterations_without_step_marks_keep_open_fds_bounded(harness, workdir):
    h = harness()
    max_dirs = h.settings["max_open_directories"]
    root = make_dir(workdir / "many")
    s = h.raw_session(root, job_config(root), capacity=4 << 20, rank=4)
    baseline = fd_count(h.pid)
    fds = Sampler(lambda: fd_count(h.pid))
    start = time.monotonic()
    open_dirs = []
    for i in range(5000):
        s.ring.commit_op(0, i, "Default/Fd-op0", values(i))
        if i % 500 == 499:
            open_dirs.append(h.session_of_rank(4)["open_directories"])
    reply = s.flush(timeout=120)
    # The figure is refreshed when the ring goes idle (at most a second later).
    open_dirs.append(wait_for(lambda: h.session_of_rank(4)["open_directories"], 5,
                              "open_directories in status"))
    peak = fds.stop()
    print(f"fds: baseline {baseline}, peak {peak}; open_directories seen {open_dirs}")
    assert reply.counts.tensors_written == 5000, reply
    assert peak < baseline + max_dirs + 32, (peak, baseline)
    assert max(open_dirs) <= max_dirs, open_dirs
    assert [e for e in h.benign.flushes() if e["at"] > start], "benign client starved"
    base = root / "rank_4" / "Net" / "0"
    its = sorted(int(d.name) for d in base.iterdir())
    assert its == list(range(5000))
    for i in range(5000):
        files = list((base / str(i)).glob("*.npy"))
        assert len(files) == 1, (i, files)
        if i % 499 == 0:
            np.testing.assert_array_equal(np.load(files[0]), values(i))
    h.finish()


def test_one_sessions_backlog_does_not_hold_up_another_sessions_flush(harness, workdir):
    """A client that fills its ring (within max_ring_bytes, as any client may) must not make
    the other sessions' flushes wait until its whole backlog is on disk. durability "file"
    (an fsync per file) makes each of its writes cost about what it costs on a busy disk."""
    h = harness(settings={"durability": "file"})
    root = make_dir(workdir / "backlog")
    s = h.raw_session(root, job_config(root), capacity=1 << 20, rank=8)
    start = time.monotonic()
    for i in range(2000):  # ~400 KiB of records: all fit in the ring at once
        s.ring.commit_op(0, 0, f"Default/Backlog-op{i}", values(i))
    h.benign.wait_flushes(3, after=start, timeout=120)
    assert s.flush(timeout=120).counts.tensors_written == 2000
    h.finish()


# ================================================================ 4. memory / CPU without a session


def test_stalled_partial_frames_are_bounded_refused_then_timed_out(harness):
    budget = 16 << 20
    timeout_ms = 2000
    h = harness(settings={"max_pending_frame_bytes": budget, "handshake_timeout_ms": timeout_ms,
                          "max_connections_per_uid": 64})
    base = rss_bytes(h.pid)
    rss = Sampler(lambda: rss_bytes(h.pid))
    results = [None] * 40

    def one(i):
        c = rc.Conn(h.socket, timeout=20)
        t0 = time.monotonic()
        try:
            c.sock.sendall(struct.pack("<I", 16 << 20) + b"\0" * (1 << 20))
        except (BrokenPipeError, ConnectionResetError):
            pass
        envs = c.recv_until_eof(timeout=20)
        results[i] = (envs, time.monotonic() - t0)
        c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    peak = rss.stop()
    codes = [rc.error_code_name(r[0][0].error.code) if r and r[0] else "none" for r in results]
    refused = [r for r, c in zip(results, codes) if c == "RESOURCE_EXHAUSTED"]
    timed_out = [r for r, c in zip(results, codes) if c == "TIMEOUT"]
    print(f"{len(refused)} refused, {len(timed_out)} timed out, RSS +{(peak - base) >> 20} MiB")
    assert len(refused) >= 40 - budget // (1 << 20), codes
    assert len(refused) + len(timed_out) == 40, codes
    assert "max_pending_frame_bytes" in refused[0][0][0].error.message
    assert timed_out, codes
    for envs, took in timed_out:
        assert timeout_ms / 1000 - 0.1 <= took <= timeout_ms / 1000 + 2.0, took
        assert "handshake_timeout_ms" in envs[0].error.message
    assert peak - base < budget + (32 << 20), f"RSS grew by {(peak - base) >> 20} MiB"
    wait_for(lambda: h.status()["connections"] <= 3, 10, "the stalled connections to close")
    h.finish()


def test_per_uid_connection_and_session_caps(harness, workdir):
    h = harness(settings={"max_connections_per_uid": 4, "max_sessions_per_uid": 2,
                          "handshake_timeout_ms": 20000})
    conns = h.agent("connections", "--socket", h.socket, "--count", 5, uid=UID_A)
    conns.wait(lambda e: e["event"] == "holding", 30, "uid 1234's connections")
    got = conns.of("connection")
    assert [e["result"] for e in got] == ["status"] * 4 + ["error"], got
    assert got[4]["code"] == "RESOURCE_EXHAUSTED"
    assert "uid 1234 has 4 connections open (max_connections_per_uid" in got[4]["message"]
    other = h.agent("connections", "--socket", h.socket, "--count", 1, uid=UID_B)
    other.wait(lambda e: e["event"] == "holding", 30, "uid 1235's connection")
    assert other.of("connection")[0]["result"] == "status", other.of("connection")
    h.status()  # root too
    assert conns.finish() == 0 and other.finish() == 0
    wait_for(lambda: h.status()["connections"] <= 3, 10, "uid 1234's connections to close")

    for uid in (UID_A, UID_B):
        make_dir(workdir / f"s{uid}", owner=uid)
        write_job(workdir, f"s{uid}.json", job_config(workdir / f"s{uid}"))
    sess = h.agent("sessions", "--socket", h.socket, "--count", 3, "--root", workdir / "s1234",
                   "--config", workdir / "s1234.json", "--first-rank", 10, uid=UID_A)
    sess.wait(lambda e: e["event"] == "holding", 30, "uid 1234's sessions")
    got = sess.of("session")
    assert [e["result"] for e in got] == ["welcome", "welcome", "error"], got
    assert got[2]["code"] == "RESOURCE_EXHAUSTED"
    assert "uid 1234 has 2 dump sessions open (max_sessions_per_uid" in got[2]["message"]
    sess_b = h.agent("sessions", "--socket", h.socket, "--count", 1, "--root", workdir / "s1235",
                     "--config", workdir / "s1235.json", "--first-rank", 20, uid=UID_B)
    sess_b.wait(lambda e: e["event"] == "holding", 30, "uid 1235's session")
    assert sess_b.of("session")[0]["result"] == "welcome", sess_b.of("session")
    h.benign.wait_flushes(3)
    h.finish()  # uid 1234's and 1235's sessions are still open at SIGTERM


def test_status_flood_from_a_client_that_never_reads(harness):
    h = harness()
    base = rss_bytes(h.pid)
    rss = Sampler(lambda: rss_bytes(h.pid), period=0.02)
    c = rc.Conn(h.socket)
    h.cleanups.append(c.close)
    c.sock.setblocking(False)
    frame = rc.encode_frame(rc.status_request())
    pending = memoryview(frame * 100_000)
    stalled_since = None
    while pending:
        try:
            n = c.sock.send(pending[:1 << 16])
            pending = pending[n:]
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 1.0:
                break  # dumpd stopped reading us: it holds a bounded reply queue, not more
            select.select([], [c.sock], [], 0.1)
        except (BrokenPipeError, ConnectionResetError):
            break  # the handshake timeout closed a connection that reads nothing
    sent_frames = 100_000 - len(pending) // len(frame)
    st = h.status()
    assert st["pid"] == h.pid
    h.benign.wait_flushes(5)
    peak = rss.stop()
    print(f"{sent_frames} StatusRequests sent before dumpd stopped reading; "
          f"RSS +{(peak - base) >> 20} MiB")
    assert peak - base < 64 << 20, f"RSS grew by {(peak - base) >> 20} MiB ({sent_frames} sent)"
    h.finish()


def test_sparse_ring_memfd_is_refused_without_growing_dumpd(harness, workdir):
    h = harness(settings={"max_ring_bytes": 2 << 30})
    ring = rc.Ring(1 << 30, prefault=False, init=False)  # sealed, right size, never written
    h.cleanups.append(ring.close)
    base = rss_bytes(h.pid)
    rss = Sampler(lambda: rss_bytes(h.pid))
    root = make_dir(workdir / "sparse")
    with pytest.raises(rc.SessionRefused) as refused:
        h.raw_session(root, job_config(root), ring=ring)
    peak = rss.stop()
    print(f"{refused.value}; RSS +{(peak - base) >> 20} MiB")
    assert "sparse" in refused.value.message, refused.value
    assert peak - base < 64 << 20, f"RSS grew by {(peak - base) >> 20} MiB"
    h.benign.wait_flushes(3)
    h.finish()


# ================================================================ 5. io thread never blocks


def expensive_regexes(n=200):
    """Distinct patterns that RE2 compiles in ~0.15-0.2 s each within dumpd's 256 KiB
    (an alternation of 8 counted repetitions {1,1000}; measured with libre2 2022-06)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for i in range(n):
        alts = "|".join(f"{letters[(i + k) % 26]}{{1,1000}}" for k in range(8))
        out.append(f"name-regex(({alts})z{i})")
    return out


def test_expensive_regex_config_compiles_off_the_io_thread(harness, workdir):
    h = harness()
    root = make_dir(workdir / "regex")
    cfg = job_config(root, dump_mode=1, kernels=expensive_regexes())
    h.raw_session(root, cfg, read_reply=False, rank=5)  # not the Python client: it compiles too
    seen = wait_for(lambda: (lambda s: s if s and s["state"] == "setup" else None)(
        h.session_of_rank(5)), 10, "the session in state setup")
    first = time.monotonic()
    last = first
    while time.monotonic() - first < 3.0:
        s = h.session_of_rank(5)  # asserts status answered within 1 s
        assert s is not None
        if s["state"] != "setup":
            break
        last = time.monotonic()
    assert last - first >= 2.0, "set-up finished too soon to show anything; use costlier regexes"
    during = [e for e in h.benign.flushes() if first <= e["at"] <= last]
    assert len(during) >= 10, f"only {len(during)} benign flushes while the session set up"
    assert seen["uid"] == 0
    h.finish()


def test_a_client_hanging_up_during_setup_ends_its_session_promptly(harness, workdir):
    """docs/operations.md: a client hanging up ends its session as SIGTERM does, within
    shutdown_timeout_ms. A session still compiling its patterns must stop too, rather than
    hold its slot (max_sessions_per_uid) and a CPU for as long as the config keeps it busy."""
    h = harness()
    root = make_dir(workdir / "hangup")
    cfg = job_config(root, dump_mode=1, kernels=expensive_regexes())  # over a minute of set-up
    s = h.raw_session(root, cfg, read_reply=False, rank=5)
    wait_for(lambda: (h.session_of_rank(5) or {}).get("state") == "setup", 10,
             "the session in state setup")
    s.conn.close()
    limit = h.settings["shutdown_timeout_ms"] / 1000 + 2.0
    hung_up = time.monotonic()
    try:
        wait_for(lambda: h.session_of_rank(5) is None, limit, "the session to end")
        gone = None
    except AssertionError:
        gone = (f"the session was still in state {h.session_of_rank(5)['state']} "
                f"{time.monotonic() - hung_up:.1f} s after its client hung up")
    h.finish(then=lambda: [gone] if gone else [])


# ================================================================ 6. regex


def test_nested_quantifier_regex_runs_in_linear_time_and_selects_exactly(harness, workdir):
    h = harness()
    root = make_dir(workdir / "redos")
    s = h.raw_session(root, job_config(root, dump_mode=1, kernels=["name-regex((a+)+$)"]))
    t0 = time.monotonic()
    s.ring.commit_step(0, 0)
    s.ring.commit_op(0, 0, "a" * 59 + "!", values(1), op_type="Evil")
    s.ring.commit_op(0, 0, "a" * 60, values(2), op_type="Good")
    reply = s.flush(timeout=10)
    took = time.monotonic() - t0
    assert took < LATENCY_LIMIT_S, took
    assert reply.counts.tensors_written == 1 and reply.counts.tensors_filtered == 1, reply
    files = sorted(root.rglob("*.npy"))
    assert [f.name.split(".")[:2] for f in files] == [["Good", "a" * 60]], files
    np.testing.assert_array_equal(np.load(files[0]), values(2))
    h.finish()


# ================================================================ 7. SIGTERM


def tightloop(h, workdir, *extra):
    """A dumpd.Client dumping as fast as it can. Its ring is the smallest (64 KiB): the client
    then blocks for space all the time (SIGTERM finds it waiting as often as copying), and its
    backlog in the shared writer queue stays small -- a bigger one delays the benign client's
    flushes by as long as it takes to write (see test_5000_iterations_...)."""
    root = make_dir(workdir / "tight")
    cfg = write_job(workdir, "tight.json", job_config(root))
    a = h.agent("tightloop", "--socket", h.socket, "--config", cfg, "--ring-bytes", 64 << 10,
                "--elements", 64, "--announce-after", 2000, *extra)
    a.wait(lambda e: e["event"] == "running", 60, "the tight loop to run")
    return a, root


@pytest.mark.parametrize("run", range(3))
def test_sigterm_writes_exactly_the_dumps_that_returned_true(harness, workdir, run):
    h = harness()
    a, root = tightloop(h, workdir)

    def count_matches():
        done = a.wait(lambda e: e["event"] == "done", 30, "the tight loop's count")
        assert a.finish() == 0
        files = len(list(root.rglob("*.npy")))
        if done["true_count"] < 2000 or files != done["true_count"]:
            return [f"{files} npy files on disk, but dump() returned True {done['true_count']} "
                    f"times ({done})"]
        return []

    h.finish(stop_benign_first=False, benign_expect_error=True, then=count_matches)


@pytest.mark.parametrize("run", range(4))
def test_client_exiting_during_the_drain_leaves_a_clean_exit(harness, workdir, run):
    h = harness()
    on_error = run % 2 == 1  # half exit on DaemonError, half on a signal right after SIGTERM
    a, _ = tightloop(h, workdir, *(["--exit-on-error"] if on_error else ["--hold-after-error"]))
    if not on_error:
        orig = h.daemon.proc.send_signal

        def term_then_exit(sig):
            orig(sig)
            a.proc.send_signal(signal.SIGUSR1)  # os._exit(0) in the client, mid-drain

        h.daemon.proc.send_signal = term_then_exit

    def client_exited():
        code = a.proc.wait(timeout=30)
        return [] if code == 0 else [f"the exiting client ended with {code}"]

    h.finish(stop_benign_first=False, benign_expect_error=True, then=client_exited)


def test_sigterm_with_a_producer_stuck_busy_and_one_committing_forever(harness, workdir):
    h = harness()
    stuck_root, flood_root = make_dir(workdir / "stuck"), make_dir(workdir / "flood")
    stuck = h.raw_session(stuck_root, job_config(stuck_root), rank=21)
    stuck.ring.polite = False
    stuck.ring.set("producer_busy", 1)  # and never cleared
    # 64 KiB: a small backlog in the shared writer queue (see tightloop()).
    flood = h.raw_session(flood_root, job_config(flood_root), rank=22, capacity=64 << 10)
    flood.ring.polite = False  # ignores `closing`
    com = Committer(flood.ring, timeout=0.2)
    h.cleanups.insert(0, com.stop)  # after the sessions close (cleanups run last-first)
    wait_for(lambda: com.committed > 2000, 30, "the flood to run")
    h.benign.wait_flushes(3)
    h.finish(stop_benign_first=False, benign_expect_error=True)
    assert not com.errors, com.errors


# ================================================================ 8. smaller


EVIL = "\x1b[31m\nFAKE LINE"


def test_control_characters_from_clients_reach_the_log_escaped(harness, workdir):
    h = harness()
    root = make_dir(workdir / "evil")
    # Unused kernel (logged at session end) and producer name (logged at session start).
    cfg = job_config(root, dump_mode=1, kernels=["Good", "evil" + EVIL])
    s = h.raw_session(root, cfg, rank=1, producer_name="prod" + EVIL)
    s.ring.commit_op(0, 0, "Default/Good-op0", values(1), op_type="Good")
    s.flush()
    s.conn.send(rc.goodbye())
    s.conn.recv_until_eof()
    # A record whose size does not match its shape: the error quotes the op name.
    s2 = h.raw_session(root, job_config(root), rank=2)
    s2.ring.commit_op(0, 0, "Default/" + EVIL + "-op0", values(1), dtype=11)  # float64 != bytes
    end = s2.conn.recv_until_eof()
    assert end and end[0].HasField("error"), end
    # An invalid net name: the validator's message.
    with pytest.raises(rc.SessionRefused):
        h.raw_session(root, job_config(root, net_name="n" + EVIL), rank=3)
    wait_for(lambda: b"unused kernel in job config: evil" in h.log(), 10,
             "the unused-kernel warning")
    h.finish()
    log = h.log()
    assert b"\x1b" not in log, "an ESC byte reached dumpd's log"
    fake = [line for line in log.split(b"\n") if line.startswith(b"FAKE")]
    assert fake == [], fake
    text = log.decode()
    assert "\\x1b[31m\\x0aFAKE" in text  # the names did reach the log, escaped
    assert "prod\\x1b" in text


def test_status_shows_other_users_sessions_to_root_only(harness, workdir):
    h = harness()
    own = make_dir(workdir / "u1234", owner=UID_A)
    mine = h.benign_client(root=own, rank=0, uid=UID_A)
    assert mine.wait_started()["event"] == "flush"
    pid = mine.agent.proc.pid
    st = h.status(uid=UID_A)
    assert [(s["uid"], s["pid"]) for s in st["sessions"]] == [(UID_A, pid)], st["sessions"]
    assert st["sessions_hidden"] >= 1, st
    root_view = h.status()
    assert {s["uid"] for s in root_view["sessions"]} == {0, UID_A}, root_view["sessions"]
    assert root_view["sessions_hidden"] == 0
    assert mine.stop()["event"] == "done"
    assert not mine.problems()
    h.finish()


def test_status_lists_64_of_200000_unused_kernels(harness, workdir):
    h = harness()
    root = make_dir(workdir / "kernels")
    kernels = [f"k{i}" for i in range(200_000)]
    h.raw_session(root, job_config(root, dump_mode=1, kernels=kernels), rank=6, timeout=30)
    s = wait_for(lambda: (lambda s: s if s and s["unused_kernels_total"] == 200_000 else None)(
        h.session_of_rank(6)), 15, "unused_kernels_total = 200000")
    assert len(s["unused_kernels"]) == 64
    assert set(s["unused_kernels"]) <= set(kernels)
    other = h.status(uid=UID_A)  # asserts < 1 s too
    assert other["sessions"] == [] and other["sessions_hidden"] >= 2
    h.benign.wait_flushes(3)
    h.finish()


def test_stale_temporary_files_are_removed_and_other_files_kept(harness, workdir):
    h = harness()
    root = make_dir(workdir / "tmpclean")
    it_dir = make_dir(root / "rank_0" / "Net" / "0" / "3")
    stale = it_dir / ".dumpd-tmp-1-deadbeef-0"
    stale.write_bytes(b"half-written by a dead dumpd")
    keep = it_dir / "notes.txt"
    keep.write_bytes(b"mine")
    s = h.raw_session(root, job_config(root))
    s.ring.commit_step(0, 3)
    s.ring.commit_op(0, 3, "Default/Tmp-op0", values(3))
    assert s.flush().counts.tensors_written == 1
    assert not stale.exists()
    assert keep.read_bytes() == b"mine"
    assert len(list(it_dir.glob("*.npy"))) == 1
    h.finish()


def test_ms_diagnostic_data_path_comes_from_the_clients_environment(harness, workdir):
    decoy = make_dir(workdir / "decoy")
    h = harness(daemon_env={"MS_DIAGNOSTIC_DATA_PATH": str(decoy)})
    diag = workdir / "diag"
    b = h.benign_client(rank=0, iterations=2, config=job_config(None),
                        env={"MS_DIAGNOSTIC_DATA_PATH": str(diag)})
    b.root = diag / "debug_dump"
    assert b.wait_end()["event"] == "done"
    assert not b.problems()
    assert len(list((diag / "debug_dump" / "rank_0" / "Net" / "0").rglob("*.npy"))) == 2
    assert list(decoy.iterdir()) == []
    h.finish()


def test_client_written_drop_counter_cannot_wrap_status_totals(harness, workdir):
    h = harness()
    hostile = []
    for rank in (30, 31):
        root = make_dir(workdir / f"drop{rank}")
        s = h.raw_session(root, job_config(root), rank=rank)
        s.ring.set("dropped_tensors", 2**64 - 1)
        hostile.append(s)
    h.benign.wait_flushes(3)
    st = h.status()
    for rank in (30, 31):
        s = h.session_of_rank(rank, st)
        assert 2**48 <= s["client_dropped_tensors"] < 2**64 - 1, s
    benign = [s for s in st["sessions"] if s["rank"] == 7][0]
    assert benign["tensors_dropped"] == 0, benign
    assert st["totals"]["tensors_dropped"] >= 2**48, st["totals"]
    end = h.benign.stop()
    assert end["event"] == "done"
    written = len(h.benign.flushes())
    st = wait_for(lambda: (lambda s: s if h.session_of_rank(7, s) is None else None)(h.status()),
                  10, "the benign session to close")
    totals = st["totals"]
    assert totals["tensors_written"] == written, totals
    assert 2**48 <= totals["tensors_dropped"] < 2**64 - 1, totals
    h.finish()
