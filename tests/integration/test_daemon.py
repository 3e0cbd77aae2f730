"""End-to-end behaviour of dumpd with real producer processes."""

import os
import re
import signal
import socket
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import (SPEC_PRODUCER, Daemon, npy_files, parse_name, run_producer, wait_for,
                      write_config)

OP_TYPES = ["Conv2D", "BiasAdd", "ReLU", "MatMul", "Add"]


def expected(iteration, op, io, slot, elements):
    base = iteration * 1000.0 + op * 10.0 + slot + (0.5 if io == "output" else 0.0)
    return (np.float32(base) + np.arange(elements, dtype=np.float32) * np.float32(0.001))


def op_index(op_name):
    return int(re.search(r"-op(\d+)$", op_name).group(1))


def check_tree(root, rank, iterations, layers, elements, ios=("input", "output")):
    """Every expected file exists once, with the producer's values."""
    files = npy_files(Path(root) / f"rank_{rank}")
    seen = set()
    for f in files:
        rel = f.relative_to(Path(root) / f"rank_{rank}")
        net, graph, iteration = rel.parts[0], rel.parts[1], rel.parts[2]
        assert (net, graph) == ("Net", "0"), rel
        fields = parse_name(f)
        assert fields["op_type"] in OP_TYPES
        assert fields["format"] == "DefaultFormat" and fields["dtype"] == "float32"
        op = op_index(fields["op_name"])
        data = np.load(f)
        np.testing.assert_allclose(
            data, expected(int(iteration), op, fields["io"], int(fields["slot"]), elements))
        seen.add((int(iteration), op, fields["io"], int(fields["slot"])))
    want = set()
    for it in iterations:
        for op in range(layers * 5):
            if "input" in ios:
                want |= {(it, op, "input", 0), (it, op, "input", 1)}
            if "output" in ios:
                want.add((it, op, "output", 0))
    assert seen == want
    assert len(files) == len(want), "duplicate files"


# The row of input 0 in each generation (docs/compatibility.md): the released layout names
# the op like its file and writes the shape as a tuple; the newer one keeps the full name.
SPEC_ROW = {None: 'Add,Default_Add-op0,0,0,{ts},input,0,24,float32,"(2,3)",6,1,9.53939,',
            "2.6": 'Add,Default_Add-op0,0,0,{ts},input,0,24,float32,"(2,3)",6,1,9.53939,',
            "2.7": 'Add,Default/Add-op0,0,0,{ts},input,0,24,float32,"[2,3]",6,1,9.53939,'}


@pytest.mark.parametrize("ms_format", [None, "2.6", "2.7"])
def test_spec_section7_example_through_the_socket(daemon, workdir, ms_format):
    cfg = write_config(workdir, iteration="0", saved_data="full")
    env = dict(os.environ)
    env.pop("DUMPD_MS_FORMAT", None)
    if ms_format:
        env["DUMPD_MS_FORMAT"] = ms_format
    out = subprocess.run([SPEC_PRODUCER, daemon.socket, str(cfg)], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr + daemon.logtext()
    d = workdir / "dump" / "rank_0" / "Net" / "0" / "0"
    names = sorted(p.name for p in d.glob("*.npy"))
    assert len(names) == 3
    pattern = r"Add\.Default_Add-op0\.0\.0\.(\d+)\.(input|output)\.(\d)\.DefaultFormat\.float32\.npy"
    assert [re.fullmatch(pattern, n).group(2, 3) for n in names] == [
        ("input", "0"), ("input", "1"), ("output", "0")]
    out_file = next(d.glob("*.output.0.*.npy"))
    np.testing.assert_array_equal(np.load(out_file), [[8, 10, 12], [14, 16, 18]])
    assert np.load(out_file).dtype == np.float32
    csv = (d / "statistic.csv").read_text().splitlines()
    assert csv[0] == ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,"
                      "Shape,Max Value,Min Value,L2Norm Value")
    rows = sorted(csv[1:], key=lambda r: (r.split(",")[5], r.split(",")[6]))
    ts = re.fullmatch(pattern, names[0]).group(1)
    assert rows[0] == SPEC_ROW[ms_format].format(ts=ts)
    shape = '"[2,3]"' if ms_format == "2.7" else '"(2,3)"'
    assert rows[1].endswith(f',input,1,24,float32,{shape},12,7,23.6432,')
    assert rows[2].endswith(f',output,0,24,float32,{shape},18,8,32.9242,')
    meta = workdir / "dump" / "rank_0" / ".dump_metadata"
    assert (meta / "data_dump.json").read_bytes() == cfg.read_bytes()


