"""What a hostile client can make the flight recorder hold, wait for and report is bounded.

A client with a flight recorder decides what dumpd keeps (its records stay in the ring, their
decoded descriptors in dumpd's memory), what dumpd waits for (the tensors it keeps on its
device, fetched on a trigger) and some of what status shows (its op names, its trigger
reason). These scenarios run the real dumpd with the hostile harness (hostile_harness.py: a
benign client beside, a status probe, SIGTERM at the end); the hostile clients are raw ring
producers (rawclient.py's `script` agent) running as uids 1234 and 1235.
"""

import json
import os
import subprocess
import time

import pytest

from conftest import DUMPCTL, wait_for
# The harness, its fixture and helpers (importing the module skips this one too when the
# hostile tests cannot run: they need root).
from hostile_harness import (DEADLINE_S, UID_A, UID_B, Sampler, done, harness,  # noqa: F401
                             recorder_job, rss_anon, script_agent)

pytestmark = pytest.mark.conditional  # needs root: hostile_harness skips the file otherwise

MiB = 1 << 20


def cpu_seconds(pid):
    """utime + stime of the whole process (every thread), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- kept records


def test_kept_records_of_every_session_stay_within_recorder_memory_bytes(harness):
    """Sessions keep tiny records (one float each) of iterations their job does not select:
    with a flight recorder and no trigger, dumpd keeps them all, as long as the ring holds
    them. The rings are large (128 MiB: about half a million records each) and so are `steps`
    and `max_bytes`, so only dumpd's own limits bound what it keeps: each kept record's
    decoded descriptor costs dumpd a few hundred bytes of heap, and recorder_memory_bytes
    (here 32 MiB) bounds them for every session together, one uid's sessions holding at most
    a quarter of it. Two sessions of uid A flood their recorders: the second, which starts
    once the first holds A's share, gets its records refused (refused_for_memory in status).
    A session of uid B afterwards still keeps every record it asks to keep: A cannot leave
    other users' recorders with nothing. dumpd's heap grows by less than the budget and some
    slack. The old daemon had no such bound (nor the setting): it kept a million records,
    their descriptors about 600 MiB of heap."""
    budget = 32 * MiB
    h = harness(settings={"recorder_memory_bytes": budget, "max_ring_bytes": 256 * MiB})
    base = rss_anon(h.pid)
    rss = Sampler(lambda: rss_anon(h.pid), period=0.05)
    recorder = dict(steps=1024, max_bytes=1 << 40, triggers=["manual"])
    # The first session's iterations are smaller than the second's: once the first holds
    # A's share, what it leaves free (less than one of its iterations) is less than one of
    # the second's, whose records are then refused (not only its own older ones discarded).
    for name, uid, rank, count, per_iteration in (("hog-a", UID_A, 40, 600_000, 1000),
                                                   ("hog-a2", UID_A, 41, 600_000, 5000),
                                                   ("modest-b", UID_B, 42, 10_000, 1000)):
        a = script_agent(h, name, uid, rank, lambda root: recorder_job(root, **recorder),
                    [["step", 0],
                     ["ops", {"name": "Default/Tiny-op0", "count": count,
                              "per_iteration": per_iteration}],
                     ["flush", 120]], ring_bytes=128 * MiB)
        ev = done(a, "flush", 120)
        assert ev["event"] == "flush", ev
    peak = rss.stop()
    st = h.status()
    hogs = [h.session_of_rank(rank, st) for rank in (40, 41, 42)]
    assert all(hogs), st["sessions"]
    refused = [s["recorder"]["refused_for_memory"] for s in hogs]
    kept = [s["recorder"]["kept_iterations"] for s in hogs]
    print(f"RssAnon +{(peak - base) >> 20} MiB (budget {budget >> 20} MiB); refused for "
          f"memory {refused}; kept {kept} iterations")
    assert peak - base < budget + 88 * MiB, f"dumpd's heap grew by {(peak - base) >> 20} MiB"
    assert refused[1] > 0, hogs
    assert refused[2] == 0 and kept[2] == 10, hogs[2]  # B keeps all of its 10 iterations
    h.finish()


# ---------------------------------------------------------------- device-kept records


@pytest.mark.parametrize("where", ["no flight recorder", "a dumped iteration"])
def test_a_device_kept_tensor_nothing_would_fetch_ends_only_its_session(harness, where):
    """A record whose tensor stays on the client's device (PayloadKind::kDeferred) means
    something only in an iteration the flight recorder keeps: its bytes come over on a
    trigger. In a job without a recorder, or in an iteration the job dumps, dumpd ends that
    session at once with an Error naming why, instead of asking for the bytes and holding the
    ring until recorder_fetch_timeout_ms (20 s here) passes, as the old daemon did."""
    timeout_s = 20
    h = harness(settings={"recorder_fetch_timeout_ms": timeout_s * 1000})
    if where == "no flight recorder":
        config = lambda root: recorder_job(root, iteration="all")  # noqa: E731
        why = "is kept on the client's device, but the job has no flight recorder"
    else:
        config = lambda root: recorder_job(root, iteration="0", steps=2)  # noqa: E731
        why = "is kept on the client's device, but iteration 0 is dumped, not recorded"
    a = script_agent(h, "deferred", UID_A, 60, config,
                [["step", 0], ["ops", {"name": "Default/Kept-op0", "payload": "deferred"}],
                 ["flush", timeout_s + DEADLINE_S]])
    ev = done(a, "flush", timeout_s + DEADLINE_S + 5)
    took = ev["at"] - a.of("ops")[0]["at"]
    print(f"{ev} {took:.3f} s after the record")
    assert ev["event"] == "refused", ev
    assert "record 2: a tensor of Default/Kept-op0 " + why in ev["message"], ev
    assert took < timeout_s / 2, f"refused {took:.1f} s after the record"
    wait_for(lambda: h.session_of_rank(60) is None, DEADLINE_S, "the session to end")
    h.finish()


# ---------------------------------------------------------------- status and client bytes


def test_status_lists_sessions_whose_op_names_and_reasons_are_not_utf8(harness):
    """Op names are the client's bytes, and status quotes them: a session's last_error (a
    repeat of a tensor never sent, named b"Default/\\xff\\xfe-rep") and its recorder's
    last_trigger (a NaN in an op named b"Default/\\xff\\xfe-nan"). Another session's manual
    trigger reason, "x" + "é" * 600, is cut to 1024 bytes, once in the middle of an "é". Status
    is a protobuf reply whose strings must be UTF-8: the old daemon sent those bytes as they
    were, and `dumpctl status` failed for everyone ("frame of N bytes is not a dumpd.v1
    message"). Now both forms answer and list every session, the bad bytes replaced by
    U+FFFD and the reason cut between characters."""
    h = harness()
    nan_job = lambda root: recorder_job(root, steps=2, triggers=["nan", "manual"],  # noqa: E731
                                        max_triggers=0)
    bad = script_agent(h, "bad-names", UID_A, 50, nan_job,
                  [["step", 1],
                   ["ops", {"name_hex": b"Default/\xff\xfe-nan".hex(), "iteration": 1,
                            "value": float("nan")}],
                   ["step", 2],  # ends iteration 1: its NaN fires the trigger
                   ["flush"],
                   # Not flushed: the flush reply would carry the error (the old daemon's
                   # made the client fail too).
                   ["ops", {"name_hex": b"Default/\xff\xfe-rep".hex(), "iteration": 2,
                            "payload": "repeat"}]])
    reason = "x" + "é" * 600
    manual_job = lambda root: recorder_job(root, steps=2, triggers=["manual"])  # noqa: E731
    long = script_agent(h, "long-reason", UID_B, 51, manual_job,
                   [["step", 1], ["ops", {"name": "Default/Ok-op0", "iteration": 1}],
                    ["trigger", reason], ["flush"]])
    for a in (bad, long):
        ev = done(a, "flush")
        assert ev["event"] == "flush", ev

    def status_with_the_repeat():
        out = subprocess.run([DUMPCTL, "--socket", h.socket, "status", "--json"],
                             capture_output=True, text=True, timeout=DEADLINE_S)
        assert out.returncode == 0, f"dumpctl status --json: {out.stderr}"
        st = json.loads(out.stdout)
        return st if "-rep" in h.session_of_rank(50, st)["last_error"] else None

    st = wait_for(status_with_the_repeat, DEADLINE_S, "the repeat's error in status")
    assert {7, 50, 51} <= {s["rank"] for s in st["sessions"]}, st["sessions"]
    s = h.session_of_rank(50, st)
    assert s["recorder"]["last_trigger"] == \
        "nan at iteration 1: Default/\ufffd\ufffd-nan output 0", s["recorder"]
    assert "a tensor of Default/\ufffd\ufffd-rep repeats a tensor" in s["last_error"], s
    trigger = h.session_of_rank(51, st)["recorder"]["last_trigger"]
    whole = "manual at iteration 1: " + reason
    assert len(trigger.encode()) <= 1024 and "\ufffd" not in trigger, trigger
    assert whole.startswith(trigger) and len(trigger) > len(whole) // 2, trigger

    table = subprocess.run([DUMPCTL, "--socket", h.socket, "status"], capture_output=True,
                           text=True, errors="replace", timeout=DEADLINE_S)
    assert table.returncode == 0, table.stderr
    ids = [line.split()[0] for line in table.stdout.splitlines()[1:] if line[:1].isdigit()]
    assert sorted(ids) == sorted(str(s["id"]) for s in st["sessions"]), table.stdout
    h.finish()


# ---------------------------------------------------------------- waiting for a fetch


def test_waiting_for_a_fetch_that_never_comes_costs_no_cpu(harness):
    """A client keeps 200000 tiny tensors on its device in recorded iterations; its staging,
    it says, gave up all of them but the last (state "lost"), which stays "on the device".
    It triggers, and never answers the fetch. dumpd's session thread waits for it up to
    recorder_fetch_timeout_ms (10 s here): sleeping until the client wakes it, it uses next to
    no CPU (the old daemon looked at every tensor's state each millisecond, about a core)."""
    timeout_s = 10
    window_s = 4.0
    h = harness(settings={"recorder_fetch_timeout_ms": timeout_s * 1000})
    job = lambda root: recorder_job(root, steps=128, max_bytes=1 << 40,  # noqa: E731
                                    triggers=["manual"], after_steps=0)
    a = script_agent(h, "silent", UID_A, 70, job,
                [["step", 0],
                 ["ops", {"name": "Default/Kept-op0", "payload": "deferred", "count": 200_000,
                          "per_iteration": 1000, "state": 2, "last_state": 0}],
                 ["trigger", "look"], ["fetch"]], ring_bytes=128 * MiB)
    ev = done(a, "fetch", 60)
    assert ev["event"] == "fetch", ev
    t0, cpu0 = time.monotonic(), cpu_seconds(h.pid)
    time.sleep(window_s)  # the measurement window, not a wait for an event
    t1, cpu1 = time.monotonic(), cpu_seconds(h.pid)
    used = (cpu1 - cpu0) / (t1 - t0)
    timed_out = "did not send the tensors it keeps on its device" in \
        h.log().decode(errors="replace")
    print(f"dumpd used {used:.3f} CPU while waiting for the fetch ({t1 - ev['at']:.1f} s "
          f"after it was asked for)")
    assert not timed_out and t1 - ev["at"] < timeout_s, "the window passed the fetch timeout"
    assert used < 0.3, f"dumpd used {used:.2f} of a core waiting for a fetch"
    # Then it gives up on time and the session goes on.
    wait_for(lambda: b"did not send the tensors it keeps on its device" in h.log(),
             timeout_s + DEADLINE_S, "the fetch timeout")
    assert h.session_of_rank(70) is not None
    h.finish()
