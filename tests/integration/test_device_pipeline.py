"""Device tensors through the real daemon, on the fake device (no GPU needed): copies that
complete late still give files equal to the tensors at dump time, in order, and a producer
killed with copies in flight leaves every committed record intact."""

import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import npy_files, parse_name, write_config

FAKE_GPU_PRODUCER = os.environ.get("DUMPD_FAKE_GPU_PRODUCER", "")

pytestmark = pytest.mark.skipif(not FAKE_GPU_PRODUCER,
                                reason="DUMPD_FAKE_GPU_PRODUCER is not set (run through ctest)")


def expected(op, io, n):
    k = np.arange(n)
    if io == "input":
        return (k + 7 * op).astype(np.int32)
    return (0.5 * k + op).astype(np.float32)


def files_by_op(root):
    out = {}
    for f in npy_files(root):
        fields = parse_name(f)
        op = int(fields["op_name"].rsplit("-op", 1)[1])
        out.setdefault(op, {})[fields["io"]] = f
    return out


def run(daemon, config, *args, timeout=120):
    cmd = [FAKE_GPU_PRODUCER, "--socket", daemon.socket, "--config", str(config),
           *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("staging", [0, 64 << 10, 1 << 30])
def test_late_device_copies_give_the_bytes_at_dump_time(daemon, workdir, staging):
    config = write_config(workdir)
    n = 3000
    out = run(daemon, config, "--ops", 60, "--elements", n, "--staging", staging,
              "--delay-us", 300)
    assert out.returncode == 0, out.stderr + daemon.logtext()
    assert "written 120 failed 0" in out.stdout, out.stdout
    files = files_by_op(workdir / "dump")
    assert sorted(files) == list(range(60))
    for op, sides in files.items():
        for io in ("input", "output"):
            np.testing.assert_array_equal(np.load(sides[io]), expected(op, io, n),
                                          err_msg=f"op {op} {io}")
    if staging == 64 << 10:
        assert "staged 60" in out.stdout, out.stdout


def test_killed_with_copies_in_flight_keeps_every_committed_record(daemon, workdir):
    config = write_config(workdir)
    n = 2048
    out = run(daemon, config, "--ops", 200, "--elements", n, "--delay-us", 3000,
              "--kill-after", 50)
    assert out.returncode == -9, out.stdout + out.stderr
    assert "flushed 50" in out.stdout
    in_flight = int(out.stdout.split("in flight ")[1].split()[0])
    assert in_flight > 0, "the kill should catch copies in flight: " + out.stdout
    # The daemon writes what was committed; wait until the files stop changing.
    last, stable_since = -1, time.monotonic()
    while time.monotonic() - stable_since < 1.5:
        count = len(npy_files(workdir / "dump"))
        if count != last:
            last, stable_since = count, time.monotonic()
        time.sleep(0.1)
    files = files_by_op(workdir / "dump")
    assert set(range(50)) <= set(files), "every op flushed before the kill is on disk"
    ops = sorted(files)
    assert ops == list(range(len(ops))), "committed records form a prefix: none skipped"
    assert len(ops) < 200, "ops still in flight at the kill were never committed"
    for op in ops:
        assert set(files[op]) == {"input", "output"}, f"op {op} is whole"
        for io in ("input", "output"):
            np.testing.assert_array_equal(np.load(files[op][io]), expected(op, io, n))
    assert daemon.alive()
