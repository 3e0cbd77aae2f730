"""The harness of the hostile-client tests (test_hostile_*.py): a real dumpd with small limits,
a well-behaved client beside the hostile ones, and the checks every scenario ends with.

Every scenario runs a real `dumpd` (build/bin/dumpd) with small limits (BASE_SETTINGS), a
BENIGN client (a dumpd.Client in its own process that dumps one tensor per iteration and
flushes) and a status probe (`dumpctl status --json` in a loop). Whatever the hostile client
does, the scenario ends with Harness.finish, which asserts events, each within a generous
deadline (DEADLINE_S) that only a stall or a hang exceeds:

  * with the hostile clients still in place, the benign client completes FLUSHES_AT_END more
    flushes; every flush it made was answered, counted its tensor as written, and its files
    hold exactly what it dumped (np.load);
  * every `dumpctl status` answered, with dumpd's own pid;
  * SIGTERM ends dumpd with exit code 0.

How *fast* dumpd answers under attack is a figure, not a pass/fail bound on a shared 2-core
machine: bench/hostile_bench.py measures it (row 8 of bench/run, docs/performance.md).

Hostile clients are raw protocol clients from rawclient.py (their own memfd ring, Hello and
control words), or agent processes of rawclient.py (rawagent.Agent) running as uid 1234/1235.

The settings use worker_priority "normal": with "idle" (SCHED_IDLE) the daemon's writers only
get CPU time the test processes leave over, and on a 2-core machine the test's own busy loops
would then starve them for a reason that has nothing to do with isolation.

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
from rawagent import Agent, StatusLoop  # noqa: E402

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
# The deadline for any one event the scenarios wait for (a flush answered, status answered, a
# session gone, dumpd exited past its own timers). Generous on purpose: a loaded CI machine
# may make an answer take seconds, a stall or a hang takes forever. It is also the benign
# agent's flush timeout (rawclient.py agent_benign: flush(timeout=30)).
DEADLINE_S = 30.0
# At the end of each scenario, with the hostile clients still there, the benign client must
# complete this many more flushes.
FLUSHES_AT_END = 3
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


def rss_anon(pid):
    """dumpd's anonymous resident memory (RssAnon): its heap, not the rings it maps."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon")


NOT_SELECTED = "999999"  # an iteration selection none of the hostile records is in


def recorder_job(root, iteration=NOT_SELECTED, net_name="Net", **recorder):
    """A job config whose `flight_recorder` section is `recorder` (none when empty)."""
    config = job_config(root, iteration=iteration, net_name=net_name)
    if recorder:
        config["flight_recorder"] = recorder
    return config


def script_agent(h, name, uid, rank, config, script, ring_bytes=1 << 20):
    """A raw session of `uid` (rawclient.py agent_script) running `script`, dumping into a
    directory of its own (the agent's `root`); `config(root)` is its job config."""
    root = make_dir(h.workdir / name, owner=uid)
    cfg = write_job(h.workdir, f"{name}.json", config(root))
    agent = h.agent("script", "--socket", h.socket, "--config", cfg, "--root", root,
                    "--rank", rank, "--ring-bytes", ring_bytes, "--script", json.dumps(script),
                    uid=uid)
    agent.root = root
    return agent


def done(agent, action, timeout=DEADLINE_S):
    """The agent's line for `action`, or its refusal (whichever comes first)."""
    return agent.wait(lambda e: e["event"] in (action, "refused"), timeout,
                      f"the hostile agent's {action}")


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

    def wait_started(self, timeout=DEADLINE_S):
        return self.agent.wait(lambda e: e["event"] in ("flush", "error"), timeout,
                               "the benign client's first flush")

    def wait_flushes(self, n, after=None, timeout=DEADLINE_S):
        """The first `n` flushes completed after `after` (default: now), within `timeout`."""
        after = time.monotonic() if after is None else after
        deadline = time.monotonic() + timeout
        while True:
            got = [e for e in self.flushes() if e["at"] > after]
            if len(got) >= n:
                return got[:n]
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
        """Each flush was answered (the agent's flush times out at DEADLINE_S and reports an
        error), its counts are exact, and the files hold what was dumped."""
        out = []
        flushes = self.flushes()
        if not flushes:
            out.append("benign client made no flush at all")
        dumped = 0
        for e in flushes:
            dumped += bool(e["dumped"])
            if not e["dumped"] or e["written"] != dumped or e["last_error"]:
                out.append(f"benign flush at iteration {e['it']}: dump() returned "
                           f"{e['dumped']}, {e['written']} tensors written of {dumped} "
                           f"dumped, last_error {e['last_error']!r}")
                break
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


