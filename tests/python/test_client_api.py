"""dumpd.Client against a real daemon: API behaviour, files written, and errors."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

import dumpd
from conftest import (Daemon, dump_files, index_files, make_config, sanitize, start_daemon,
                      stop_daemon, wait_for)


def test_import_exposes_the_api() -> None:
    assert dumpd.__version__
    for name in ("set_step", "should_dump", "dump", "dump_op", "dump_constant", "save_graph",
                 "save_execution_order", "save_kernel_args", "flush", "stats", "close"):
        assert callable(getattr(dumpd.Client, name)), name
    assert issubclass(dumpd.ConfigError, dumpd.DumpdError)
    assert issubclass(dumpd.DaemonError, dumpd.DumpdError)
    assert issubclass(dumpd.DaemonTimeout, dumpd.DaemonError)


def test_help_documents_the_arguments() -> None:
    doc = dumpd.Client.__doc__ + dumpd.Client.dump.__doc__
    for word in ("backpressure", "ring_bytes", "bfloat16", "int4", "uint1", "buffer"):
        assert word in doc


def test_dump_writes_the_tensor_under_the_spec_name(daemon: Daemon, config: Path,
                                                    tmp_path: Path) -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    with dumpd.Client(config, socket=daemon.socket) as client:
        client.set_step(3, graph_id=2)
        assert client.dump("Add", "Default/Add-op0", "input", 1, x, task_id=7, stream_id=9)
        counts = client.flush()
    assert counts["tensors_written"] == 1
    [f] = dump_files(tmp_path / "dump")
    assert (f.rank, f.net, f.graph, f.iteration) == (0, "Net", "2", "3")
    assert (f.op_type, f.op_name, f.task_id, f.stream_id) == ("Add", "Default_Add-op0", 7, 9)
    assert (f.io, f.slot, f.format, f.dtype) == ("input", 1, "DefaultFormat", "float32")
    np.testing.assert_array_equal(f.load(), x)


def test_dump_op_is_one_record_with_slots_by_position(daemon: Daemon, config: Path,
                                                      tmp_path: Path) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), dtype=np.float32)
    with dumpd.Client(config, socket=daemon.socket) as client:
        assert client.dump_op("Add", "Default/net-Net/Add-op4", inputs=[x, None, y],
                              outputs=(x + y,))
        counts = client.flush()
        stats = client.stats()
        assert stats["records_committed"] >= 1
        # The caller's time inside dump_op is counted; host arrays never reach the device path.
        assert stats["dump_ns"] > 0
        assert stats["device_submit_ns"] == stats["device_enqueue_ns"] == 0
    assert counts["records"] == 1 and counts["tensors_written"] == 3
    files = index_files(dump_files(tmp_path / "dump"))
    name = sanitize("Default/net-Net/Add-op4")
    assert set(files) == {(0, name, "input", 0), (0, name, "input", 2), (0, name, "output", 0)}
    np.testing.assert_array_equal(files[(0, name, "input", 2)].load(), y)
    np.testing.assert_array_equal(files[(0, name, "output", 0)].load(), x + y)
    # One op execution: every tensor carries the same timestamp.
    assert len({f.timestamp for f in files.values()}) == 1


def test_caller_may_reuse_its_buffer_as_soon_as_dump_returns(daemon: Daemon, config: Path,
                                                             tmp_path: Path) -> None:
    buf = np.full(1024, 1.0, dtype=np.float64)
    with dumpd.Client(config, socket=daemon.socket) as client:
        client.dump("Mul", "Default/Mul-op1", "output", 0, buf)
        buf[:] = -5.0  # overwritten before the daemon could possibly have written it
        client.flush()
    [f] = dump_files(tmp_path / "dump")
    np.testing.assert_array_equal(f.load(), np.full(1024, 1.0))


def test_non_contiguous_arrays_are_made_contiguous(daemon: Daemon, config: Path,
                                                   tmp_path: Path) -> None:
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    views = {0: base.T, 1: base[:, ::2], 2: base[::-1]}
    with dumpd.Client(config, socket=daemon.socket) as client:
        client.dump_op("Slice", "Default/Slice-op0", outputs=[views[0], views[1], views[2]])
        client.flush()
    files = index_files(dump_files(tmp_path / "dump"))
    for slot, v in views.items():
        np.testing.assert_array_equal(files[(0, "Default_Slice-op0", "output", slot)].load(), v)


def test_strided_layouts_are_written_in_c_order(daemon: Daemon, config: Path,
                                               tmp_path: Path) -> None:
    """Channels-last, transposed, reversed, broadcast and sliced views of every element size,
    and raw bfloat16 bits from a strided int16 view: each file holds the view's values in C
    order, as numpy reads it."""
    rng = np.random.default_rng(7)
    nhwc = rng.standard_normal((2, 9, 7, 5)).astype(np.float32)
    views = [
        nhwc.transpose(0, 3, 1, 2),  # channels-last NCHW
        np.arange(60, dtype=np.int8).reshape(6, 10).T,
        np.arange(60, dtype=np.float16).reshape(3, 4, 5)[:, ::-1, ::2],
        np.broadcast_to(np.arange(5, dtype=np.int64), (4, 5)),
        (rng.standard_normal((4, 6)) + 1j).astype(np.complex128)[::2, 1::2],
        np.arange(48, dtype=np.float64).reshape(4, 3, 4).transpose(2, 0, 1)[1:],
    ]
    raw = np.arange(40, dtype=np.int16).reshape(5, 8).T
    with dumpd.Client(config, socket=daemon.socket) as client:
        client.dump_op("Views", "Default/Views-op0", outputs=views + [(raw, "bfloat16")])
        client.flush()
    files = index_files(dump_files(tmp_path / "dump"))
    for slot, v in enumerate(views):
        got = files[(0, "Default_Views-op0", "output", slot)].load()
        assert got.shape == v.shape and got.dtype == v.dtype
        np.testing.assert_array_equal(got, v)
    bf16 = files[(0, "Default_Views-op0", "output", len(views))].load()
    want = (np.ascontiguousarray(raw).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(bf16, want)


def test_a_strided_array_is_copied_without_a_contiguous_temporary(daemon: Daemon, config: Path,
                                                                  tmp_path: Path) -> None:
    """A channels-last view of 8 MiB goes into the ring in one pass: numpy allocates nothing
    for it (numpy reports its data allocations to tracemalloc)."""
    import tracemalloc

    nhwc = np.ones((8, 64, 64, 64), dtype=np.float32)
    view = nhwc.transpose(0, 3, 1, 2)
    with dumpd.Client(config, socket=daemon.socket) as client:
        tracemalloc.start()
        try:
            client.dump_op("Conv2D", "Default/Conv2D-op0", outputs=[view])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        client.flush()
    assert peak < nhwc.nbytes // 8, f"dump_op allocated {peak} bytes for an 8 MiB view"
    [f] = dump_files(tmp_path / "dump")
    np.testing.assert_array_equal(f.load(), view)


def test_any_buffer_protocol_object_is_accepted(daemon: Daemon, config: Path,
                                                tmp_path: Path) -> None:
    raw = bytes(range(10))
    with dumpd.Client(config, socket=daemon.socket) as client:
        client.dump_op("Buf", "Default/Buf-op0",
                       outputs=[raw, bytearray(raw), memoryview(np.arange(4, dtype=np.int16))])
        client.flush()
    files = index_files(dump_files(tmp_path / "dump"))
    out = [files[(0, "Default_Buf-op0", "output", s)] for s in range(3)]
    assert [f.dtype for f in out] == ["uint8", "uint8", "int16"]
    np.testing.assert_array_equal(out[0].load(), np.arange(10, dtype=np.uint8))
    np.testing.assert_array_equal(out[1].load(), np.arange(10, dtype=np.uint8))
    np.testing.assert_array_equal(out[2].load(), np.arange(4, dtype=np.int16))


def test_scalars_and_empty_tensors(daemon: Daemon, config: Path, tmp_path: Path) -> None:
    with dumpd.Client(config, socket=daemon.socket) as client:
        client.dump_op("Loss", "Default/Loss-op0",
                       outputs=[np.array(2.5, dtype=np.float32), np.zeros((0, 3), np.float32)])
        counts = client.flush()
    assert counts["tensors_failed"] == 0
    files = index_files(dump_files(tmp_path / "dump"))
    scalar = files[(0, "Default_Loss-op0", "output", 0)].load()
    assert scalar.shape == () and scalar == np.float32(2.5)
    # MindSpore writes no file for a zero-element tensor: counted as skipped.
    assert (0, "Default_Loss-op0", "output", 1) not in files
    assert counts["tensors_written"] == 1 and counts["tensors_skipped"] == 1, counts


def test_every_tensor_received_is_counted_once(daemon: Daemon, tmp_path: Path) -> None:
    """Issue 48: a 4x0x8x3 strided view was received, and then counted nowhere (95 received,
    94 written). Empty tensors, contiguous or strided, get no file (as in MindSpore) and are
    counted as skipped; the figures add up: received = written + dropped + failed + filtered
    + skipped."""
    config = make_config(tmp_path, input_output=2)  # outputs only: inputs are filtered
    base = np.zeros((4, 3, 8, 1), np.float32)
    strided_empty = np.lib.stride_tricks.as_strided(base, shape=(4, 0, 8, 3),
                                                    strides=(96, 4, 12, 32))
    channels_last = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 5, 3, 4) \
        .transpose(0, 2, 3, 1)  # a non-empty strided view: written
    with dumpd.Client(config, socket=daemon.socket) as client:
        client.dump_op("Conv2D", "Default/Conv-op0",
                       inputs=[np.ones(3, np.float32)],
                       outputs=[strided_empty, np.zeros((4, 0, 8, 3), np.float32),
                                channels_last, np.float32(1.5)])
        counts = client.flush()
    parts = ("tensors_written", "tensors_dropped", "tensors_failed", "tensors_filtered",
             "tensors_skipped")
    assert counts["tensors_received"] == sum(counts[k] for k in parts), counts
    assert counts["tensors_written"] == 2 and counts["tensors_skipped"] == 2, counts
    files = index_files(dump_files(tmp_path / "dump"))
    np.testing.assert_array_equal(files[(0, "Default_Conv-op0", "output", 2)].load(),
                                  channels_last)
    assert (0, "Default_Conv-op0", "output", 0) not in files


def test_iteration_filter_skips_without_copying(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, iteration="1|3")
    x = np.ones(4, dtype=np.float32)
    written = []
    with dumpd.Client(config, socket=daemon.socket) as client:
        for step in range(5):
            client.set_step(step)
            assert client.step_selected == (step in (1, 3))
            assert client.should_dump("Default/Add-op0") == (step in (1, 3))
            written.append(client.dump("Add", "Default/Add-op0", "output", 0, x))
        stats = client.stats()
        client.flush()
    assert written == [False, True, False, True, False]
    assert stats["tensors_filtered"] == 3 and stats["tensors_committed"] == 2
    assert sorted(int(f.iteration) for f in dump_files(tmp_path / "dump")) == [1, 3]


def test_filtered_tensor_data_is_never_read(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, iteration="5")

    class Exploding:
        def __array__(self, *args):  # would be called if the client looked at the data
            raise AssertionError("filtered data was read")

    with dumpd.Client(config, socket=daemon.socket) as client:
        client.set_step(0)
        assert not client.dump("Add", "Default/Add-op0", "output", 0, Exploding())
        assert not client.dump_op("Add", "Default/Add-op0", inputs=[Exploding()],
                                  outputs=[Exploding()])


def test_kernel_and_io_filters(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, dump_mode=1, input_output=2,
                         kernels=["conv", "name-regex(Default/fc.+)"])
    x = np.ones(2, dtype=np.float32)
    ops = {"Default/conv1-Conv2d/Conv2D-op1": "Conv2D", "Default/relu-ReLU/ReLU-op2": "ReLU",
           "Default/fc1-Dense/MatMul-op3": "MatMul"}
    with dumpd.Client(config, socket=daemon.socket) as client:
        assert client.should_dump("Default/conv1-Conv2d/Conv2D-op1", "output")
        assert not client.should_dump("Default/conv1-Conv2d/Conv2D-op1", "input")
        assert not client.should_dump("Default/relu-ReLU/ReLU-op2", "output")
        for name, op_type in ops.items():
            client.dump_op(op_type, name, inputs=[x], outputs=[x])
        client.flush()
    got = {(f.op_name, f.io) for f in dump_files(tmp_path / "dump")}
    assert got == {("Default_conv1-Conv2d_Conv2D-op1", "output"),
                   ("Default_fc1-Dense_MatMul-op3", "output")}


def test_device_not_in_support_device_dumps_nothing(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, support_device=[1])
    with dumpd.Client(config, socket=daemon.socket, device=0) as client:
        assert not client.step_selected
        assert not client.dump("Add", "Default/Add-op0", "output", 0, np.ones(2))


def test_rank_names_the_rank_directory(daemon: Daemon, config: Path, tmp_path: Path) -> None:
    with dumpd.Client(config, socket=daemon.socket, rank=5) as client:
        assert client.rank == 5
        client.dump("Add", "Default/Add-op0", "output", 0, np.ones(2))
    [f] = dump_files(tmp_path / "dump")
    assert f.rank == 5


@pytest.mark.parametrize("ms_format, env, row", [
    (None, None, 'Add,Default_net_Add-op0,0,0,{ts},input,0,12,float32,"(3)",3,1,3.74166,'),
    ("2.7", None, 'Add,Default/net/Add-op0,0,0,{ts},input,0,12,float32,"[3]",3,1,3.74166,'),
    (None, "2.7", 'Add,Default/net/Add-op0,0,0,{ts},input,0,12,float32,"[3]",3,1,3.74166,'),
    ("2.6", "2.7", 'Add,Default_net_Add-op0,0,0,{ts},input,0,12,float32,"(3)",3,1,3.74166,'),
])
def test_ms_format_picks_the_statistic_csv_generation(daemon: Daemon, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      ms_format, env, row) -> None:
    """The option wins over $DUMPD_MS_FORMAT; without either, MindSpore 2.6's layout."""
    if env is None:
        monkeypatch.delenv("DUMPD_MS_FORMAT", raising=False)
    else:
        monkeypatch.setenv("DUMPD_MS_FORMAT", env)
    config = make_config(tmp_path, saved_data="statistic")
    kwargs = {} if ms_format is None else {"ms_format": ms_format}
    x = np.array([1, 2, 3], dtype=np.float32)
    with dumpd.Client(config, socket=daemon.socket, **kwargs) as client:
        client.dump("Add", "Default/net/Add-op0", "input", 0, x)
        client.flush()
    [csv] = (tmp_path / "dump").rglob("statistic.csv")
    line = csv.read_text().splitlines()[1]
    ts = line.split(",")[4]
    assert line == row.format(ts=ts)


