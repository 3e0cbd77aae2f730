"""What issue 48's review found open after the recorder, runtime control and per-job accounts
landed: each scenario is a hostile client of another uid beside the harness's benign client,
whose flushes must stay answered and whose files must stay right (hostile_harness.py).

* an open manual trigger, then step marks of distinct iterations it does not cover: dumpd's
  heap stays flat (it remembered every one: about 50 MB/s);
* net names of 2 MiB: refused with an error naming the limit (they were kept in the job's
  account for the daemon's life);
* a pause, then ops of new iterations and no step mark: none is written (all were);
* a trigger reason that is not UTF-8: the record is skipped with a warning naming the field,
  and the session goes on (it ended);
* four uids flooding their recorders: a fifth keeps every iteration it asks to keep (it lost
  some, counted nowhere).
"""

import json
import subprocess

import pytest

from conftest import DUMPCTL, wait_for
from hostile_harness import (DEADLINE_S, UID_A, UID_B, Sampler, done, harness,  # noqa: F401
                             recorder_job, rss_anon, script_agent)

pytestmark = pytest.mark.conditional  # needs root: hostile_harness skips the file otherwise

MiB = 1 << 20


def test_step_marks_outside_an_open_trigger_do_not_grow_dumpd(harness):
    """A manual trigger at iteration 4294960000 with after_steps 1024, then 300000 step marks
    of lower iterations: the trigger covers none of them, so nothing of them is remembered.
    The old daemon remembered each (a set node apiece: about 14 MiB here, 469 MiB in the
    review's 10 s)."""
    h = harness()
    top = 4294960000
    job = lambda root: recorder_job(root, steps=2, triggers=["manual"],  # noqa: E731
                                    after_steps=1024, max_triggers=0)
    base = rss_anon(h.pid)
    rss = Sampler(lambda: rss_anon(h.pid), period=0.05)
    a = script_agent(h, "open-trigger", UID_A, 80, job,
                      [["step", top], ["ops", {"name": "Default/Op-op0", "iteration": top}],
                       ["trigger", "open"], ["steps", {"first": 0, "count": 300_000}],
                       ["flush", 120]], ring_bytes=8 * MiB)
    ev = done(a, "flush", 240)
    assert ev["event"] == "flush", ev
    grown = rss.stop() - base
    print(f"RssAnon +{grown / MiB:.1f} MiB after 300000 step marks under an open trigger")
    assert grown < 6 * MiB, f"dumpd's heap grew by {grown / MiB:.1f} MiB"
    h.finish()


def test_a_net_name_longer_than_a_directory_name_is_refused(harness):
    """net_name names a directory: past 255 bytes the session is refused, naming the limit.
    The old daemon took 2 MiB names and kept each in the job's account for its whole life."""
    h = harness()
    base = None
    for i in range(8):
        a = script_agent(h, f"long-net-{i}", UID_A, 90 + i,
                         lambda root: recorder_job(root, net_name=chr(ord("a") + i) * (2 * MiB)),
                         [["flush"]], ring_bytes=1 * MiB)
        ev = done(a, "welcome")
        assert ev["event"] == "refused", ev
        assert "net_name is 2097152 characters long; it names a directory of the dump tree, " \
               "which holds at most 255" in ev["message"], ev
        if base is None:
            # After the first: reading a 2 MiB Hello takes buffers the allocator keeps for
            # the next one. Nothing of a refused session may stay.
            base = rss_anon(h.pid)
    grown = rss_anon(h.pid) - base
    assert grown < 6 * MiB, f"dumpd's heap grew by {grown / MiB:.1f} MiB over 7 sessions"
    h.finish()


def test_a_pause_holds_for_a_client_that_sends_no_step_mark(harness):
    """Root pauses the session; the client then commits 200 ops of new iterations without a
    step mark. None is written (the old daemon wrote all 200, enforcing the pause only at the
    second step mark, while status said paused)."""
    h = harness()
    go = h.workdir / "go"  # the agent (another uid) waits for it
    a = script_agent(h, "no-marks", UID_A, 100, lambda root: recorder_job(root, iteration="all"),
                      [["step", 0], ["ops", {"name": "Default/Op-op0", "iteration": 0}],
                       ["flush"], ["wait", str(go)],
                       ["ops", {"name": "Default/Op-op0", "iteration": 1, "count": 200,
                                "per_iteration": 1}],
                       ["flush"]])
    ev = done(a, "flush")
    assert ev["event"] == "flush" and ev["written"] == 1, ev
    session = h.session_of_rank(100)
    out = subprocess.run([DUMPCTL, "--socket", h.socket, "control", str(session["id"]),
                          "--pause"], capture_output=True, text=True, timeout=DEADLINE_S)
    assert out.returncode == 0, out.stderr
    go.touch()
    ev = a.wait(lambda e: e["event"] == "flush" and e["sequence"] > 3 or
                e["event"] == "refused", 60, "the second flush")
    assert ev["event"] == "flush", ev
    assert ev["written"] == 1, f"{ev['written'] - 1} ops written while paused"
    iterations = sorted(int(p.name) for p in (a.root / "rank_100" / "Net" / "0").iterdir())
    assert iterations == [0], iterations
    assert h.session_of_rank(100)["paused"] is True
    h.finish()


