"""Runtime control (`dumpctl control`, daemon/dump_session_control.cc) cannot be turned against
dumpd or the operator: control updates do not queue without bound, journals obey journal_bytes,
a pause is enforced by dumpd whatever the client says, the log lines a client can cause are
rate-limited, and a job's quota spans its reconnections (issue 36).

Each scenario runs the real dumpd with the benign neighbour of hostile_harness.py and ends with
Harness.finish. The hostile client is a `rawclient.py steps` agent (agent_steps) of uid 1234:
a raw session whose step marks name the selection generations the test chooses, and which
never reads its socket while it runs.
"""

import json
import math
import re
import subprocess
import time

import pytest

from conftest import DUMPCTL, wait_for
from hostile_harness import (DEADLINE_S, UID_A, Sampler, harness,  # noqa: F401
                             job_config, make_dir, write_job)
import rawclient as rc

pytestmark = pytest.mark.conditional  # needs root: hostile_harness skips the file otherwise

MAX_ITERATION_BYTES = 65536  # RuntimeSelection::kMaxIterationBytes
MAX_ITERATION_RANGES = 4096  # RuntimeSelection::kMaxIterationRanges


# ---------------------------------------------------------------- helpers


def dumpctl(h, *args, uid=None):
    """`dumpctl --socket ... ARGS` as root, or as `uid` through setpriv."""
    cmd = [DUMPCTL, "--socket", h.socket, *map(str, args)]
    if uid is not None:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)


def control(h, sid, *args, uid=None):
    out = dumpctl(h, "control", sid, *args, uid=uid)
    assert out.returncode == 0, f"dumpctl control {args[:1]}: {out.stderr[:500]}"
    return out