def test_config_from_environment_and_dict(daemon: Daemon, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    config = make_config(tmp_path)
    monkeypatch.setenv("MINDSPORE_DUMP_CONFIG", str(config))
    monkeypatch.setenv("DUMPD_SOCKET", daemon.socket)
    monkeypatch.setenv("RANK_ID", "3")
    with dumpd.Client() as client:
        assert client.rank == 3
        assert client.path == str(tmp_path / "dump")
    as_dict = json.loads(config.read_text())
    as_dict["common_dump_settings"]["net_name"] = "FromDict"
    with dumpd.Client(as_dict, socket=daemon.socket, rank=0) as client:
        assert client.net_name == "FromDict"


def test_constant_graph_execution_order_and_kernel_args(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, e2e={"save_kernel_args": True})
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    with dumpd.Client(config, socket=daemon.socket) as client:
        client.set_step(0)
        client.dump_constant("conv1.weight", w)
        client.save_graph(0, ir_text="%1 = Add(%0, %0)\n", pb_bytes=b"\x08\x01")
        client.save_execution_order(0, ["Default/Add-op0", "Default/Mul-op1"])
        client.save_kernel_args("MatMul", "Default/MatMul-op2",
                                {"transpose_a": False, "alpha": 0.5})
        client.flush()
    rank = tmp_path / "dump" / "rank_0"
    [const] = (rank / "Net" / "0" / "constants").glob("*.npy")
    assert const.name.startswith("Parameter.data-conv1_weight.0.0.")
    assert const.name.endswith(".output.0.DefaultFormat.float32.npy")
    np.testing.assert_array_equal(np.load(const), w)
    assert (rank / "graphs" / "ms_output_trace_code_graph_0.ir").read_text() == \
        "%1 = Add(%0, %0)\n"
    assert (rank / "graphs" / "ms_output_trace_code_graph_0.pb").read_bytes() == b"\x08\x01"
    order = (rank / "execution_order" / "ms_execution_order_graph_0.csv").read_text()
    assert order.splitlines() == ["NodeExecutionOrder-FullNameWithScope", "Default/Add-op0",
                                  "Default/Mul-op1"]
    args = json.loads((rank / "Net" / "0" / "0" /
                       "MatMul.Default_MatMul-op2.json").read_text())
    assert args == {"transpose_a": "False", "alpha": "0.5"}


def test_calls_from_many_threads_are_serialised(daemon: Daemon, config: Path,
                                                tmp_path: Path) -> None:
    threads, per_thread = 4, 50
    with dumpd.Client(config, socket=daemon.socket) as client:
        def work(t: int) -> None:
            for i in range(per_thread):
                client.dump("Add", f"Default/t{t}/Add-op{i}", "output", 0,
                            np.full(64, t * 1000 + i, dtype=np.int64))

        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        counts = client.flush()
    assert counts["tensors_written"] == threads * per_thread
    for f in dump_files(tmp_path / "dump"):
        t = int(f.op_name.split("_")[1][1:])
        i = int(f.op_name.rsplit("-op", 1)[1])
        np.testing.assert_array_equal(f.load(), np.full(64, t * 1000 + i))


def test_blocking_backpressure_loses_nothing_with_a_small_ring(daemon: Daemon, config: Path,
                                                               tmp_path: Path) -> None:
    n = 64
    with dumpd.Client(config, socket=daemon.socket, ring_bytes=256 << 10,
                      backpressure="block") as client:
        for i in range(n):
            client.dump("Big", f"Default/Big-op{i}", "output", 0,
                        np.full(16 << 10, i, dtype=np.float32))  # 64 KiB each
        counts = client.flush()
    assert counts["tensors_written"] == n and counts["tensors_dropped"] == 0
    assert len(dump_files(tmp_path / "dump")) == n


def _thread_in_poll(native_id: int) -> bool:
    """True while the thread sleeps in the client's wait for ring space: futex(2) (x86-64
    syscall 202) with op FUTEX_WAIT (0, shared: the word is in the ring). A thread waiting for
    the GIL also sleeps in futex(2), but with a private op (FUTEX_PRIVATE_FLAG, 128)."""
    with open(f"/proc/self/task/{native_id}/syscall") as f:
        fields = f.read().split()
    return fields[0] == "202" and int(fields[2], 16) == 0


@pytest.mark.conditional
@pytest.mark.skipif(platform.machine() != "x86_64", reason="reads x86-64 syscall numbers")
def test_blocked_dump_releases_the_gil(config: Path, tmp_path: Path) -> None:
    d = start_daemon()
    try:
        client = dumpd.Client(config, socket=d.socket, ring_bytes=128 << 10,
                              backpressure="block")
        d.proc.send_signal(signal.SIGSTOP)  # the daemon stops draining: the ring fills up
        started = []

        def producer() -> None:
            for i in range(6):
                started.append(i)
                client.dump("Big", f"Default/Big-op{i}", "output", 0,
                            np.full(16 << 10, i, dtype=np.float32))  # 64 KiB each

        th = threading.Thread(target=producer)
        th.start()
        # Two 64 KiB records cannot fit a 128 KiB ring: the second dump waits for space.
        # This thread keeps running Python meanwhile, so the waiting call released the GIL.
        wait_for(lambda: len(started) >= 2 and _thread_in_poll(th.native_id), 30,
                 "the producer to wait for ring space")
        assert th.is_alive() and len(started) == 2
        d.proc.send_signal(signal.SIGCONT)
        th.join(timeout=60)
        assert not th.is_alive()
        counts = client.flush()
        assert counts["tensors_written"] == 6
        assert client.stats()["blocked_waits"] >= 1
        client.close()
    finally:
        d.proc.send_signal(signal.SIGCONT)
        stop_daemon(d)


def test_drop_backpressure_skips_and_counts_when_the_ring_is_full(config: Path,
                                                                  tmp_path: Path) -> None:
    d = start_daemon()
    try:
        client = dumpd.Client(config, socket=d.socket, ring_bytes=128 << 10,
                              backpressure="drop")
        d.proc.send_signal(signal.SIGSTOP)
        results = [client.dump("Big", f"Default/Big-op{i}", "output", 0,
                               np.full(16 << 10, i, dtype=np.float32)) for i in range(6)]
        d.proc.send_signal(signal.SIGCONT)
        stats = client.stats()
        counts = client.flush()
        client.close()
    finally:
        d.proc.send_signal(signal.SIGCONT)
        stop_daemon(d)
    kept = [i for i, ok in enumerate(results) if ok]
    assert results[0] and not results[-1]  # the first fits, the ring is full by the last
    assert stats["tensors_dropped"] == 6 - len(kept) == stats["records_dropped"]
    assert counts["tensors_written"] == len(kept)
    assert sorted(int(f.op_name.rsplit("-op", 1)[1])
                  for f in dump_files(tmp_path / "dump")) == kept


def test_close_is_idempotent_and_later_calls_fail(daemon: Daemon, config: Path) -> None:
    client = dumpd.Client(config, socket=daemon.socket)
    client.close()
    client.close()
    assert client.closed and client.stats()["closed"]
    with pytest.raises(dumpd.DaemonError, match="closed"):
        client.dump("Add", "Default/Add-op0", "output", 0, np.ones(2))
    with pytest.raises(dumpd.DaemonError, match="closed"):
        client.flush()
    with pytest.raises(dumpd.DaemonError, match="closed"):
        client.set_step(1)


def test_flush_after_close_of_daemon_side_raises(config: Path) -> None:
    from conftest import start_daemon, stop_daemon

    d = start_daemon()
    client = dumpd.Client(config, socket=d.socket)
    stop_daemon(d)
    with pytest.raises(dumpd.DaemonError):
        client.dump("Add", "Default/Add-op0", "output", 0, np.ones(2))
        client.flush(timeout=10)


# Errors ---------------------------------------------------------------------------------------

def test_config_error_carries_the_validator_message(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, net_name="bad name")
    with pytest.raises(dumpd.ConfigError) as e:
        dumpd.Client(config, socket=daemon.socket)
    assert str(e.value) == ("net_name only supports alphabetic, digit, or {'-', '_'}, "
                            "but got: bad name")


def test_config_error_for_missing_key_and_missing_file(daemon: Daemon, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "missing_key.json"
    bad.write_text(json.dumps({"common_dump_settings": {"dump_mode": 0}}))
    with pytest.raises(dumpd.ConfigError, match="not found"):
        dumpd.Client(bad, socket=daemon.socket)
    with pytest.raises(dumpd.ConfigError, match="nope.json"):
        dumpd.Client(tmp_path / "nope.json", socket=daemon.socket)
    monkeypatch.delenv("MINDSPORE_DUMP_CONFIG", raising=False)
    with pytest.raises(dumpd.ConfigError, match="MINDSPORE_DUMP_CONFIG"):
        dumpd.Client(socket=daemon.socket)


def test_daemon_error_when_no_daemon_listens(config: Path, tmp_path: Path) -> None:
    with pytest.raises(dumpd.DaemonError, match="is the daemon running"):
        dumpd.Client(config, socket="/tmp/dumpd-test-no-such.sock")


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"backpressure": "sometimes"}, ValueError, "backpressure"),
    ({"rank": -1}, ValueError, "rank"),
    ({"ring_bytes": 0}, ValueError, "ring_bytes"),
    ({"ring_bytes": 1000}, ValueError, "minimum"),
    ({"socket": "/tmp/" + "s" * 200}, ValueError, "longer than"),
    ({"ms_format": "2.5"}, ValueError, "ms_format must be"),
])
def test_bad_constructor_arguments(daemon: Daemon, config: Path, kwargs, exc, match) -> None:
    kwargs.setdefault("socket", daemon.socket)
    with pytest.raises(exc, match=match):
        dumpd.Client(config, **kwargs)