def test_a_trigger_reason_that_is_not_utf8_skips_the_record_not_the_session(harness):
    """An older client cut a reason inside a character: the record holds invalid UTF-8. dumpd
    skips that record with a warning naming the field and the session goes on (it ended the
    session, and the job's next call failed with a broken pipe)."""
    h = harness()
    job = lambda root: recorder_job(root, steps=2, triggers=["manual"])  # noqa: E731
    cut = ("€" * 400).encode()[:1024]
    a = script_agent(h, "cut-reason", UID_B, 110, job,
                      [["step", 1], ["ops", {"name": "Default/Op-op0", "iteration": 1}],
                       ["trigger", {"reason_hex": cut.hex()}],
                       ["ops", {"name": "Default/Op-op1", "iteration": 1}], ["flush"],
                       ["trigger", "then a real one"], ["step", 2], ["flush"]])
    first = done(a, "flush")
    assert first["event"] == "flush", first
    second = a.wait(lambda e: e["event"] == "refused" or
                    (e["event"] == "flush" and e["sequence"] > first["sequence"]), DEADLINE_S,
                    "the second flush")
    assert second["event"] == "flush", second
    session = h.session_of_rank(110)
    assert "its string field dumpd.v1.Trigger.reason is not valid UTF-8" in \
        session["last_error"], session
    assert session["recorder"]["triggers"] == 1, session["recorder"]
    h.finish()


def test_four_flooding_uids_leave_room_for_a_fifth(harness):
    """Four uids (one allowed a quarter of recorder_memory_bytes each) flood their recorders
    with tiny records; a fifth, benign uid then keeps all 4 iterations it asks to keep. The
    floods must leave a quarter of the budget free past a floor each: the old daemon let them
    take it all, and the fifth kept 3 of 4 iterations with nothing counted anywhere."""
    budget = 16 * MiB
    h = harness(settings={"recorder_memory_bytes": budget, "max_ring_bytes": 256 * MiB})
    recorder = dict(steps=1024, max_bytes=1 << 40, triggers=["manual"])
    for i, uid in enumerate((1241, 1242, 1243, 1244)):
        a = script_agent(h, f"hog-{uid}", uid, 120 + i,
                       lambda root: recorder_job(root, **recorder),
                       [["step", 0],
                        ["ops", {"name": "Default/Tiny-op0", "count": 200_000,
                                 "per_iteration": 1000}],
                        ["flush", 120]], ring_bytes=128 * MiB)
        ev = done(a, "flush", 180)
        assert ev["event"] == "flush", ev
    b = script_agent(h, "modest", 1245, 130, lambda root: recorder_job(root, steps=4, **{
                   k: v for k, v in recorder.items() if k != "steps"}),
                   [["step", 0],
                    ["ops", {"name": "Default/Tiny-op0", "count": 800, "per_iteration": 200}],
                    ["flush", 60]], ring_bytes=16 * MiB)
    ev = done(b, "flush", 90)
    assert ev["event"] == "flush", ev
    st = h.status()
    hogs = [h.session_of_rank(r, st)["recorder"] for r in (120, 121, 122, 123)]
    modest = h.session_of_rank(130, st)["recorder"]
    print(f"hogs refused {[r['refused_for_memory'] for r in hogs]}, discarded "
          f"{[r['discarded_for_memory'] for r in hogs]}; modest {modest}")
    assert sum(r["refused_for_memory"] + r["discarded_for_memory"] for r in hogs) > 0, hogs
    assert modest["kept_iterations"] == 4, modest
    assert (modest["refused_for_memory"], modest["discarded_for_memory"],
            modest["not_kept_whole"]) == (0, 0, 0), modest
    h.finish()


def test_an_iteration_given_up_for_memory_is_counted_and_journalled(harness):
    """A session whose uid's share of recorder_memory_bytes holds less than its `steps`
    iterations discards its own oldest ones to keep the new: each is counted in status
    (discarded_for_memory) and the trigger lists it in iterations_not_written with why."""
    budget = 4 * MiB  # a uid's share: 1 MiB, a few thousand tiny records
    h = harness(settings={"recorder_memory_bytes": budget})
    job = lambda root: recorder_job(root, steps=64, max_bytes=1 << 40,  # noqa: E731
                                    triggers=["manual"], after_steps=0)
    a = script_agent(h, "small-share", UID_A, 140, job,
                      [["step", 0],
                       ["ops", {"name": "Default/Tiny-op0", "count": 20_000,
                                "per_iteration": 300}],
                       ["step", 100], ["trigger", "look"], ["step", 101], ["flush", 60]],
                      ring_bytes=32 * MiB)
    ev = done(a, "flush", 90)
    assert ev["event"] == "flush", ev
    rec = h.session_of_rank(140)["recorder"]
    assert rec["discarded_for_memory"] > 0, rec
    line = wait_for(lambda: list((a.root / "rank_140" / ".dump_metadata").glob("triggers.jsonl")),
                    DEADLINE_S, "triggers.jsonl")[0].read_text().splitlines()[0]
    missed = json.loads(line)["iterations_not_written"]
    assert any("recorder_memory_bytes was used up" in m["why"] for m in missed), missed
    h.finish()
