"""errors="warn" keeps training going through what the client refuses (a record larger than
the ring) and through a full ring under the block policy's timeout, and a timed-out step
mark leaves no step filed under the wrong iteration. Real dumpd, dumpctl and client; numpy."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import dump_files, dumpctl, make_config, sanitize, start_daemon, stop_daemon

RING = 128 << 10


def wide_net() -> nn.Module:
    """fc1's output is 16 floats; fc2's, 64 Ki floats (256 KiB): larger than RING."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 64 << 10))


def fill_ring_until_timeout(client: dumpd.Client) -> int:
    """With the daemon stopped: 64-byte control records until one times out, so that no
    other record fits. Returns how many went in."""
    for n in range(RING // 64 + 1):
        try:
            client.report_loss(1.0)
        except dumpd.DaemonTimeout:
            return n
    raise AssertionError("the ring never filled")


def job_iteration(sock: str) -> int:
    out = dumpctl(sock, "status", "--json")
    assert out.returncode == 0, out.stderr
    [s] = json.loads(out.stdout)["sessions"]
    return s["job_iteration"]


def test_a_record_larger_than_the_ring_warns_and_training_goes_on(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    d = start_daemon()
    try:
        model = wide_net()
        client = dumpd.Client(config, socket=d.socket, ring_bytes=RING)
        handle = dumpd.torch.attach(model, client, errors="warn")
        with pytest.warns(RuntimeWarning, match="does not fit the ring") as record:
            for _ in dumpd.torch.steps(client, range(3), flush=True, errors="warn"):
                model(torch.randn(1, 16))
        assert len(record) == 1  # once: dumping stopped there
        assert isinstance(handle.error, ValueError) and "ring_bytes" in str(handle.error)
        first = dumpd.torch.op_names(model)["0"][1]
        files = dump_files(tmp_path / "dump")
        # What came before the refused op is on disk; nothing after it was attempted.
        assert {(f.iteration, f.op_name) for f in files} == {("0", sanitize(first))}
        client.close()

        client = dumpd.Client(config, socket=d.socket, ring_bytes=RING)
        dumpd.torch.attach(model, client)  # errors="raise": the refusal reaches the caller
        with pytest.raises(ValueError, match="does not fit the ring"):
            model(torch.randn(1, 16))
        client.close()
    finally:
        stop_daemon(d)


def test_a_timed_out_step_mark_is_marked_again_at_the_next_step(tmp_path: Path) -> None:
    """block_timeout_ms: the mark of step 2 finds the ring full and times out; steps() warns
    and marks step 3, so steps 3 and 4 are filed under their own iterations."""
    config = make_config(tmp_path)
    d = start_daemon({"block_timeout_ms": 200})
    try:
        client = dumpd.Client(config, socket=d.socket, ring_bytes=RING, backpressure="block")
        seen = []
        with pytest.warns(RuntimeWarning, match="timed out") as record:
            for i in dumpd.torch.steps(client, range(5), errors="warn"):
                seen.append(client.stats()["iteration"])
                if i == 1:
                    d.proc.send_signal(signal.SIGSTOP)
                    assert fill_ring_until_timeout(client) > 0
                if i == 2:
                    d.proc.send_signal(signal.SIGCONT)
                    client.flush()  # the ring drained: the next mark has room
                if i >= 3:
                    client.dump("Add", f"Default/Add-op{i}", "output", 0,
                                np.full(4, i, dtype=np.float32))
        assert len(record) == 1, [str(w.message) for w in record]
        assert seen == [0, 1, 2, 3, 4]
        client.flush()
        files = {f.op_name: f.iteration for f in dump_files(tmp_path / "dump")}
        assert files == {sanitize("Default/Add-op3"): "3", sanitize("Default/Add-op4"): "4"}
        client.close()
    finally:
        d.proc.send_signal(signal.SIGCONT)
        stop_daemon(d)


def test_a_step_mark_that_timed_out_is_sent_when_tried_again(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    d = start_daemon({"block_timeout_ms": 200})
    try:
        client = dumpd.Client(config, socket=d.socket, ring_bytes=RING, backpressure="block")
        client.set_step(1)
        d.proc.send_signal(signal.SIGSTOP)
        fill_ring_until_timeout(client)
        with pytest.raises(dumpd.DaemonTimeout):
            client.set_step(2)
        d.proc.send_signal(signal.SIGCONT)
        client.flush()
        assert job_iteration(d.socket) == 1  # the mark of step 2 never went out
        client.set_step(2)  # the same mark again: sent this time, not taken as done
        client.flush()
        assert job_iteration(d.socket) == 2
        client.close()
    finally:
        d.proc.send_signal(signal.SIGCONT)
        stop_daemon(d)
