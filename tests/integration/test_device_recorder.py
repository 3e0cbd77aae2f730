"""The flight recorder keeps CUDA tensors on the device (docs/recorder.md, "Keeping CUDA
tensors on the device"), on the fake device through the real daemon (no GPU needed): recorded
steps cost no device-to-host copy, a trigger fetches the kept snapshots, and the files equal
the tensors at dump time although the producer overwrote its device buffers every step."""

import json
import os
import re
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import npy_files, parse_name, write_config

PRODUCER = os.environ.get("DUMPD_FAKE_GPU_RECORDER_PRODUCER", "")

pytestmark = pytest.mark.skipif(not PRODUCER, reason="DUMPD_FAKE_GPU_RECORDER_PRODUCER is not "
                                "set (run through ctest)")

N = 2048
OPS = 3


def config(workdir, **recorder):
    section = {"steps": 3, "after_steps": 1, "max_triggers": 1, "saved_data": "full"}
    section.update(recorder)
    return write_config(workdir, iteration="none", saved_data="full"), json.dumps(section)


def expected(step, op, io):
    k = np.arange(N)
    if io == "input":
        return (k + 7 * op + 1000 * step).astype(np.int32)
    out = (0.5 * k + op + step).astype(np.float32)
    return out


def run(daemon, cfg, recorder, *args, timeout=120):
    cmd = [PRODUCER, "--socket", daemon.socket, "--config", str(cfg), "--recorder", recorder,
           "--ops", OPS, "--elements", N, *args]
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout)


def stats(out):
    m = re.search(r"stats deferred (\d+) fetched (\d+) released (\d+) records (\d+)", out.stdout)
    assert m, out.stdout + out.stderr
    return dict(zip(("deferred", "fetched", "released", "records"), map(int, m.groups())))


def files(root):
    index = {}
    for f in npy_files(root):
        fields = parse_name(f)
        op = int(fields["op_name"].rsplit("-op", 1)[1])
        index[(int(f.parent.name), op, fields["io"])] = f
    return index


def files_by_slot(root):
    """(step, op, io, slot) -> file: --chain gives op i > 0 two inputs."""
    index = {}
    for f in npy_files(root):
        fields = parse_name(f)
        op = int(fields["op_name"].rsplit("-op", 1)[1])
        index[(int(f.parent.name), op, fields["io"], int(fields["slot"]))] = f
    return index


def assert_chain_values(index, inf_step):
    """Each --chain file holds what the producer passed at that step (input 1 of op i: op
    i-1's output), the inf included."""
    for (step, op, io, slot), f in index.items():
        source = (step, op - 1, "output") if slot == 1 else (step, op, io)
        want = expected(*source)
        if source == (inf_step, 1, "output"):
            want[1] = np.inf
        np.testing.assert_array_equal(np.load(f), want, err_msg=f"step {step} op {op} {io} {slot}")


