"""The flight recorder (docs/recorder.md): iterations the job does not select are kept in the
ring and written only when a trigger fires. Real dumpd, real clients, files read with numpy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

import dumpd
from conftest import Daemon, dump_files, dumpctl, index_files, make_config, wait_for

NOTHING = "none"  # no iteration selected: every step is only recorded


def recorder_config(tmp_path: Path, **recorder: Any) -> Path:
    section = {"steps": 3, "after_steps": 1, "max_triggers": 1}
    section.update(recorder)
    path = make_config(tmp_path, iteration=NOTHING, saved_data="full")
    cfg = json.loads(path.read_text())
    cfg["flight_recorder"] = section
    path.write_text(json.dumps(cfg))
    return path


def triggers(root: Path) -> List[Dict[str, Any]]:
    files = list(root.glob("rank_*/.dump_metadata/triggers.jsonl"))
    if not files:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines()]


def iterations(root: Path) -> List[int]:
    return sorted({int(f.iteration) for f in dump_files(root)})


def session_status(sock: str) -> Dict[str, Any]:
    out = subprocess.run([os.environ["DUMPCTL_BIN"], "--socket", sock, "status", "--json"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    sessions = json.loads(out.stdout)["sessions"]
    assert len(sessions) == 1, sessions
    return sessions[0]


def value(step: int, op: int) -> float:
    return float(step * 100 + op)


def run_steps(client: dumpd.Client, n: int, x: np.ndarray, y: np.ndarray, inf_at: int = -1,
              each=None) -> None:
    """n steps of two ops; the buffers are reused and overwritten every step."""
    for step in range(n):
        client.set_step(step)
        for op in range(2):
            x.fill(value(step, op))
            np.multiply(x, 2, out=y)
            if step == inf_at and op == 1:
                y[5] = np.inf
            assert client.dump_op("Mul", f"Default/Mul-op{op}", inputs=[x], outputs=[y])
        if each is not None:
            each(step)


def check_step_files(root: Path, steps: List[int], inf_at: int = -1) -> None:
    index = index_files(dump_files(root))
    for step in steps:
        for op in range(2):
            xin = index[(step, f"Default_Mul-op{op}", "input", 0)].load()
            yout = index[(step, f"Default_Mul-op{op}", "output", 0)].load()
            want = np.full(64, value(step, op), dtype=np.float32)
            assert np.array_equal(xin, want), (step, op)
            want_y = want * 2
            if step == inf_at and op == 1:
                want_y[5] = np.inf
            assert np.array_equal(yout, want_y), (step, op)


def test_a_trigger_near_the_end_lists_exactly_the_iterations_on_disk(daemon: Daemon,
                                                                    tmp_path: Path) -> None:
    """The trigger's line names the iteration directories written, and says why the rest of
    its window is not there (issue 38: it used to list 7-10 with 10 never written)."""
    config = recorder_config(tmp_path, after_steps=3)
    client = dumpd.Client(str(config), socket=daemon.socket)
    x = np.empty(64, dtype=np.float32)
    y = np.empty(64, dtype=np.float32)
    run_steps(client, 10, x, y, each=lambda step: step == 7 and client.trigger("near the end"))
    client.close()
    root = tmp_path / "dump"
    [t] = triggers(root)
    assert t["iteration"] == 7
    assert iterations(root) == [5, 6, 7, 8, 9]
    assert t["iterations_written"] == iterations(root)
    assert t["iterations_not_written"] == [
        {"first": 10, "last": 10, "why": "the job closed its session first"}]
    assert t["iterations_not_whole"] == []
    check_step_files(root, [5, 6, 7, 8, 9])


def test_inf_writes_the_kept_steps_and_the_next(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path)
    client = dumpd.Client(str(config), socket=daemon.socket)
    x = np.empty(64, dtype=np.float32)
    y = np.empty(64, dtype=np.float32)
    run_steps(client, 30, x, y, inf_at=17)
    client.flush()
    status = session_status(daemon.socket)["recorder"]
    client.close()
    root = tmp_path / "dump"
    # Steps 15-17 were kept (steps 3, the triggering one included), 18 written after it.
    assert iterations(root) == [15, 16, 17, 18]
    check_step_files(root, [15, 16, 17, 18], inf_at=17)
    [t] = triggers(root)
    assert t["kind"] == "inf"
    assert t["iteration"] == 17
    assert t["op"] == "Default/Mul-op1"
    assert t["tensor"] == "output 0"
    assert t["iterations_written"] == [15, 16, 17, 18]
    assert status["triggers"] == 1
    assert status["recording"] is False  # max_triggers 1
    assert "inf at iteration 17" in status["last_trigger"]
    # statistic.csv is there as for a selected iteration (saved_data full).
    for it in (15, 18):
        assert list(root.glob(f"rank_0/Net/0/{it}/statistic.csv")), it
    assert "flight recorder trigger" in daemon.log_text()


def test_nan_is_named_before_a_later_inf(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path, steps=2, after_steps=0)
    client = dumpd.Client(str(config), socket=daemon.socket)
    for step in range(6):
        client.set_step(step)
        a = np.ones(16, dtype=np.float32)
        b = np.ones(16, dtype=np.float32)
        if step == 4:
            a[3] = np.nan
            b[0] = np.inf
        client.dump_op("Div", "Default/Div-op0", outputs=[a])
        client.dump_op("Exp", "Default/Exp-op1", outputs=[b])
    client.close()
    root = tmp_path / "dump"
    [t] = triggers(root)
    assert (t["kind"], t["op"], t["iteration"]) == ("nan", "Default/Div-op0", 4)
    assert iterations(root) == [3, 4]


def test_nothing_written_without_a_trigger(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path)
    client = dumpd.Client(str(config), socket=daemon.socket)
    x = np.empty(64, dtype=np.float32)
    y = np.empty(64, dtype=np.float32)
    run_steps(client, 10, x, y)
    client.flush()
    status = session_status(daemon.socket)["recorder"]
    assert status["kept_iterations"] == 3
    assert status["kept_bytes"] > 0
    assert status["triggers"] == 0 and status["recording"] is True
    client.close()
    assert dump_files(tmp_path / "dump") == []
    assert triggers(tmp_path / "dump") == []


def test_manual_trigger_from_code_is_on_disk_after_flush(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path, steps=2)
    client = dumpd.Client(str(config), socket=daemon.socket)
    x = np.empty(64, dtype=np.float32)
    y = np.empty(64, dtype=np.float32)
    seen: List[List[int]] = []

    def at(step: int) -> None:
        if step == 5:
            client.trigger("looked wrong")
            client.flush()
            # Kept iterations 4 and 5 are written when flush returns.
            seen.append(iterations(tmp_path / "dump"))

    run_steps(client, 9, x, y, each=at)
    client.close()
    root = tmp_path / "dump"
    assert seen == [[4, 5]]
    assert iterations(root) == [4, 5, 6]
    check_step_files(root, [4, 5, 6])
    [t] = triggers(root)
    assert (t["kind"], t["reason"], t["iteration"]) == ("manual", "looked wrong", 5)


@pytest.mark.parametrize("reason", ["€" * 400, "损失突然变大了，看看第七步" * 3, "loss 📈🔥 " * 150],
                         ids=["euro", "chinese", "emoji"])
def test_a_long_non_ascii_reason_works_end_to_end(daemon: Daemon, tmp_path: Path,
                                                  reason: str) -> None:
    """Issue 48: the client cut a reason at 1024 bytes inside a character (400 x "€" is 1200
    bytes); protobuf refused the invalid UTF-8, dumpd ended the session and the job's next
    call failed with a broken pipe. Now the reason is cut between characters: the trigger
    fires, status and triggers.jsonl show it, and the session goes on."""
    config = recorder_config(tmp_path, steps=2, max_triggers=0)
    client = dumpd.Client(str(config), socket=daemon.socket)
    x = np.empty(64, dtype=np.float32)
    y = np.empty(64, dtype=np.float32)
    run_steps(client, 3, x, y, each=lambda step: step == 2 and client.trigger(reason))
    counts = client.flush()
    assert counts["last_error"] == "", counts
    kept = reason.encode()[:1024].decode(errors="ignore")
    assert len(kept.encode()) <= 1024 and reason.startswith(kept)
    out = subprocess.run([os.environ["DUMPCTL_BIN"], "--socket", daemon.socket, "status",
                          "--json"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    [status] = [s for s in json.loads(out.stdout)["sessions"]
                if s["path"] == str(tmp_path / "dump")]
    assert status["recorder"]["triggers"] == 1, status
    shown = status["recorder"]["last_trigger"]
    assert ("manual at iteration 2: " + kept).startswith(shown) and len(shown) > 40, shown
    client.set_step(3)  # the session goes on
    assert client.dump("Add", "Default/Add-op0", "output", 0, x)
    assert client.flush()["last_error"] == ""
    client.close()
    [t] = triggers(tmp_path / "dump")
    assert t["reason"] == kept


def test_the_client_stops_copying_after_max_triggers(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path, steps=2)  # max_triggers 1, after_steps 1
    client = dumpd.Client(str(config), socket=daemon.socket)
    x = np.empty(64, dtype=np.float32)
    y = np.empty(64, dtype=np.float32)

    copied = []
    for step in range(10):
        client.set_step(step)
        copied.append(client.dump_op("Mul", "Default/Mul-op0", inputs=[x], outputs=[y]))
        if step == 5:
            client.trigger("once")
        if step == 7:
            # Step 6 (after_steps) is done: dumpd has told the client to stop recording; it
            # applies that at its next step mark.
            client.flush()
    stats = client.stats()
    client.close()
    root = tmp_path / "dump"
    assert iterations(root) == [4, 5, 6]
    # Steps 0-7 were copied (2 tensors each), 8 and 9 no longer.
    assert copied == [True] * 8 + [False] * 2
    assert stats["tensors_committed"] == 8 * 2, stats
    asked, took = [json.loads(x) for x in
                   (root / "rank_0/.dump_metadata/control.jsonl").read_text().splitlines()]
    assert asked["new"]["recorder_on"] is False
    assert asked["by"] == "dumpd" and "uid" not in asked
    assert asked["reason"] == "the flight recorder stopped after max_triggers"
    # The client stopped copying from step 8 (applied at that mark).
    assert (took["generation"], took["in_force_from_iteration"]) == (asked["generation"], 8)


def test_loss_spike_nan_loss_and_max_triggers(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path, steps=1, after_steps=0, max_triggers=2,
                             loss_spike={"window": 5, "factor": 3.0})
    client = dumpd.Client(str(config), socket=daemon.socket)
    x = np.empty(64, dtype=np.float32)
    y = np.empty(64, dtype=np.float32)
    losses = {12: 10.0, 20: float("nan"), 25: 50.0}

    def report(step: int) -> None:
        client.report_loss(losses.get(step, 1.0 + 0.01 * (step % 3)))

    run_steps(client, 30, x, y, each=report)
    client.close()
    root = tmp_path / "dump"
    ts = triggers(root)
    assert [t["kind"] for t in ts] == ["loss_spike", "loss_spike"]
    assert [t["iteration"] for t in ts] == [12, 20]
    assert ts[0]["losses"][-1] == 10.0 and len(ts[0]["losses"]) == 6
    assert ts[1]["reason"] == "loss nan" and ts[1]["losses"][-1] == "nan"
    # The third spike (step 25) came after max_triggers: nothing more was written.
    assert iterations(root) == [12, 20]


def test_no_trigger_kind_outside_the_list(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path, triggers=["manual"])
    client = dumpd.Client(str(config), socket=daemon.socket)
    x = np.empty(64, dtype=np.float32)
    y = np.empty(64, dtype=np.float32)
    run_steps(client, 8, x, y, inf_at=3)
    client.close()
    assert triggers(tmp_path / "dump") == []
    assert dump_files(tmp_path / "dump") == []


def test_selected_iterations_are_dumped_as_before(daemon: Daemon, tmp_path: Path) -> None:
    path = make_config(tmp_path, iteration="2|7", saved_data="tensor")
    cfg = json.loads(path.read_text())
    cfg["flight_recorder"] = {"steps": 2, "after_steps": 0}
    path.write_text(json.dumps(cfg))
    client = dumpd.Client(str(path), socket=daemon.socket)
    x = np.empty(64, dtype=np.float32)
    y = np.empty(64, dtype=np.float32)
    run_steps(client, 10, x, y, inf_at=5)
    client.close()
    root = tmp_path / "dump"
    # 2 and 7 as selected; 4 and 5 by the inf trigger at 5.
    assert iterations(root) == [2, 4, 5, 7]
    check_step_files(root, [2, 4, 5, 7], inf_at=5)
    # The recorder's saved_data (full) applies to the iterations it wrote only.
    assert list(root.glob("rank_0/Net/0/4/statistic.csv"))
    assert not list(root.glob("rank_0/Net/0/2/statistic.csv"))


def test_recorder_statistics_when_the_job_saves_tensors(daemon: Daemon, tmp_path: Path) -> None:
    path = make_config(tmp_path, iteration=NOTHING, saved_data="tensor")
    cfg = json.loads(path.read_text())
    cfg["flight_recorder"] = {"steps": 1, "saved_data": "statistic", "after_steps": 0}
    path.write_text(json.dumps(cfg))
    client = dumpd.Client(str(path), socket=daemon.socket)
    client.set_step(0)
    client.dump_op("Mul", "Default/Mul-op0", outputs=[np.arange(8, dtype=np.float32)])
    client.trigger("x")
    client.close()
    root = tmp_path / "dump"
    assert dump_files(root) == []  # statistics only
    [csv] = list(root.glob("rank_0/Net/0/0/statistic.csv"))
    header, row = csv.read_text().splitlines()
    cols = dict(zip(header.split(","), row.split(",")))
    assert (cols["Max Value"], cols["Min Value"]) == ("7", "0"), cols


CRASHING_CLIENT = r"""
import os, signal, sys
import numpy as np
import dumpd