def test_bad_dump_arguments(daemon: Daemon, config: Path) -> None:
    x = np.ones(4, dtype=np.float32)
    with dumpd.Client(config, socket=daemon.socket, ring_bytes=64 << 10) as client:
        with pytest.raises(ValueError, match="io must be"):
            client.dump("Add", "Default/Add-op0", "inout", 0, x)
        with pytest.raises(ValueError, match="io must be"):
            client.should_dump("Default/Add-op0", "both")
        with pytest.raises(ValueError, match="slot"):
            client.dump("Add", "Default/Add-op0", "output", -1, x)
        with pytest.raises(ValueError, match="iteration"):
            client.set_step(-1)
        with pytest.raises(TypeError, match="buffer protocol"):
            client.dump("Add", "Default/Add-op0", "output", 0, [1.0, 2.0])
        with pytest.raises(TypeError, match="unsupported"):
            client.dump("Add", "Default/Add-op0", "output", 0, np.array(["a", None], object))
        with pytest.raises(TypeError, match="unsupported"):
            client.dump("Add", "Default/Add-op0", "output", 0,
                        np.array([1, 2], dtype="datetime64[s]"))
        with pytest.raises(TypeError, match="unsupported"):
            client.dump("Add", "Default/Add-op0", "output", 0, np.ones(2, dtype=np.longdouble))
        with pytest.raises(ValueError, match="big-endian"):
            client.dump("Add", "Default/Add-op0", "output", 0, np.ones(2, dtype=">f4"))
        with pytest.raises(ValueError, match="needs uint16 or int16"):
            client.dump("Add", "Default/Add-op0", "output", 0, x, dtype="bfloat16")
        with pytest.raises(ValueError, match="needs int8 or uint8"):
            client.dump("Add", "Default/Add-op0", "output", 0, x, dtype="int4")
        with pytest.raises(ValueError, match="at least one dimension"):
            client.dump("Add", "Default/Add-op0", "output", 0, np.int8(3), dtype="int4")
        with pytest.raises(ValueError, match="needs uint8"):
            client.dump("Add", "Default/Add-op0", "output", 0, x, dtype="uint1")
        with pytest.raises(ValueError, match="unknown dtype"):
            client.dump("Add", "Default/Add-op0", "output", 0, x, dtype="float8")
        with pytest.raises(ValueError, match="does not match"):
            client.dump("Add", "Default/Add-op0", "output", 0, x, dtype="int32")
        with pytest.raises(TypeError, match="lists or tuples"):
            client.dump_op("Add", "Default/Add-op0", outputs=x)
        with pytest.raises(TypeError, match="pair"):
            client.dump_op("Add", "Default/Add-op0", outputs=[(x, None, 1, 2)])
        with pytest.raises(TypeError, match="identity must be an int"):
            client.dump_op("Add", "Default/Add-op0", outputs=[(x, None, "one")])
        with pytest.raises(TypeError, match="dtype must be a str"):
            client.dump_op("Add", "Default/Add-op0", outputs=[(x, 3)])
        with pytest.raises(ValueError, match="ring_bytes"):
            client.dump("Add", "Default/Add-op0", "output", 0, np.ones(1 << 20, np.float32))
        with pytest.raises(ValueError, match="save_graph needs"):
            client.save_graph(0)
        with pytest.raises(ValueError, match="timeout"):
            client.flush(timeout=-1)
        # The session survives bad arguments.
        assert client.dump("Add", "Default/Add-op0", "output", 0, x)
        assert client.flush()["tensors_written"] == 1


