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
    # The dead client's reservations stay open forever: the daemon sees it exited and ends
    # the session at once instead of waiting out shutdown_timeout_ms (30 s).
    deadline = time.monotonic() + 10
    while daemon.status()["sessions"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not daemon.status()["sessions"], daemon.logtext()
    assert "exited with records still being filled" in daemon.logtext()
    ops = sorted(files)
    assert ops == list(range(len(ops))), "committed records form a prefix: none skipped"
    assert len(ops) < 200, "ops still in flight at the kill were never committed"
    for op in ops:
        assert set(files[op]) == {"input", "output"}, f"op {op} is whole"
        for io in ("input", "output"):
            np.testing.assert_array_equal(np.load(files[op][io]), expected(op, io, n))
    assert daemon.alive()


def statistic_rows(root):
    """statistic.csv rows of the whole tree, keyed by (op name, io, slot), timestamp dropped."""
    rows = {}
    for csv in sorted(Path(root).rglob("statistic.csv")):
        lines = csv.read_text().splitlines()
        header = lines[0].split(",")
        ts = header.index("Timestamp")
        for line in lines[1:]:
            fields = line.split(",")
            key = (fields[1], fields[header.index("IO")], fields[header.index("Slot")])
            rows[key] = fields[:ts] + fields[ts + 1:]
    return header, rows


ALL_VALUE_STATS = ["max", "min", "avg", "count", "negative zero count", "positive zero count",
                   "nan count", "negative inf count", "positive inf count", "zero count",
                   "l2norm"]


@pytest.mark.parametrize("staging", [0, 1 << 30])
def test_device_statistics_give_the_csv_the_host_bytes_give(daemon, workdir, staging):
    """saved_data "statistic": CUDA tensors send 96 bytes of sums computed on the device;
    statistic.csv must read as it does when the same tensors are dumped from host memory."""
    rows = {}
    for mode in ("device", "host"):
        root = workdir / mode
        config = write_config(workdir, name=f"{mode}.json", path=str(root),
                              saved_data="statistic", statistic_category=ALL_VALUE_STATS)
        out = run(daemon, config, "--ops", 40, "--elements", 5000, "--staging", staging,
                  "--delay-us", 200, "--nan-every", 7, "--host", int(mode == "host"))
        assert out.returncode == 0, out.stderr + daemon.logtext()
        assert "written 80 failed 0" in out.stdout, out.stdout
        expected_statistics = 80 if mode == "device" else 0
        assert f"statistics {expected_statistics}" in out.stdout, out.stdout
        assert not npy_files(root)
        rows[mode] = statistic_rows(root)
    header, device_rows = rows["device"]
    assert header == rows["host"][0]
    assert len(device_rows) == 80
    assert device_rows == rows["host"][1]
    # And the values are the tensors' own: op 3's output is 0.5k + 3, k < 5000.
    out3 = dict(zip([h for h in header if h != "Timestamp"],
                    device_rows[("Default_net_Fake-op3", "output", "0")]))
    assert float(out3["Max Value"]) == pytest.approx(0.5 * 4999 + 3)
    assert out3["Count"] == "5000"
    assert out3["Data Size"] == "20000", "the tensor's size, not the 96 bytes sent"
    assert rows["device"][1][("Default_net_Fake-op7", "output", "0")][
        header.index("NaN Count") - 1] == "1"


def test_overflow_mode_with_device_statistics_keeps_only_ops_with_nan(daemon, workdir):
    config = write_config(workdir, saved_data="statistic", op_debug_mode=3)
    out = run(daemon, config, "--ops", 30, "--elements", 512, "--delay-us", 100,
              "--nan-every", 10)
    assert out.returncode == 0, out.stderr + daemon.logtext()
    assert "statistics 60" in out.stdout, out.stdout
    _, rows = statistic_rows(workdir / "dump")
    assert {name for name, _, _ in rows} == {f"Default_net_Fake-op{i}" for i in (0, 10, 20)}
