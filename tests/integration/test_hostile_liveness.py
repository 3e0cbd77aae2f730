"""Hostile clients cannot freeze dumpd or stall another session: blocking fds handed over,
producers stuck in the ring, a session's backlog, set-up that costs a minute of CPU, regexes
built to backtrack. Each scenario asserts events (flushes completed, status answered, the
order in which things happened), not stopwatch bounds; see hostile_harness.py.
"""

import json
import os
import time

import numpy as np
import pytest

from conftest import wait_for
from hostile_harness import (DEADLINE_S, Committer, harness, job_config,  # noqa: F401
                             make_dir, values)
import rawclient as rc

pytestmark = pytest.mark.conditional  # needs root: hostile_harness skips the file otherwise


# ================================================================ nothing freezes


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
        replies = c.recv_until_eof(timeout=DEADLINE_S)
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
    assert s.flush(timeout=DEADLINE_S).counts.tensors_written == 1
    h.benign.wait_flushes(3)
    h.finish()


def test_producer_stuck_waiting_and_busy_that_never_reads_its_socket_freezes_nobody(
        harness, workdir):
    h = harness()
    root = make_dir(workdir / "stuck")
    # 64 KiB ring: a small backlog in the shared writer queue (see tightloop() in
    # test_hostile_shutdown.py).
    s = h.raw_session(root, job_config(root), capacity=64 << 10, read_reply=False, rank=3)
    wait_for(lambda: (h.session_of_rank(3) or {}).get("state") == "active", DEADLINE_S,
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
    com.join(2 * DEADLINE_S)
    assert not com.errors, com.errors
    h.benign.wait_flushes(5)
    # dumpd kept draining the ring of the stuck producer too.
    wait_for(lambda: h.session_of_rank(3)["records"] >= 3000, DEADLINE_S, "the hostile records")
    h.finish()


def test_one_sessions_backlog_does_not_hold_up_another_sessions_flush(harness, workdir):
    """A client that fills its ring (within max_ring_bytes, as any client may) must not make
    the other sessions' flushes wait until its whole backlog is on disk. durability "file"
    (an fsync per file) makes each of its writes cost about what it costs on a busy disk.

    Asserted as an order of events, not a latency: once the backlog is all in the ring, the
    benign client completes flushes before the backlog's own flush returns. Were its records
    queued behind the backlog, at most the flush already under way could complete first."""
    h = harness(settings={"durability": "file"})
    root = make_dir(workdir / "backlog")
    s = h.raw_session(root, job_config(root), capacity=1 << 20, rank=8)
    records = 2000  # ~500 KiB of records: all fit in the ring at once
    for i in range(records):
        s.ring.commit_op(0, 0, f"Default/Backlog-op{i}", values(i))
    committed = time.monotonic()
    assert s.flush(timeout=10 * DEADLINE_S).counts.tensors_written == records
    written = time.monotonic()
    during = [e for e in h.benign.flushes() if committed < e["at"] < written]
    print(f"backlog of {records} fsynced files written {written - committed:.2f} s after "
          f"the last commit; {len(during)} benign flushes meanwhile")
    assert len(during) >= 5, (
        f"{len(during)} benign flushes completed in the {written - committed:.2f} s the "
        f"backlog took to write after its last commit (a backlog much shorter than a second "
        f"could not show more: then make it longer)")
    h.finish()


# ================================================================ the io thread never blocks


def expensive_regexes(n=200):
    """Distinct patterns that RE2 compiles in ~0.15-0.2 s each within dumpd's 256 KiB
    (an alternation of 8 counted repetitions {1,1000}; measured with libre2 2022-06)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for i in range(n):
        alts = "|".join(f"{letters[(i + k) % 26]}{{1,1000}}" for k in range(8))
        out.append(f"name-regex(({alts})z{i})")
    return out


def session_in_setup(h, rank):
    s = h.session_of_rank(rank)
    return s if s is not None and s["state"] == "setup" else None


def test_expensive_regex_config_compiles_off_the_io_thread(harness, workdir):
    h = harness()
    root = make_dir(workdir / "regex")
    cfg = job_config(root, dump_mode=1, kernels=expensive_regexes())  # half a minute and more
    h.raw_session(root, cfg, read_reply=False, rank=5)  # not the Python client: it compiles too
    seen = wait_for(lambda: session_in_setup(h, 5), DEADLINE_S, "the session in state setup")
    began = time.monotonic()
    # Events in order: the session is seen compiling, then the benign client completes ten
    # flushes, then status answers and the session is still compiling. Were the patterns
    # compiled on the io thread, neither flushes nor status could be answered before the
    # compile ended.
    h.benign.wait_flushes(10, after=began)
    assert session_in_setup(h, 5), "set-up ended before the benign flushes showed anything; " \
        "use costlier regexes"
    assert seen["uid"] == 0
    h.finish()


def test_a_client_hanging_up_during_setup_ends_its_session_promptly(harness, workdir):
    """docs/operations.md: a client hanging up ends its session as SIGTERM does, within
    shutdown_timeout_ms. A session still compiling its patterns must stop too, rather than
    hold its slot (max_sessions_per_uid) and a CPU for as long as the config keeps it busy."""
    h = harness()
    root = make_dir(workdir / "hangup")
    # 600 patterns: minutes of set-up, so that the generous deadline below still tells
    # "stopped at the hang-up" from "stopped when the compile ended".
    cfg = job_config(root, dump_mode=1, kernels=expensive_regexes(600))
    s = h.raw_session(root, cfg, read_reply=False, rank=5)
    wait_for(lambda: session_in_setup(h, 5), DEADLINE_S, "the session in state setup")
    s.conn.close()
    # Timing is the point here, so an upper bound stays: shutdown_timeout_ms plus DEADLINE_S
    # for a loaded machine, still far short of the compile. No lower bound: sooner is right.
    limit = h.settings["shutdown_timeout_ms"] / 1000 + DEADLINE_S
    hung_up = time.monotonic()
    try:
        wait_for(lambda: h.session_of_rank(5) is None, limit, "the session to end")
        gone = None
    except AssertionError:
        gone = (f"the session was still in state {h.session_of_rank(5)['state']} "
                f"{time.monotonic() - hung_up:.1f} s after its client hung up")
    h.finish(then=lambda: [gone] if gone else [])


# ================================================================ regex


def test_nested_quantifier_regex_runs_in_linear_time_and_selects_exactly(harness, workdir):
    h = harness()
    root = make_dir(workdir / "redos")
    s = h.raw_session(root, job_config(root, dump_mode=1, kernels=["name-regex((a+)+$)"]))
    s.ring.commit_step(0, 0)
    s.ring.commit_op(0, 0, "a" * 59 + "!", values(1), op_type="Evil")
    s.ring.commit_op(0, 0, "a" * 60, values(2), op_type="Good")
    # The flush answering at all is the check: a backtracking matcher needs ~2^59 steps for
    # the first name (years), so any deadline tells linear from exponential.
    reply = s.flush(timeout=DEADLINE_S)
    assert reply.counts.tensors_written == 1 and reply.counts.tensors_filtered == 1, reply
    files = sorted(root.rglob("*.npy"))
    assert [f.name.split(".")[:2] for f in files] == [["Good", "a" * 60]], files
    np.testing.assert_array_equal(np.load(files[0]), values(2))
    h.finish()
