"""tests/reference: make_golden.py importable, where dumpctl and dumpd are, and a real dumpd."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_addoption(parser):
    root = Path(__file__).resolve().parents[2]
    parser.addoption("--dumpctl", default=str(root / "build" / "bin" / "dumpctl"),
                     help="the dumpctl binary to judge")
    parser.addoption("--dumpd", default=str(root / "build" / "bin" / "dumpd"),
                     help="the dumpd binary to judge (its Python module on PYTHONPATH)")


@pytest.fixture(scope="session")
def daemon(pytestconfig):
    """A real dumpd on a temporary socket for the whole run; SIGTERM must end it with 0."""
    binary = pytestconfig.getoption("dumpd")
    assert os.access(binary, os.X_OK), f"dumpd not found at {binary}"
    work = Path(tempfile.mkdtemp(prefix="dref", dir="/tmp"))
    sock = str(work / "d.sock")
    (work / "dumpd.json").write_text(json.dumps({"min_free_bytes": 0, "writer_threads": 2}))
    log = open(work / "dumpd.log", "wb")
    proc = subprocess.Popen([binary, "--socket", sock, "--config", str(work / "dumpd.json")],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while True:
        assert proc.poll() is None, (work / "dumpd.log").read_text()
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            break
        except OSError:
            assert time.monotonic() < deadline, "dumpd's socket never answered"
            time.sleep(0.05)
    yield sock
    proc.terminate()
    code = proc.wait(timeout=60)
    log.close()
    text = (work / "dumpd.log").read_text()
    shutil.rmtree(work, ignore_errors=True)
    assert code == 0, text
