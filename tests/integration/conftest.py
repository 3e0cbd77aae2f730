"""Fixtures for integration tests: a real dumpd on a temp socket, real producer processes."""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

DUMPD = os.environ.get("DUMPD_BIN", "")
DUMPCTL = os.environ.get("DUMPCTL_BIN", "")
PRODUCER = os.environ.get("DUMPD_PRODUCER", "")
SPEC_PRODUCER = os.environ.get("DUMPD_SPEC_PRODUCER", "")


def wait_for(predicate, timeout=20.0, what="condition"):
    """Polls `predicate` until it is true or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def can_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class Daemon:
    """A running dumpd; stop() sends SIGTERM and returns the exit code."""

    def __init__(self, workdir, settings=None, log_level="debug"):
        self.workdir = Path(workdir)
        self.socket = str(self.workdir / "d.sock")
        self.log_path = self.workdir / "dumpd.log"
        args = [DUMPD, "--socket", self.socket, "--log-level", log_level]
        if settings is not None:
            cfg = self.workdir / "dumpd.json"
            cfg.write_text(json.dumps(settings))
            args += ["--config", str(cfg)]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.proc.poll() is not None or can_connect(self.socket),
                 what="dumpd to listen")
        assert self.proc.poll() is None, self.logtext()

    def logtext(self):
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=timeout)
        self.log.close()
        return rc

    def status(self):
        out = subprocess.run([DUMPCTL, "--socket", self.socket, "status", "--json"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)


@pytest.fixture
def workdir():
    # Short paths: Unix socket paths must stay under 108 bytes.
    with tempfile.TemporaryDirectory(prefix="dumpd-it-", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture
def daemon(workdir):
    d = Daemon(workdir)
    yield d
    rc = d.stop()
    assert rc == 0, d.logtext()


def write_config(workdir, name="job.json", **overrides):
    """Writes a job config; common_dump_settings keys come from `overrides`."""
    common = {
        "dump_mode": 0,
        "path": str(workdir / "dump"),
        "net_name": "Net",
        "iteration": "all",
        "saved_data": "tensor",
        "input_output": 0,
        "kernels": [],
        "support_device": [0, 1, 2, 3, 4, 5, 6, 7],
    }
    e2e = overrides.pop("e2e", {"enable": True, "trans_flag": True})
    common.update(overrides)
    path = workdir / name
    path.write_text(json.dumps({"common_dump_settings": common, "e2e_dump_settings": e2e},
                               indent=2))
    return path


def run_producer(daemon, config, *args, check=True, timeout=120, **kwargs):
    cmd = [PRODUCER, "--socket", daemon.socket, "--config", str(config), *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check:
        assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n{daemon.logtext()}"
    return out


def npy_files(root):
    return sorted(p for p in Path(root).rglob("*.npy"))


def parse_name(path):
    """Splits a dump file name into its MindSpore fields."""
    parts = Path(path).name.split(".")
    keys = ["op_type", "op_name", "task_id", "stream_id", "timestamp", "io", "slot", "format",
            "dtype"]
    return dict(zip(keys, parts[:9]))