def test_every_committed_tensor_lands_with_the_producers_values(daemon, workdir):
    cfg = write_config(workdir)
    run_producer(daemon, cfg, "--iterations", 3, "--layers", 2, "--elements", 777)
    check_tree(workdir / "dump", 0, range(3), 2, 777)
    manifest = (workdir / "dump" / "rank_0" / ".dump_metadata" / "manifest.jsonl").read_text()
    lines = [l for l in manifest.splitlines() if l.strip()]
    assert len(lines) == 3


def test_iteration_filter(daemon, workdir):
    cfg = write_config(workdir, iteration="1|3-4")
    out = run_producer(daemon, cfg, "--iterations", 6, "--layers", 1, "--elements", 16)
    check_tree(workdir / "dump", 0, [1, 3, 4], 1, 16)
    # Pushed down: filtered steps never entered the ring.
    assert "filtered 45" in out.stdout, out.stdout


def test_kernel_filter_by_type_and_regex(daemon, workdir):
    cfg = write_config(workdir, dump_mode=1,
                       kernels=["relu", "name-regex(Default/network/layer1/Conv2D-op\\d+)",
                                "softmax"])
    run_producer(daemon, cfg, "--iterations", 1, "--layers", 2, "--elements", 8)
    ops = sorted({(parse_name(f)["op_type"], op_index(parse_name(f)["op_name"]))
                  for f in npy_files(workdir / "dump")})
    assert ops == [("Conv2D", 5), ("ReLU", 2), ("ReLU", 7)]
    wait_for(lambda: "unused kernel in job config: softmax" in daemon.logtext(),
             what="the unused-kernel report")
    assert "unused kernel in job config: relu" not in daemon.logtext()


def test_io_filter_outputs_only(daemon, workdir):
    cfg = write_config(workdir, input_output=2)
    out = run_producer(daemon, cfg, "--iterations", 2, "--layers", 1, "--elements", 8)
    check_tree(workdir / "dump", 0, range(2), 1, 8, ios=("output",))
    st = daemon.status()
    assert st["totals"]["tensors_filtered"] == 0, "the client filtered before copying"
    assert "filtered 20" in out.stdout


def test_device_not_in_support_device_dumps_nothing(daemon, workdir):
    cfg = write_config(workdir, support_device=[1])
    run_producer(daemon, cfg, "--device", 0, "--iterations", 2, "--layers", 1)
    assert npy_files(workdir / "dump") == []
    run_producer(daemon, cfg, "--device", 1, "--rank", 1, "--iterations", 1, "--layers", 1,
                 "--elements", 4)
    check_tree(workdir / "dump", 1, [0], 1, 4)


def test_concurrent_ranks_write_intact_trees(daemon, workdir):
    cfg = write_config(workdir)
    procs = [subprocess.Popen([os.environ["DUMPD_PRODUCER"], "--socket", daemon.socket,
                               "--config", str(cfg), "--rank", str(r), "--iterations", "3",
                               "--layers", "2", "--elements", "4096", "--quiet"])
             for r in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0], daemon.logtext()
    for r in range(4):
        check_tree(workdir / "dump", r, range(3), 2, 4096)


def test_block_policy_loses_nothing_with_a_tiny_ring(daemon, workdir):
    cfg = write_config(workdir)
    # 64 KiB ring, 3 x 16 KiB tensors per record: the producer waits for the writer often.
    out = run_producer(daemon, cfg, "--ring-bytes", 65536, "--backpressure", "block",
                       "--iterations", 4, "--layers", 4, "--elements", 4096)
    check_tree(workdir / "dump", 0, range(4), 4, 4096)
    assert "dropped 0" in out.stdout


def test_drop_policy_counts_exactly(workdir):
    # A writer slowed by durability=file (fsync per file) and a tiny ring force drops.
    d = Daemon(workdir, settings={"durability": "file", "writer_threads": 1})
    try:
        cfg = write_config(workdir)
        out = run_producer(d, cfg, "--ring-bytes", 65536, "--backpressure", "drop",
                           "--iterations", 4, "--layers", 4, "--elements", 4096)
        m = re.search(r"committed (\d+) records \((\d+) tensors.*dropped (\d+)", out.stdout)
        records, tensors, dropped = map(int, m.groups())
        files = npy_files(workdir / "dump")
        assert tensors == len(files)
        assert tensors + dropped == 4 * 4 * 5 * 3
        st = d.status()
        assert st["totals"]["tensors_written"] == len(files)
        assert st["totals"]["tensors_dropped"] == dropped
    finally:
        assert d.stop() == 0, d.logtext()


