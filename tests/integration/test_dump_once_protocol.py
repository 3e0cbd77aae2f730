"""Dump once on the wire: the real daemon fed raw ring records (rawclient.py) that name
earlier tensors (ring v5 PayloadKind::kSame), well-formed and not."""

import struct

import numpy as np
import pytest

from conftest import npy_files, parse_name, wait_for, write_config

pytest.importorskip("google.protobuf")
import rawclient as rc  # noqa: E402  (generates protobuf code)

MEMO = 0x02
SAME = 2 << 4


def same(sequence, tensor=0):
    return struct.pack("<QII", sequence, tensor, 0)


def session(daemon, workdir, **config):
    """A raw session dumping into workdir/dump (the root fd is the config's path)."""
    (workdir / "dump").mkdir(exist_ok=True)
    cfg = write_config(workdir, **config)
    return rc.RawSession(daemon.socket, cfg.read_text(), str(workdir / "dump"))


def finish(s):
    reply = s.flush()
    s.close()
    return reply.counts


def test_a_repeat_becomes_a_hard_link_of_the_first_file(daemon, workdir):
    s = session(daemon, workdir)
    y = np.arange(12, dtype=np.float32).reshape(3, 4)
    first = s.ring.commit_op(0, 0, "Default/Relu-op1", y, op_type="Relu", io=1 | MEMO)
    s.ring.commit_op(0, 0, "Default/Neg-op2", same(first), op_type="Neg", io=0 | SAME,
                     shape=y.shape)
    counts = finish(s)
    assert counts.tensors_written == 2 and counts.tensors_linked == 1, counts
    files = {parse_name(p)["op_type"]: p for p in npy_files(workdir / "dump")}
    assert files["Relu"].stat().st_ino == files["Neg"].stat().st_ino
    assert parse_name(files["Neg"])["io"] == "input"
    np.testing.assert_array_equal(np.load(files["Neg"]), y)


@pytest.mark.parametrize("case", ["unknown record", "not flagged", "other shape",
                                  "other step", "later tensor"])
def test_a_repeat_that_names_nothing_usable_fails_alone_and_the_session_goes_on(
        daemon, workdir, case):
    s = session(daemon, workdir)
    y = np.ones((2, 2), dtype=np.float32)
    first = s.ring.commit_op(0, 0, "Default/A-op1", y, io=1 | (0 if case == "not flagged" else MEMO))
    target, shape = first, y.shape
    if case == "unknown record":
        target = 1000
    elif case == "other shape":
        shape = (4,)
    elif case == "other step":
        s.ring.commit_step(0, 1)
    elif case == "later tensor":
        target = first + 1  # the record itself
    iteration = 1 if case == "other step" else 0
    s.ring.commit_op(0, iteration, "Default/B-op2", same(target), io=0 | SAME, shape=shape)
    s.ring.commit_op(0, iteration, "Default/C-op3", y)  # the session still writes
    counts = finish(s)
    assert counts.tensors_failed == 1, counts
    assert counts.tensors_written == 2, counts
    names = sorted(parse_name(p)["op_name"] for p in npy_files(workdir / "dump"))
    assert names == ["Default_A-op1", "Default_C-op3"]
    wait_for(lambda: "repeats a tensor" in daemon.logtext(), what="the warning")


def test_a_repeat_in_overflow_mode_ends_only_that_session(daemon, workdir):
    s = session(daemon, workdir, op_debug_mode=3)
    y = np.ones(4, dtype=np.float32)
    first = s.ring.commit_op(0, 0, "Default/A-op1", y, io=1 | MEMO)
    s.ring.commit_op(0, 0, "Default/B-op2", same(first), io=0 | SAME, shape=y.shape)
    with pytest.raises(rc.SessionRefused) as e:
        s.flush(timeout=20)
    s.close()
    assert "overflow mode needs every tensor's bytes" in e.value.message or \
        "overflow mode needs every tensor's bytes" in daemon.logtext()
    # Another session is served as before.
    other = workdir / "other"
    other.mkdir()
    s2 = session(daemon, other)
    s2.ring.commit_op(0, 0, "Default/C-op3", y)
    assert finish(s2).tensors_written == 1
