"""Hostile clients cannot freeze dumpd or stall another session: blocking fds handed over,
producers stuck in the ring, a session's backlog, set-up that costs a minute of CPU, regexes
built to backtrack.
"""

import json
import os
import time

import numpy as np

from conftest import wait_for
from hostile_harness import (LATENCY_LIMIT_S, Committer, harness, job_config,  # noqa: F401
                             make_dir, values)
import rawclient as rc


def test_old_style_hello_with_a_full_blocking_eventfd_is_refused_and_dumpd_keeps_serving(
        harness, workdir):
    h = harness()
    ring = rc.Ring(1 << 20)
    h.cleanups.append(ring.close)
    full = os.eventfd(0, os.EFD_CLOEXEC)  # blocking: a write of 1 would block forever
    os.eventfd_write(full, 0xFFFFFFFFFFFFFFFE)
    other = os.eventfd(0, os.EFD_CLOEXEC)
    root = os.open(make_dir(workdir / "old"), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    h.cleanups += [lambda: os.close(full), lambda: os.close(other), lambda: os.close(root)]
    cfg = json.dumps(job_config(workdir / "old"))
    # Protocol 1's Hello: ring, data doorbell, space doorbell, root. Also with major 2.
    for major in (1, 2):
        c = rc.Conn(h.socket)
        c.send(rc.make_hello(cfg, ring.total, protocol_major=major),
               fds=[ring.fd, full, other, root])
        replies = c.recv_until_eof(timeout=10)
        c.close()
        assert len(replies) == 1 and replies[0].HasField("error"), replies
        err = replies[0].error
        assert rc.error_code_name(err.code) in ("PROTOCOL", "UNSUPPORTED_VERSION"), err
        assert "file descriptors" in err.message or "protocol version 1" in err.message, err
        h.status()
    assert os.eventfd_read(full) == 0xFFFFFFFFFFFFFFFE, "dumpd touched the eventfd"
    # Still serving: a new raw session writes an op.
    s = h.raw_session(workdir / "old", job_config(workdir / "old"))
    s.ring.commit_op(0, 0, "Default/After-op0", values(3))
    assert s.flush(timeout=10).counts.tensors_written == 1
    h.benign.wait_flushes(3)
    h.finish()


def test_producer_stuck_waiting_and_busy_that_never_reads_its_socket_freezes_nobody(
        harness, workdir):
    h = harness()
    root = make_dir(workdir / "stuck")
    # 64 KiB ring: a small backlog in the shared writer queue (see tightloop()).
    s = h.raw_session(root, job_config(root), capacity=64 << 10, read_reply=False, rank=3)
    wait_for(lambda: (h.session_of_rank(3) or {}).get("state") == "active", 10,
             "the raw session to be active")
    ring = s.ring
    ring.polite = False
    ring.set("producer_waiting", 1)
    ring.set("producer_busy", 1)
    # Never read: Flush{0} is answered at once; thousands of them fill the reply queue and
    # both socket buffers.
    s.conn.sock.setblocking(False)
    frames = rc.encode_frame(rc.flush_request(0)) * 1000
    sent = 0
    try:
        for _ in range(1000):
            sent += s.conn.sock.send(frames)
    except BlockingIOError:
        pass
    assert sent > 0

    def scribble(r, i):
        r.set("space_wake", (i * 2654435761) & 0xFFFFFFFF)
        r.set("producer_waiting", 1)
        r.set("producer_busy", 1)

    start = time.monotonic()
    com = Committer(ring, count=3000, poke=scribble)
    h.benign.wait_flushes(20, after=start)
    com.join(60)
    assert not com.errors, com.errors
    h.benign.wait_flushes(5)
    # dumpd kept draining the ring of the stuck producer too.
    wait_for(lambda: h.session_of_rank(3)["records"] >= 3000, 30, "the hostile records")
    h.finish()


def test_one_sessions_backlog_does_not_hold_up_another_sessions_flush(harness, workdir):
    """A client that fills its ring (within max_ring_bytes, as any client may) must not make
    the other sessions' flushes wait until its whole backlog is on disk. durability "file"
    (an fsync per file) makes each of its writes cost about what it costs on a busy disk."""
    h = harness(settings={"durability": "file"})
    root = make_dir(workdir / "backlog")
    s = h.raw_session(root, job_config(root), capacity=1 << 20, rank=8)
    start = time.monotonic()
    for i in range(2000):  # ~400 KiB of records: all fit in the ring at once
        s.ring.commit_op(0, 0, f"Default/Backlog-op{i}", values(i))
    h.benign.wait_flushes(3, after=start, timeout=120)
    assert s.flush(timeout=120).counts.tensors_written == 2000
    h.finish()


def expensive_regexes(n=200):
    """Distinct patterns that RE2 compiles in ~0.15-0.2 s each within dumpd's 256 KiB
    (an alternation of 8 counted repetitions {1,1000}; measured with libre2 2022-06)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for i in range(n):
        alts = "|".join(f"{letters[(i + k) % 26]}{{1,1000}}" for k in range(8))
        out.append(f"name-regex(({alts})z{i})")
    return out


def test_expensive_regex_config_compiles_off_the_io_thread(harness, workdir):
    h = harness()
    root = make_dir(workdir / "regex")
    cfg = job_config(root, dump_mode=1, kernels=expensive_regexes())
    h.raw_session(root, cfg, read_reply=False, rank=5)  # not the Python client: it compiles too
    seen = wait_for(lambda: (lambda s: s if s and s["state"] == "setup" else None)(
        h.session_of_rank(5)), 10, "the session in state setup")
    first = time.monotonic()
    last = first
    while time.monotonic() - first < 3.0:
        s = h.session_of_rank(5)  # asserts status answered within 1 s
        assert s is not None
        if s["state"] != "setup":
            break
        last = time.monotonic()
    assert last - first >= 2.0, "set-up finished too soon to show anything; use costlier regexes"
    during = [e for e in h.benign.flushes() if first <= e["at"] <= last]
    assert len(during) >= 10, f"only {len(during)} benign flushes while the session set up"
    assert seen["uid"] == 0
    h.finish()


def test_a_client_hanging_up_during_setup_ends_its_session_promptly(harness, workdir):
    """docs/operations.md: a client hanging up ends its session as SIGTERM does, within
    shutdown_timeout_ms. A session still compiling its patterns must stop too, rather than
    hold its slot (max_sessions_per_uid) and a CPU for as long as the config keeps it busy."""
    h = harness()
    root = make_dir(workdir / "hangup")
    cfg = job_config(root, dump_mode=1, kernels=expensive_regexes())  # over a minute of set-up
    s = h.raw_session(root, cfg, read_reply=False, rank=5)
    wait_for(lambda: (h.session_of_rank(5) or {}).get("state") == "setup", 10,
             "the session in state setup")
    s.conn.close()
    limit = h.settings["shutdown_timeout_ms"] / 1000 + 2.0
    hung_up = time.monotonic()
    try:
        wait_for(lambda: h.session_of_rank(5) is None, limit, "the session to end")
        gone = None
    except AssertionError:
        gone = (f"the session was still in state {h.session_of_rank(5)['state']} "
                f"{time.monotonic() - hung_up:.1f} s after its client hung up")
    h.finish(then=lambda: [gone] if gone else [])


def test_nested_quantifier_regex_runs_in_linear_time_and_selects_exactly(harness, workdir):
    h = harness()
    root = make_dir(workdir / "redos")
    s = h.raw_session(root, job_config(root, dump_mode=1, kernels=["name-regex((a+)+$)"]))
    t0 = time.monotonic()
    s.ring.commit_step(0, 0)
    s.ring.commit_op(0, 0, "a" * 59 + "!", values(1), op_type="Evil")
    s.ring.commit_op(0, 0, "a" * 60, values(2), op_type="Good")
    reply = s.flush(timeout=10)
    took = time.monotonic() - t0
    assert took < LATENCY_LIMIT_S, took
    assert reply.counts.tensors_written == 1 and reply.counts.tensors_filtered == 1, reply
    files = sorted(root.rglob("*.npy"))
    assert [f.name.split(".")[:2] for f in files] == [["Good", "a" * 60]], files
    np.testing.assert_array_equal(np.load(files[0]), values(2))
    h.finish()
