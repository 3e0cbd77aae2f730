"""Fixtures for the Python integration tests: a real `dumpd` daemon on a temp socket.

Run by ctest as `/usr/bin/python3 -m pytest -q <file>` with PYTHONPATH=<build>/python and
DUMPD_BIN=<build>/bin/dumpd. Everything is waited for with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import pytest

DAEMON_START_TIMEOUT = 20.0
DAEMON_STOP_TIMEOUT = 60.0


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Polls `predicate` until it returns a truthy value; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(delay)  # polling interval, not a wait for an event
        delay = min(delay * 2, 0.05)


def _socket_answers(path: str) -> bool:
    if not os.path.exists(path):
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


@dataclass
class Daemon:
    """A running `dumpd` process."""

    proc: subprocess.Popen
    socket: str
    workdir: Path
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int:
        """SIGTERM, then waits for the drain and exit; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=DAEMON_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail("dumpd did not exit after SIGTERM\n" + self.log_text())
            raise


def start_daemon(settings: Optional[Dict[str, Any]] = None) -> Daemon:
    binary = os.environ.get("DUMPD_BIN")
    if not binary:
        candidate = Path(__file__).resolve().parents[2] / "build" / "bin" / "dumpd"
        binary = str(candidate)
    if not os.access(binary, os.X_OK):
        pytest.fail(f"dumpd binary not found at {binary} (set DUMPD_BIN)")
    # A short directory under /tmp: sockaddr_un paths must stay under 108 bytes.
    workdir = Path(tempfile.mkdtemp(prefix="dpy", dir="/tmp"))
    sock = str(workdir / "d.sock")
    conf = {"min_free_bytes": 0, "writer_threads": 2, "log_level": "info"}
    conf.update(settings or {})
    (workdir / "dumpd.json").write_text(json.dumps(conf))
    log = workdir / "dumpd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [binary, "--socket", sock, "--config", str(workdir / "dumpd.json")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    daemon = Daemon(proc, sock, workdir, log)

    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"dumpd exited with {proc.returncode} at start-up:\n{daemon.log_text()}")
        return _socket_answers(sock)

    wait_for(ready, DAEMON_START_TIMEOUT, "the dumpd socket")
    return daemon


def stop_daemon(daemon: Daemon) -> None:
    code = daemon.stop()
    text = daemon.log_text()
    shutil.rmtree(daemon.workdir, ignore_errors=True)
    assert code == 0, f"dumpd exited with {code}:\n{text}"


def dumpctl(sock: str, *args: str, uid: int = 0) -> subprocess.CompletedProcess:
    """The real dumpctl on sock; uid != 0 runs it as that uid (setpriv, needs root)."""
    cmd = [os.environ["DUMPCTL_BIN"], "--socket", sock, *args]
    if uid != 0:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def dumpctl_control(sock: str, *args: str) -> str:
    """`dumpctl control --pid <this process> args...`; must succeed; its stdout."""
    out = dumpctl(sock, "control", "--pid", str(os.getpid()), *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def daemon() -> Daemon:
    """One real daemon per test module; stopped with SIGTERM, must exit 0."""
    d = start_daemon()
    yield d
    stop_daemon(d)


def make_config(directory: Path, **common: Any) -> Path:
    """Writes a data_dump.json dumping into directory/"dump"; keyword args override
    common_dump_settings keys; `e2e=dict(...)` sets e2e_dump_settings."""
    e2e = common.pop("e2e", {"enable": True, "trans_flag": True})
    settings = {
        "dump_mode": 0,
        "path": str(directory / "dump"),
        "net_name": "Net",
        "iteration": "all",
        "input_output": 0,
        "kernels": [],
        "support_device": [0, 1, 2, 3, 4, 5, 6, 7],
    }
    settings.update(common)
    path = directory / "data_dump.json"
    path.write_text(json.dumps({"common_dump_settings": settings, "e2e_dump_settings": e2e}))
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A dump-everything config writing under tmp_path/dump."""
    return make_config(tmp_path)


@dataclass(frozen=True)
class DumpFile:
    """One tensor file, its name parsed per the MindSpore dump spec (section 4)."""

    path: Path
    op_type: str
    op_name: str
    task_id: int
    stream_id: int
    timestamp: int
    io: str
    slot: int
    format: str
    dtype: str
    rank: int
    net: str
    graph: str
    iteration: str

    def load(self) -> np.ndarray:
        return np.load(self.path, allow_pickle=False)


def sanitize(name: str) -> str:
    """op_name as it appears in file names: / \\ . and space become _."""
    for c in "/\\. ":
        name = name.replace(c, "_")
    return name


def parse_dump_file(path: Path, root: Path) -> DumpFile:
    rel = path.relative_to(root).parts  # rank_r, net, graph, iteration, file
    assert len(rel) == 5 and rel[0].startswith("rank_"), f"unexpected location {path}"
    parts = path.name.split(".")
    assert len(parts) == 10 and parts[-1] == "npy", f"unexpected file name {path.name}"
    op_type, op_name, task, stream, ts, io, slot, fmt, dtype, _ = parts
    assert io in ("input", "output"), path.name
    return DumpFile(path, op_type, op_name, int(task), int(stream), int(ts), io, int(slot), fmt,
                    dtype, int(rel[0][5:]), rel[1], rel[2], rel[3])


def dump_files(root: Path) -> List[DumpFile]:
    """Every tensor file under a dump root (constants excluded), sorted by path."""
    if not root.exists():
        return []
    found = []
    for p in sorted(root.glob("rank_*/*/*/*/*.npy")):
        if p.parent.name == "constants":
            continue
        found.append(parse_dump_file(p, root))
    return found


def index_files(files: List[DumpFile]) -> Dict[tuple, DumpFile]:
    """(iteration, op_name, io, slot) -> file; asserts each key is unique."""
    index: Dict[tuple, DumpFile] = {}
    for f in files:
        key = (int(f.iteration), f.op_name, f.io, f.slot)
        assert key not in index, f"two files for {key}: {index[key].path.name}, {f.path.name}"
        index[key] = f
    return index