def triggers(root):
    [path] = Path(root).glob("rank_*/.dump_metadata/triggers.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("staging", [1 << 20, 4 << 20])
def test_inf_fetches_the_kept_steps_from_the_device(daemon, workdir, staging):
    cfg, recorder = config(workdir)
    out = run(daemon, cfg, recorder, "--steps", 30, "--inf-step", 17, "--staging", staging)
    assert out.returncode == 0, out.stdout + out.stderr + daemon.logtext()
    root = workdir / "dump"
    index = files(root)
    assert sorted({step for step, _, _ in index}) == [15, 16, 17, 18], out.stdout + daemon.logtext()
    for (step, op, io), f in index.items():
        want = expected(step, op, io)
        if step == 17 and op == 1 and io == "output":
            want[1] = np.inf
        np.testing.assert_array_equal(np.load(f), want, err_msg=f"step {step} op {op} {io}")
    assert len(index) == 4 * OPS * 2
    [t] = triggers(root)
    assert (t["kind"], t["iteration"], t["op"], t["tensor"]) == ("inf", 17, "Default/net/Fake-op1",
                                                                "output 0")
    assert t["iterations_written"] == [15, 16, 17, 18]
    assert "device_tensors_lost" not in t
    s = stats(out)
    # Steps up to 17 were kept on the device; the kept ones (15-17) were fetched. Whether 18
    # was deferred depends on when the client saw the fetch; after it, nothing is deferred
    # until the recorder stopped (max_triggers 1), when the daemon said so.
    assert s["deferred"] >= 18 * OPS, s
    assert s["fetched"] >= 3 * OPS, s
    assert "written 24 failed 0" in out.stdout, out.stdout
    assert "device staging" not in daemon.logtext()


def test_a_repeated_device_tensor_is_kept_once_and_written_as_a_link(daemon, workdir):
    # --chain: op i > 0 takes op i-1's output as its input 1 (same buffer, same identity).
    # Dump once sends it as a reference: no second snapshot on the device, and its file is a
    # hard link of the source's, fetched from the device on the trigger.
    cfg, recorder = config(workdir)
    out = run(daemon, cfg, recorder, "--steps", 30, "--inf-step", 17, "--staging", 1 << 20,
              "--chain", 1)
    assert out.returncode == 0, out.stdout + out.stderr + daemon.logtext()
    root = workdir / "dump"
    index = files_by_slot(root)
    assert sorted({k[0] for k in index}) == [15, 16, 17, 18], out.stdout + daemon.logtext()
    assert len(index) == 4 * (OPS * 2 + OPS - 1)
    assert_chain_values(index, inf_step=17)
    for (step, op, io, slot), f in index.items():
        if slot == 1:
            assert f.stat().st_ino == index[(step, op - 1, "output", 0)].stat().st_ino, f
    s = stats(out)
    m = re.search(r"deduplicated (\d+)", out.stdout)
    assert m and int(m.group(1)) >= 19 * (OPS - 1), out.stdout  # steps 0-18, ops 1..OPS-1
    assert s["deferred"] >= 18 * OPS, s
    assert f"written {len(index)} failed 0" in out.stdout, out.stdout


def test_a_lost_snapshot_fails_only_itself_and_its_repeats(daemon, workdir):
    # --chain with staging for a little less than two of the three kept steps: the oldest kept
    # snapshots give way. The producer pauses at step 9's mark (3 s, time enough under the
    # sanitizers), so the trigger (the inf of step 8, found when step 9 begins) fetches while
    # step 8 and most of step 7 are still held. A repeat of a lost output
    # fails with it; nothing else of its op or of later ops does (each op lists its inputs,
    # the repeat among them, before its output).
    cfg, recorder = config(workdir)
    out = run(daemon, cfg, recorder, "--steps", 12, "--inf-step", 8, "--staging", 88 << 10,
              "--chain", 1, "--pause-step", 9, "--pause-ms", 3000)
    assert out.returncode == 0, out.stdout + out.stderr + daemon.logtext()
    root = workdir / "dump"
    index = files_by_slot(root)
    [t] = triggers(root)
    assert t["iterations_written"] == [6, 7, 8, 9]
    lost = t.get("device_tensors_lost", 0)
    expect = [(step, op, io, slot) for step in (6, 7, 8, 9) for op in range(OPS)
              for io, slot in (("input", 0), ("output", 0)) + ((("input", 1),) if op else ())]
    missing = [k for k in expect if k not in index]
    # A missing repeat is one whose source (the last op's output) is missing too; the other
    # missing tensors of the kept steps are the lost snapshots themselves.
    repeats = [k for k in missing if k[3] == 1]
    for step, op, _, _ in repeats:
        assert (step, op - 1, "output", 0) in missing, (step, op, sorted(index))
    assert 0 < lost == len([k for k in missing if k[3] == 0 and k[0] <= 8]), (missing, t)
    assert any(k[0] <= 8 and k[2] == "output" for k in index), "nothing kept was fetched"
    assert_chain_values(index, inf_step=8)
    assert f"written {len(index)} failed {len(missing)}" in out.stdout, (out.stdout, missing)


def test_nothing_crosses_to_the_host_without_a_trigger(daemon, workdir):
    cfg, recorder = config(workdir)
    out = run(daemon, cfg, recorder, "--steps", 12, "--staging", 1 << 20)
    assert out.returncode == 0, out.stdout + out.stderr + daemon.logtext()
    assert npy_files(workdir / "dump") == []
    s = stats(out)
    assert s["deferred"] == 12 * OPS, s
    assert s["fetched"] == 0, s


def test_staging_too_small_never_blocks_and_counts_what_it_lost(daemon, workdir):
    # 100 KiB of staging holds about two steps of 3 ops x 16 KiB (+ statistics scratch): older
    # snapshots are given up for newer ones (training never waits for the recorder), and the
    # trigger writes what is left of the kept steps, counting the rest as lost. How much is
    # left depends on how far the producer ran ahead of the daemon's check.
    cfg, recorder = config(workdir)
    out = run(daemon, cfg, recorder, "--steps", 12, "--inf-step", 8, "--staging", 100 << 10)
    assert out.returncode == 0, out.stdout + out.stderr + daemon.logtext()
    root = workdir / "dump"
    index = files(root)
    s = stats(out)
    assert s["released"] > 0, s
    # 3 ops x 2 tensors x 8 KiB a step: 3 steps need 147456 bytes (+ a quarter).
    assert ("the device staging (102400 bytes) cannot hold 3 iterations of 49152 bytes of CUDA "
            "tensors kept on the device; raise device_staging_bytes to 184320"
            in daemon.logtext()), daemon.logtext()
    [t] = triggers(root)
    assert t["iteration"] == 8
    # Exactly the iteration directories written; the rest of 6-9 is listed with its reason.
    written = sorted({k[0] for k in index})
    assert t["iterations_written"] == written, (t, written)
    missed = {i: n["why"] for n in t["iterations_not_written"]
              for i in range(n["first"], n["last"] + 1)}
    assert set(written) | set(missed) == {6, 7, 8, 9}, t
    assert all("client's device" in why for why in missed.values()), t
    kept_written = sum(1 for k in index if k[0] in (6, 7, 8))
    assert t.get("device_tensors_lost", 0) > 0, t
    assert kept_written + t["device_tensors_lost"] == 3 * OPS * 2, (sorted(index), t)
    for (step, op, io), f in index.items():
        want = expected(step, op, io)
        if step == 8 and op == 1 and io == "output":
            want[1] = np.inf
        np.testing.assert_array_equal(np.load(f), want, err_msg=f"step {step} op {op} {io}")


def test_a_crash_writes_the_host_part_and_names_what_the_device_took(daemon, workdir):
    cfg, recorder = config(workdir, triggers=["crash"])
    out = run(daemon, cfg, recorder, "--steps", 12, "--kill-step", 9, "--staging", 1 << 20)
    assert out.returncode == -9, out.stdout + out.stderr
    root = workdir / "dump"
    deadline = time.monotonic() + 30
    while not list(root.glob("rank_*/.dump_metadata/triggers.jsonl")):
        assert time.monotonic() < deadline, daemon.logtext()
        time.sleep(0.05)
    time.sleep(0.2)  # the line is appended whole; the session then ends
    [t] = triggers(root)
    assert t["kind"] == "crash"
    # Nothing reached disk, and the line says so (it used to list 7-9).
    assert t["iterations_written"] == []
    assert t["iterations_not_written"] == [{
        "first": 7, "last": 9,
        "why": "its tensors stayed on the client's device and did not reach dumpd "
               "(device_tensors_lost)"}], t
    # Every kept tensor was on the device, which died with the process.
    assert t["device_tensors_lost"] == 3 * OPS * 2, t
    assert npy_files(root) == []


def test_a_client_that_never_sends_its_device_tensors_stalls_only_its_own_session(workdir):
    """A raw client commits a tensor "kept on the device" and never fills it; a trigger makes
    its session wait for it (recorder_fetch_timeout_ms). Another job runs meanwhile as if
    nothing happened; the silent one loses its tensor, with a warning, and goes on."""
    from conftest import Daemon
    from rawclient import KIND_CONTROL, RawSession, control_body, pb2

    timeout_ms = 8000
    d = Daemon(workdir, settings={"recorder_fetch_timeout_ms": timeout_ms})
    try:
        raw_root = workdir / "raw"
        raw_root.mkdir()
        job = json.loads(write_config(workdir, name="raw.json", iteration="none",
                                      saved_data="full", path=str(raw_root)).read_text())
        job["flight_recorder"] = {"steps": 2, "after_steps": 0, "saved_data": "full"}
        s = RawSession(d.socket, json.dumps(job), str(raw_root), producer_name="silent")
        values = np.arange(4, dtype=np.float32)
        header = bytearray(128)  # ipc::DeferredPayload: statistics, then state 0 (on the device)
        struct.pack_into("<7Q4dQ", header, 0, 4, 0, 0, 0, 1, 0, 3, 3.0, 0.0, 6.0, 14.0, 0)
        s.ring.commit_step(0, 0)
        s.ring.commit_op(0, 0, "Default/Kept-op0", bytes(header) + bytes(16), io=1 | (3 << 4),
                         shape=(4,))
        ctl = pb2().Control()
        ctl.trigger.reason = "look"
        s.ring.commit(KIND_CONTROL, control_body(ctl))

        # The silent session's thread waits for the fetch; another job is not held up.
        cfg, recorder = config(workdir)
        out = run(d, cfg, recorder, "--steps", 30, "--inf-step", 17, "--staging", 1 << 20)
        assert out.returncode == 0, out.stdout + out.stderr + d.logtext()
        assert "written 24 failed 0" in out.stdout, out.stdout
        assert "did not send the tensors" not in d.logtext(), "the other job waited"
        assert sorted({step for step, _, _ in files(workdir / "dump")}) == [15, 16, 17, 18]

        # The silent client loses its tensor, and its session goes on.
        reply = s.flush(timeout=timeout_ms / 1000 + 30)
        assert reply.counts.tensors_failed == 1, reply
        assert (f"did not send the tensors it keeps on its device within {timeout_ms} ms"
                in d.logtext())
        assert npy_files(raw_root) == []
        s.ring.commit_step(0, 1)
        s.ring.commit_op(0, 1, "Default/Host-op0", values)
        assert s.flush(token=2).counts.tensors_failed == 1
        s.close()
    finally:
        assert d.stop() == 0, d.logtext()