def test_client_sigkill_loses_nothing_it_committed(daemon, workdir):
    cfg = write_config(workdir)
    out = run_producer(daemon, cfg, "--iterations", 5, "--layers", 2, "--elements", 2048,
                       "--kill-after", 17, check=False)
    assert out.returncode == -signal.SIGKILL
    assert "committed 17" in out.stdout
    wait_for(lambda: daemon.status()["sessions"] == [], what="the session to drain")
    assert len(npy_files(workdir / "dump")) == 17 * 3
    st = daemon.status()
    assert st["totals"]["tensors_written"] == 17 * 3


def test_client_exit_without_flush_is_drained(daemon, workdir):
    cfg = write_config(workdir)
    run_producer(daemon, cfg, "--iterations", 2, "--layers", 2, "--elements", 100, "--no-flush")
    wait_for(lambda: daemon.status()["sessions"] == [], what="the session to drain")
    check_tree(workdir / "dump", 0, range(2), 2, 100)


def test_sigterm_drains_committed_records_then_exits_zero(workdir):
    d = Daemon(workdir)
    cfg = write_config(workdir)
    p = subprocess.Popen([os.environ["DUMPD_PRODUCER"], "--socket", d.socket, "--config",
                          str(cfg), "--iterations", "4", "--layers", "3", "--elements", "65536",
                          "--ring-bytes", str(256 << 20), "--pause-at-end"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("committed "), line
    n = int(line.split()[1])
    assert d.stop() == 0, d.logtext()
    p.stdin.close()
    p.wait(timeout=60)
    assert len(npy_files(workdir / "dump")) == n * 3
    check_tree(workdir / "dump", 0, range(4), 3, 65536)


def raw_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return s


def read_all(s):
    chunks = []
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


@pytest.mark.parametrize("payload", [
    b"\xff\xff\xff\xff" + b"x" * 10,             # length far above 16 MiB
    struct.pack("<I", (16 << 20) + 1),           # just above the limit
    struct.pack("<I", 5) + b"\xff\xff\xff\xff\xff",  # not a protobuf message
    struct.pack("<I", 100) + b"short",           # truncated frame, then EOF
    b"GET / HTTP/1.1\r\n\r\n",                   # wrong protocol entirely
])
def test_bad_frames_close_only_that_connection(daemon, workdir, payload):
    s = raw_connect(daemon.socket)
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    read_all(s)  # the daemon answers with an Error (or nothing) and closes
    s.close()
    assert daemon.alive()
    cfg = write_config(workdir)
    run_producer(daemon, cfg, "--iterations", 1, "--layers", 1, "--elements", 4)
    check_tree(workdir / "dump", 0, [0], 1, 4)


def test_hello_without_fds_and_unknown_version_get_clear_errors(daemon):
    # Envelope{hello{protocol_major: 99}} hand-encoded: field 1 (len) { field 1 (varint) }.
    hello = b"\x08\x63"
    env = b"\x0a" + bytes([len(hello)]) + hello
    s = raw_connect(daemon.socket)
    s.sendall(struct.pack("<I", len(env)) + env)
    reply = read_all(s)
    s.close()
    assert b"protocol version 99 is not supported" in reply
    hello = b"\x08\x02"
    env = b"\x0a" + bytes([len(hello)]) + hello
    s = raw_connect(daemon.socket)
    s.sendall(struct.pack("<I", len(env)) + env)
    reply = read_all(s)
    s.close()
    assert b"needs 2 file descriptors" in reply
    assert daemon.alive()


def test_invalid_job_config_is_reported_verbatim(daemon, workdir):
    cfg = write_config(workdir, net_name="bad name!")
    out = run_producer(daemon, cfg, check=False)
    assert out.returncode == 3
    assert "net_name only supports alphabetic, digit, or {'-', '_'}, but got: bad name!" in out.stderr


def test_no_daemon_is_a_clear_error(workdir):
    cfg = write_config(workdir)
    out = subprocess.run([os.environ["DUMPD_PRODUCER"], "--socket", str(workdir / "none.sock"),
                          "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "cannot connect to dumpd" in out.stderr and "is the daemon running?" in out.stderr


def test_hostile_names_stay_inside_the_dump_root(daemon, workdir):
    cfg = write_config(workdir)
    run_producer(daemon, cfg, "--op-name-prefix", "../../../../escape/..", "--iterations", 1,
                 "--layers", 1, "--elements", 4)
    run_producer(daemon, cfg, "--rank", 1, "--op-name-prefix", "/" + "x" * 300 + "/..",
                 "--iterations", 1, "--layers", 1, "--elements", 4)
    outside = [p for p in workdir.rglob("*") if "dump" not in p.relative_to(workdir).parts
               and p.suffix == ".npy"]
    assert outside == []
    assert not (Path("/escape")).exists()
    assert len(npy_files(workdir / "dump" / "rank_0")) == 15
    long_dir = workdir / "dump" / "rank_1" / "Net" / "0" / "0"
    assert len(list(long_dir.glob("*.npy"))) == 15
    mapping = (long_dir / "mapping.csv").read_text().splitlines()
    assert len(mapping) == 15
    for line in mapping:
        new, original = line.split(",", 1)
        assert (long_dir / new).exists() and len(original) > 255


def test_second_session_for_same_job_rank_and_net_is_refused(daemon, workdir):
    cfg = write_config(workdir)
    p = subprocess.Popen([os.environ["DUMPD_PRODUCER"], "--socket", daemon.socket, "--config",
                          str(cfg), "--iterations", "1", "--layers", "1", "--pause-at-end"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("committed")
    out = run_producer(daemon, cfg, check=False)
    assert out.returncode == 1
    assert "already dumps rank 0 of net Net" in out.stderr
    ok = run_producer(daemon, cfg, "--rank", 5, "--iterations", 1, "--layers", 1)
    assert ok.returncode == 0
    p.stdin.close()
    assert p.wait(timeout=60) == 0


def test_status_reports_live_sessions(daemon, workdir):
    cfg = write_config(workdir)
    p = subprocess.Popen([os.environ["DUMPD_PRODUCER"], "--socket", daemon.socket, "--config",
                          str(cfg), "--rank", "3", "--iterations", "2", "--layers", "1",
                          "--elements", "10", "--pause-at-end"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("committed")
    st = wait_for(lambda: (lambda s: s if s["sessions"] and
                           s["sessions"][0]["tensors_written"] == 30 else None)(daemon.status()),
                  what="30 tensors written")
    s = st["sessions"][0]
    assert (s["rank"], s["net_name"], s["iteration"], s["state"]) == (3, "Net", 1, "active")
    assert s["pid"] == p.pid and s["uid"] == os.getuid()
    assert s["ms_format"] == "2.6", "the default generation, shown per session"
    assert st["totals"]["sessions_total"] == 1 and st["disk"][0]["free_bytes"] > 0
    human = subprocess.run([os.environ["DUMPCTL_BIN"], "--socket", daemon.socket, "status"],
                           capture_output=True, text=True)
    assert human.returncode == 0 and "Net" in human.stdout and "active" in human.stdout
    p.stdin.close()
    assert p.wait(timeout=60) == 0


def test_unknown_ms_format_is_refused_by_the_client_naming_it(daemon, workdir):
    cfg = write_config(workdir, iteration="0", saved_data="full")
    env = dict(os.environ, DUMPD_MS_FORMAT="2.8")
    out = subprocess.run([SPEC_PRODUCER, daemon.socket, str(cfg)], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode != 0
    assert 'should be "2.6" or "2.7", but got: 2.8' in out.stderr
    assert not (workdir / "dump" / "rank_0" / "Net").exists()


def test_dumpctl_status_without_daemon_fails_in_one_line(workdir):
    out = subprocess.run([os.environ["DUMPCTL_BIN"], "--socket", str(workdir / "no.sock"),
                          "status"], capture_output=True, text=True)
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1 and "cannot connect" in out.stderr


def test_zero_copy_reserve_commit_writes_values_produced_in_the_ring(daemon, workdir):
    cfg = write_config(workdir, input_output=1)  # inputs only: the reservation skips outputs
    run_producer(daemon, cfg, "--zero-copy", "--iterations", 2, "--layers", 2, "--elements", 300)
    check_tree(workdir / "dump", 0, range(2), 2, 300, ios=("input",))