def test_dump_mode_2_dumps_only_marked_ops(daemon: Daemon, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, dump_mode=2)
    x = np.arange(4, dtype=np.float32)
    with dumpd.Client(cfg, socket=daemon.socket) as client:
        assert not client.should_dump("Default/Add-op0")
        assert client.should_dump("Default/Add-op0", marked=True)
        assert not client.dump("Add", "Default/Add-op0", "output", 0, x)
        assert client.dump("Mul", "Default/Mul-op1", "output", 0, x, marked=True)
        assert client.dump_op("Sub", "Default/Sub-op2", inputs=[x], outputs=[x], marked=True)
        assert not client.dump_op("Div", "Default/Div-op3", inputs=[x], outputs=[x])
        counts = client.flush()
    assert counts["tensors_written"] == 3
    assert sorted(f.op_type for f in dump_files(tmp_path / "dump")) == ["Mul", "Sub", "Sub"]


def test_session_ids_number_sessions_and_match_the_total(config: Path) -> None:
    """Session ids count dump sessions only (not dumpctl's connections), so the ids and
    status's total tell the same story (issue 38: ids 2, 6, 19 beside "11 total")."""
    d = start_daemon()
    try:
        def status() -> dict:
            out = subprocess.run([os.environ["DUMPCTL_BIN"], "--socket", d.socket, "status",
                                  "--json"], capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)

        ids = []
        for _ in range(3):
            status()  # a connection, not a session
            with dumpd.Client(str(config), socket=d.socket) as client:
                ids.append(client.stats()["session_id"])
        assert ids == [1, 2, 3]
        assert status()["totals"]["sessions_total"] == 3
    finally:
        stop_daemon(d)