def rss_anon(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon")


def ranges(count, first, width=5, gap=10):
    """An iteration list of `count` separate ranges ("first-first+width|...")."""
    return "|".join(f"{first + gap * k}-{first + gap * k + width}" for k in range(count))


def steps_agent(h, workdir, name, rank, *args, common=None, extra=None):
    """A `rawclient.py steps` agent of uid 1234 in root `workdir/name` (its own) at `rank`;
    returns (agent, root, session id) once it holds (before step --hold-at)."""
    root = make_dir(workdir / name, owner=UID_A)
    cfg = job_config(root, **(common or {}))
    cfg.update(extra or {})
    config = write_job(workdir, f"{name}-{rank}.json", cfg)
    a = h.agent("steps", "--socket", h.socket, "--config", config, "--root", root,
                "--rank", rank, *args, uid=UID_A)
    ev = a.wait(lambda e: e["event"] in ("holding", "refused"), DEADLINE_S,
                f"the {name} session")
    assert ev["event"] == "holding", ev
    return a, root, ev["id"]


def go(agent):
    agent.proc.stdin.write("go\n")
    agent.proc.stdin.flush()


def flushed(agent, timeout=120):
    ev = agent.wait(lambda e: e["event"] in ("flushed", "refused"), timeout, "its flush")
    assert ev["event"] == "flushed", ev
    return ev


def session(h, sid):
    found = [s for s in h.status()["sessions"] if s["id"] == sid]
    return found[0] if found else None


def iterations(root, rank):
    base = root / f"rank_{rank}" / "Net" / "0"
    return sorted(int(d.name) for d in base.iterdir()) if base.exists() else []


# ---------------------------------------------------------------- 1. updates are bounded


def test_control_updates_do_not_queue_without_bound(harness, workdir):
    """A session that never reads its socket, and many `dumpctl control --iteration`s.

    An iteration list over 65536 bytes, or of over 4096 separate ranges once merged, is
    refused with an error that says so (dumpctl's, and a raw 3 MB SessionCommand's), and the
    selection stays. Valid lists near the cap (4000 ranges, 64 KB), sent 800 times, leave
    dumpd's anonymous memory within 40 MiB: at most one SelectionUpdate waits per connection
    (a newer one replaces it), so when the client reads at last it finds a few, in order,
    ending with the newest.

    On the old daemon the refusals fail first (it took any list, 3 MB too); its queue held
    every update (800 x 64 KB), past the RSS bound as well.
    """
    h = harness()
    agent, _, sid = steps_agent(h, workdir, "unread", 3, "--read-updates")

    too_long = ranges(3000, 1_000_000_000)  # 22 bytes a range: 66 KB, under 4096 ranges
    assert len(too_long) > MAX_ITERATION_BYTES
    out = dumpctl(h, "control", sid, "--iteration", too_long)
    assert out.returncode != 0 and f"at most {MAX_ITERATION_BYTES}" in out.stderr, out
    too_many = "|".join(str(2 * k) for k in range(5000))  # 24 KB, 5000 ranges
    out = dumpctl(h, "control", sid, "--iteration", too_many, uid=UID_A)
    assert out.returncode != 0 and f"at most {MAX_ITERATION_RANGES}" in out.stderr, out
    s = session(h, sid)
    assert s["selection"] == "all" and not s["selection_changed"], s
    # The ranges are counted once merged: 5000 adjacent ones are one, and allowed.
    control(h, sid, "--iteration", ranges(5000, 0, width=0, gap=1))
    assert session(h, sid)["selection"] == "0-4999"
    # dumpctl's argument cannot be longer than 128 KiB; a raw command can.
    env = rc.pb2().Envelope()
    env.session_command.target.session_id = sid
    env.session_command.control.iteration = ranges(150_000, 1_000_000_000)  # 3.3 MB
    c = rc.Conn(h.socket, timeout=DEADLINE_S)
    h.cleanups.append(c.close)
    c.send(env)
    reply = c.recv(DEADLINE_S)
    assert reply is not None and reply.HasField("error"), reply
    assert f"at most {MAX_ITERATION_BYTES}" in reply.error.message, reply.error
    assert session(h, sid)["selection"] == "0-4999"

    sends = 800
    base = rss_anon(h.pid)
    rss = Sampler(lambda: rss_anon(h.pid), period=0.02)
    for k in range(sends):
        near_cap = ranges(4000, 1_000_000 + k)  # 16 bytes a range: 64 KB
        assert len(near_cap) < MAX_ITERATION_BYTES
        control(h, sid, "--iteration", near_cap)
    peak = rss.stop()
    print(f"RssAnon +{(peak - base) >> 20} MiB after {sends} updates to a client that "
          "does not read")
    assert peak - base < 40 << 20, f"RssAnon grew by {(peak - base) >> 20} MiB"

    go(agent)  # the client reads at last
    gens = agent.wait(lambda e: e["event"] == "updates", 3 * DEADLINE_S,
                      "the updates")["generations"]
    print(f"the client found {len(gens)} SelectionUpdates: {gens}")
    assert gens and gens[-1] == sends + 1, gens
    # What the socket's buffer held, the frame being written, and the one that waited.
    wmem = int(open("/proc/sys/net/core/wmem_default").read())
    assert gens == sorted(set(gens)) and len(gens) <= max(16, 2 * wmem // 60000 + 4), gens
    flushed(agent)
    h.finish()


# ---------------------------------------------------------------- 2. journals


def test_journals_obey_journal_bytes(harness, workdir):
    """journal_bytes (64 KiB here) caps what one job appends to .dump_metadata/control.jsonl
    and triggers.jsonl: of 100 changes with 32 KB iteration lists, lines past it are not
    written, and status counts them (journal_lines_refused). Long lists are summarised: the
    first ranges (at most 256 bytes, ending in "|..."), iteration_ranges, iteration_bytes. The
    allowance is the job's: the same client reconnecting into the same root, rank and net
    gets none back.

    The old daemon refuses to start with a journal_bytes setting (unknown key); it also wrote
    every list whole (6 MB of control.jsonl here, without the setting).
    """
    limit = 64 << 10
    h = harness(settings={"journal_bytes": limit})
    agent, root, sid = steps_agent(h, workdir, "journal", 4)
    lists = [ranges(2000, 1_000_000 + k) for k in range(100)]  # 32 KB, 2000 ranges each
    for it in lists:
        control(h, sid, "--iteration", it, uid=UID_A)
    meta = root / "rank_4" / ".dump_metadata"

    def lines():
        p = meta / "control.jsonl"
        return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []

    s = wait_for(lambda: (lambda s: s if s["journal_lines_refused"] + len(lines()) == 100
                          else None)(session(h, sid)), DEADLINE_S,
                 "100 changes journalled or refused")
    written = lines()
    sizes = {p.name: p.stat().st_size for p in meta.glob("*.jsonl")
             if p.name in ("control.jsonl", "triggers.jsonl")}
    longest = max(len(json.dumps(x)) + 1 for x in written)
    print(f"{len(written)} lines written ({sizes}), {s['journal_lines_refused']} refused, "
          f"the longest {longest} bytes")
    assert s["journal_lines_refused"] > 0, s
    assert sum(sizes.values()) <= limit + longest, sizes
    for n, line in enumerate(written):
        new = line["new"]
        assert new["iteration"].endswith("|...") and len(new["iteration"]) <= 256 + 4, line
        assert lists[n].startswith(new["iteration"][:-4]), line
        assert new["iteration_ranges"] == 2000 and new["iteration_bytes"] == len(lists[n])
        assert line["uid"] == UID_A and line["generation"] == n + 1, line
        if n:
            assert line["old"]["iteration"] == written[n - 1]["new"]["iteration"], line

    # Reconnected (killed, no Goodbye): the same job, with what is left of its allowance
    # (less than one line of the first session), not a new one.
    agent.kill()
    wait_for(lambda: session(h, sid) is None, DEADLINE_S, "the journal session to end")
    again, _, sid2 = steps_agent(h, workdir, "journal", 4)
    for it in lists[:5]:
        control(h, sid2, "--iteration", it, uid=UID_A)
    s = wait_for(lambda: (lambda s: s if s["journal_lines_refused"] + len(lines()) ==
                          len(written) + 5 else None)(session(h, sid2)), DEADLINE_S,
                 "the reconnected job's 5 changes journalled or refused")
    size = (meta / "control.jsonl").stat().st_size
    print(f"after reconnecting: {len(lines()) - len(written)} lines written, "
          f"{s['journal_lines_refused']} refused; control.jsonl {size} bytes")
    assert s["journal_lines_refused"] >= 4, s
    assert size <= limit, size
    again.close_stdin()
    h.finish()


# ---------------------------------------------------------------- 3. pause


def test_pause_is_enforced_whatever_the_client_acknowledges(harness, workdir):
    """`dumpctl control --pause` binds a client that ignores it. One client never applies
    the update (its step marks keep naming generation 0), another names 1 once, then 0
    again. Paused after step `hold` (iterations 0..hold-1 written), 10 more steps: from the
    client's second step mark after the pause was sent, dumpd writes nothing selected (the
    first, `hold`, may still be written by the one that ignores it), and status says paused.
    Naming an older generation does not undo the pause.

    The old daemon kept writing every iteration of the first client, and from hold+1 on of
    the second.
    """
    h = harness()
    hold, steps = 3, 13
    clients = {}
    for rank, generations in ((1, "0"), (2, "1,0")):
        clients[rank] = steps_agent(h, workdir, "pause", rank, "--steps", steps,
                                    "--hold-at", hold, "--generations", generations)
    for rank, (agent, root, sid) in clients.items():
        control(h, sid, "--pause")
        go(agent)
    for rank, (agent, root, sid) in clients.items():
        flushed(agent)
        written = iterations(root, rank)
        print(f"rank {rank}: iterations written {written}")
        last = hold if rank == 1 else hold - 1  # rank 2 applied it at its first mark
        assert written == list(range(last + 1)), (rank, written)
        s = session(h, sid)
        assert s["paused"] is True and s["selection_changed"] is True, s
    for agent, _, _ in clients.values():
        agent.close_stdin()
    h.finish()


# ---------------------------------------------------------------- 4. log floods


def test_selection_and_trigger_log_lines_are_rate_limited(harness, workdir):
    """A client whose step marks alternate between two acknowledged generations (1, 2, 1,
    2, ...) for 1000 steps, with two manual Trigger records a step (a flight recorder with
    max_triggers 0): 1000 step marks that name another selection and 2000 triggers, all
    done (triggers.jsonl has every one), but the lines dumpd logs about the session's
    selections and triggers stay few: the session's info lines are rate-limited as its
    warnings are (LogLimiter: 5 a 10 s window, then a count of those suppressed).

    The old daemon logged a line for every selection switch and every trigger (3000 here).
    """
    h = harness()
    steps, triggers = 1000, 2
    recorder = {"flight_recorder": {"steps": 1, "after_steps": 0, "max_triggers": 0,
                                    "triggers": ["manual"]}}
    agent, root, sid = steps_agent(h, workdir, "flood", 5, "--steps", steps, "--hold-at", 1,
                                   "--generations", "1,2", "--cycle", "--triggers", triggers,
                                   "--elements", 16, common={"iteration": "100000000"},
                                   extra=recorder)
    control(h, sid, "--iteration", "200000000")
    control(h, sid, "--iteration", "300000000")
    t0 = time.monotonic()
    go(agent)
    flushed(agent)
    took = time.monotonic() - t0
    journal = root / "rank_5" / ".dump_metadata" / "triggers.jsonl"
    # A trigger's line comes when its iteration is done: the last one's when the agent, which
    # holds its session open, lets it end.
    wait_for(lambda: journal.exists() and
             len(journal.read_text().splitlines()) == steps * triggers - 1, DEADLINE_S,
             f"{steps * triggers - 1} lines in triggers.jsonl")
    assert session(h, sid)["recorder"]["triggers"] == steps * triggers
    mine = re.compile(rf"session {sid}: .*(selection|trigger)", re.IGNORECASE)
    logged = [x for x in h.log().decode(errors="replace").splitlines() if mine.search(x)]
    # Per 10 s window: 5 info lines and a count of those suppressed, the same for warnings;
    # and the two control commands.
    allowed = max(50, 12 * (math.ceil(took / 10) + 1) + 2)
    print(f"{len(logged)} lines logged about session {sid}'s selections and triggers in "
          f"{took:.1f} s (allowed {allowed}); first: {logged[:3]}")
    assert len(logged) <= allowed, "\n".join(logged[:20] + ["..."] + logged[-5:])
    agent.close_stdin()
    h.finish()


# ---------------------------------------------------------------- 5. quota


def test_job_quota_spans_reconnections(harness, workdir):
    """job_quota_bytes (4 MiB) is the job's (uid, dump root, rank, net), not one session's:
    a client of uid 1234 writes 2.4 MiB into root R, rank 0, net "Net", is killed
    (SIGKILL, no Goodbye), reconnects with the same root, rank and net, and so on 5 times.
    The payload files under rank_0/Net stay within the quota (plus one tensor), and from the
    second session on status says payloads stopped for the quota.

    (The quota is 4 MiB rather than 1 so that the benign neighbour, which has the same
    quota for its own job, stays far below it however slow the machine is.)

    The old daemon gave each session a quota of its own: 12 MiB written.
    """
    quota = 4 << 20
    tensor = 100 << 10  # bytes a step
    per_session = 24  # steps: 2.4 MiB
    h = harness(settings={"job_quota_bytes": quota})
    stopped = []
    for k in range(5):
        agent, root, sid = steps_agent(h, workdir, "quota", 0, "--steps", per_session,
                                       "--elements", tensor // 4,
                                       "--first-iteration", k * per_session)
        go(agent)
        flushed(agent)
        stopped.append(session(h, sid)["stop_reason"])
        agent.kill()  # SIGKILL: no Goodbye, the ring drained by dumpd
        wait_for(lambda: session(h, sid) is None, DEADLINE_S, f"session {sid} to end")
    files = list((root / "rank_0" / "Net").rglob("*.npy"))
    total = sum(f.stat().st_size for f in files)
    print(f"{len(files)} payload files, {total} bytes; stop reasons {stopped}")
    assert total <= quota + tensor + 128 * len(files), total
    assert total >= quota - tensor, total
    assert stopped[0] == "", stopped
    for reason in stopped[1:]:
        assert "quota" in reason, stopped
    h.finish()