config, sock = sys.argv[1], sys.argv[2]
client = dumpd.Client(config, socket=sock)
x = np.empty(64, dtype=np.float32)
for step in range(10):
    client.set_step(step)
    for op in range(2):
        x.fill(step * 100 + op)
        client.dump_op("Mul", f"Default/Mul-op{op}", inputs=[x], outputs=[x * 2])
    if step == 9:
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_crash_writes_the_kept_steps(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path)
    proc = subprocess.run([sys.executable, "-c", CRASHING_CLIENT, str(config), daemon.socket],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    root = tmp_path / "dump"
    wait_for(lambda: triggers(root), 30, "the crash trigger")
    [t] = triggers(root)
    assert t["kind"] == "crash" and t["iterations_written"] == [7, 8, 9]
    wait_for(lambda: len(dump_files(root)) == 12, 30, "iterations 7-9 on disk")
    assert iterations(root) == [7, 8, 9]
    check_step_files(root, [7, 8, 9])

    # Complete: each has its manifest line.
    def manifest() -> List[int]:
        lines = [json.loads(x) for f in root.glob("rank_0/.dump_metadata/manifest.jsonl")
                 for x in f.read_text().splitlines()]
        return sorted({m["iteration"] for m in lines})

    wait_for(lambda: manifest() == [7, 8, 9], 30, "manifest lines of 7-9")


def test_a_ring_too_small_never_blocks_training(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path, steps=4)
    # Each step is 4 tensors of 128 KiB; the ring (2 MiB) holds fewer than 4 steps.
    client = dumpd.Client(str(config), socket=daemon.socket, ring_bytes=2 << 20,
                          backpressure="drop")
    x = np.empty(32768, dtype=np.float32)
    for step in range(12):
        client.set_step(step)
        for op in range(2):
            x.fill(step * 100 + op)
            assert client.dump_op("Mul", f"Default/Mul-op{op}", inputs=[x], outputs=[x * 2])
        client.flush()
    status = session_status(daemon.socket)["recorder"]
    stats = client.stats()
    client.trigger("check what is kept")
    client.close()
    assert stats["tensors_dropped"] == 0, stats
    # Iterations were given up early: whole (the oldest, for space) or in part (the current
    # one, when the producer ran ahead of the drain by more than the headroom).
    assert status["discarded_for_space"] + status["not_kept_whole"] > 0, status
    assert "ring" in status["warning"] and "raise ring_bytes" in status["warning"], status
    assert "flight recorder: the ring" in daemon.log_text()
    root = tmp_path / "dump"
    written = iterations(root)
    assert written and written[-1] == 11 and len(written) < 4, written
    for f in dump_files(root):
        op = int(f.op_name.rsplit("-op", 1)[1])
        want = (int(f.iteration) * 100 + op) * (2 if f.io == "output" else 1)
        assert (f.load() == want).all(), f.path.name


@pytest.mark.conditional
@pytest.mark.skipif(os.geteuid() != 0, reason="runs dumpctl as another uid (needs root)")
def test_dumpctl_trigger_only_for_the_owner_or_root(tmp_path: Path) -> None:
    from conftest import start_daemon, stop_daemon
    d = start_daemon({"socket_mode": "0666"})
    try:
        # The daemon's directory is private to root: let uid 4321 reach the socket.
        d.workdir.chmod(0o755)
        config = recorder_config(tmp_path, steps=2)
        client = dumpd.Client(str(config), socket=d.socket)
        x = np.empty(64, dtype=np.float32)
        y = np.empty(64, dtype=np.float32)
        outcome: Dict[str, subprocess.CompletedProcess] = {}

        def at(step: int) -> None:
            if step != 4:
                return
            client.flush()
            sid = str(session_status(d.socket)["id"])
            outcome["other"] = dumpctl(d.socket, "trigger", sid, "--reason", "x", uid=4321)
            outcome["bad"] = dumpctl(d.socket, "trigger", "--rank", "0", "--job", "NoSuchNet")
            outcome["root"] = dumpctl(d.socket, "trigger", "--rank", "0", "--job", "Net",
                                      "--reason", "spike seen on the dashboard")
            # Fired by the session thread soon after; the iteration is the current one. (Its
            # triggers.jsonl line comes once its last iteration, 5, is done.)
            wait_for(lambda: session_status(d.socket).get("recorder", {}).get("triggers") == 1,
                     30, "the dumpctl trigger")
            outcome["again"] = dumpctl(d.socket, "trigger", "--pid", str(os.getpid()))

        run_steps(client, 8, x, y, each=at)
        client.close()
        other, bad, root = outcome["other"], outcome["bad"], outcome["root"]
        assert other.returncode == 1 and "is not yours (uid 4321)" in other.stderr, other.stderr
        assert "refused a command from uid 4321" in d.log_text()
        assert bad.returncode == 1 and "no live session of rank 0 of job NoSuchNet" in \
            bad.stderr, bad.stderr
        assert root.returncode == 0 and "triggered session" in root.stdout, root.stderr
        [t] = triggers(tmp_path / "dump")
        assert (t["kind"], t["reason"]) == ("manual", "spike seen on the dashboard")
        assert t["iterations_written"] == [3, 4, 5]
        assert iterations(tmp_path / "dump") == [3, 4, 5]
        check_step_files(tmp_path / "dump", [3, 4, 5])
        # Stopped after max_triggers: a second trigger is refused with the reason.
        again = outcome["again"]
        assert again.returncode == 1 and "stopped after 1 trigger(s)" in again.stderr, \
            again.stderr
    finally:
        stop_daemon(d)


def test_dumpctl_trigger_usage_errors() -> None:
    out = subprocess.run([os.environ["DUMPCTL_BIN"], "trigger", "--rank", "1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--rank and --job go together" in out.stderr
    out = subprocess.run([os.environ["DUMPCTL_BIN"], "trigger", "abc"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "'abc' is not a session id" in out.stderr


SCHED_OTHER, SCHED_IDLE = 0, 5


def session_thread_policies(pid: int) -> List[int]:
    """The scheduling policy of each of the daemon's session threads (/proc stat field 41)."""
    policies = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != "dumpd-session":
                continue
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        # Fields after the command's closing parenthesis start at field 3.
        policies.append(int(stat[stat.rindex(")") + 2:].split()[41 - 3]))
    return sorted(policies)


def test_a_recorder_sessions_reader_runs_at_normal_priority(daemon: Daemon,
                                                           tmp_path: Path) -> None:
    """With worker_priority "idle" (the default), ring readers run SCHED_IDLE; a job with a
    flight recorder's does not: it alone gives the kept ring space back, and on a node whose
    cores training keeps busy it got no CPU, so training waited for the space (issue 38)."""
    (tmp_path / "plain").mkdir()
    plain = dumpd.Client(str(make_config(tmp_path / "plain", iteration="0")), socket=daemon.socket)
    wait_for(lambda: session_thread_policies(daemon.proc.pid) == [SCHED_IDLE], 20,
             "the plain job's reader at SCHED_IDLE")
    recorded = dumpd.Client(str(recorder_config(tmp_path)), socket=daemon.socket)
    wait_for(lambda: session_thread_policies(daemon.proc.pid) == [SCHED_OTHER, SCHED_IDLE], 20,
             "the recorder job's reader at SCHED_OTHER")
    recorded.close()
    plain.close()