def test_the_first_step_mark_of_iteration_0_is_sent(daemon: Daemon, tmp_path: Path) -> None:
    """MindSpore counts iterations from 0. The client once skipped set_step(0) as a repeat of
    its initial step, so iteration 0 was never completed by its step mark: it had no line in
    ms_global_execution_order when it dumped nothing (found by the real MindSpore, issue 39)
    and no manifest line until the session closed."""
    # "0|2" with a kernels list nothing matches: every iteration dumps nothing, yet the
    # selected ones are listed, as MindSpore lists them.
    config = make_config(tmp_path, iteration="0|2", dump_mode=1, kernels=["NoSuchOp"])
    client = dumpd.Client(str(config), socket=daemon.socket)
    x = np.ones(4, dtype=np.float32)
    for step in range(4):
        client.set_step(step)
        client.dump_op("Add", "Default/Add-op0", inputs=[x], outputs=[x])
    client.flush()
    rank = tmp_path / "dump" / "rank_0"
    manifest = rank / ".dump_metadata" / "manifest.jsonl"
    # Iterations 0 and 2 are complete before the session ends (3 is still open).
    lines = [json.loads(l) for l in manifest.read_text().splitlines()]
    assert [l["iteration"] for l in lines] == [0, 2]
    client.close()
    order = rank / "execution_order" / "ms_global_execution_order_graph_0.csv"
    assert order.read_text() == "0\n2\n"