class StatusProbe(StatusLoop):
    """`dumpctl status --json` every 50 ms on a thread; each call must answer (within
    DEADLINE_S) with dumpd's pid."""

    def __init__(self, socket_path, pid):
        self.pid = pid
        super().__init__(DUMPCTL, socket_path, period=0.05, timeout=DEADLINE_S,
                         check=self._other_pid)

    def _other_pid(self, stdout):
        try:
            if json.loads(stdout)["pid"] == self.pid:
                return None
        except (ValueError, KeyError):
            pass
        return f"not the status of dumpd (pid {self.pid}): {stdout[:200]}"

    def problems(self):
        if not self.samples:
            return ["the status probe made no call"]
        bad = [s for s in self.samples if s[2] is not None]
        if bad:
            return [f"{len(bad)} of {len(self.samples)} dumpctl status calls failed: "
                    f"{bad[0][2]}"]
        return []


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
        self.probe = StatusProbe(self.socket, self.pid)
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
        """A RawSession as root (this process); closed after dumpd has stopped. Its Welcome
        (or refusal) is awaited for DEADLINE_S unless `timeout` says otherwise."""
        cfg = config if isinstance(config, str) else json.dumps(config)
        kwargs.setdefault("timeout", DEADLINE_S)
        s = rc.RawSession(self.socket, cfg, str(root), **kwargs)
        self.cleanups.append(s.close)
        return s

    def status(self, uid=None):
        """One `dumpctl status --json` (as `uid`, through setpriv): it must answer within
        DEADLINE_S, and with this dumpd's pid."""
        cmd = [DUMPCTL, "--socket", self.socket, "status", "--json"]
        if uid is not None:
            cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] + cmd
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)
        assert out.returncode == 0, f"dumpctl status as uid {uid}: {out.stderr}"
        st = json.loads(out.stdout)
        assert st["pid"] == self.pid, st
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
        # dumpd's own give-up timer fires at shutdown_timeout_ms + 5 s (Server::kShutdownGrace)
        # whatever its sessions do; past that, a dumpd still running is hung.
        return self.settings["shutdown_timeout_ms"] / 1000.0 + 5.0 + DEADLINE_S

    def sigterm(self):
        """SIGTERM; returns (exit code, seconds it took)."""
        t0 = time.monotonic()
        self.daemon.proc.send_signal(signal.SIGTERM)
        try:
            code = self.daemon.proc.wait(timeout=self.exit_limit_s())
        except subprocess.TimeoutExpired:
            self.daemon.proc.kill()
            code = f"killed, still running {self.exit_limit_s():.0f} s after SIGTERM"
        return code, time.monotonic() - t0

    def finish(self, stop_benign_first=True, benign_expect_error=False, then=None):
        """The common end of every scenario: the benign client flushes again with the hostile
        clients still in place; stop it (or leave it running through the SIGTERM), stop the
        probe, SIGTERM dumpd; then assert everything, with the problems `then()` (run after
        dumpd exited) returns."""
        problems = []
        if self.benign is not None and not self.benign.stopped:
            try:
                self.benign.wait_flushes(FLUSHES_AT_END)
            except AssertionError as e:
                problems.append(f"benign flushes stopped completing: {e}")
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
        self.took = took
        # Shown with -rP / -s: the figures the old 1 s bounds were about, for the curious.
        flush_s = max((e["latency"] for e in self.benign.flushes()), default=0) \
            if self.benign is not None else 0
        status_s = max((s[1] for s in self.probe.samples), default=0)
        print(f"dumpd exited with {code} {took:.2f} s after SIGTERM; slowest benign flush "
              f"{flush_s:.3f} s, slowest status {status_s:.3f} s")
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
        self._t.join(timeout=DEADLINE_S)

    def join(self, timeout):
        self._t.join(timeout)
        assert not self._t.is_alive(), f"committer still running ({self.committed} committed)"
