"""Runtime control (docs/recorder.md): `dumpctl control` changes what a running job dumps from
its next step; only the session's uid or root may. Real dumpd, dumpctl and client; numpy."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np
import pytest

import dumpd
from conftest import (Daemon, dump_files, dumpctl, make_config, start_daemon, stop_daemon)
from conftest import dumpctl_control as control


def status(sock: str) -> Dict[str, Any]:
    out = dumpctl(sock, "status", "--json")
    assert out.returncode == 0, out.stderr
    [s] = json.loads(out.stdout)["sessions"]
    return s


def run(client: dumpd.Client, steps: int, at: Callable[[int], None],
        inf_at: int = -1) -> None:
    """Two ops a step, buffers reused; at(step) runs after the step's ops."""
    x = np.empty(32, dtype=np.float32)
    for step in range(steps):
        client.set_step(step)
        for op in range(2):
            x.fill(step * 10 + op)
            if step == inf_at:
                x[0] = np.inf
            client.dump_op("Mul", f"Default/Mul-op{op}", outputs=[x])
        at(step)


def written(root: Path) -> List[int]:
    files = dump_files(root)
    for f in files:  # every file holds what the producer passed at that step
        want = np.full(32, int(f.iteration) * 10 + int(f.op_name.rsplit("-op", 1)[1]),
                       dtype=np.float32)
        got = f.load()
        assert np.array_equal(got[1:], want[1:]), f.path.name
    return sorted({int(f.iteration) for f in files})


def test_a_new_selection_applies_from_the_next_step(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, iteration="0")
    client = dumpd.Client(str(config), socket=daemon.socket)
    said: List[str] = []

    def at(step: int) -> None:
        if step == 3:
            said.append(control(daemon.socket, "--iteration", "6-8|11"))
            s = status(daemon.socket)
            assert s["selection"] == "6-8|11" and s["selection_changed"] is True

    run(client, 13, at)
    stats = client.stats()
    client.close()
    assert "from the client's next step" in said[0]
    assert written(tmp_path / "dump") == [0, 6, 7, 8, 11]
    # The client's own filter changed too: steps 1-5, 9, 10 and 12 were not even copied.
    assert stats["tensors_committed"] == 5 * 2, stats
    lines = [json.loads(x) for x in
             (tmp_path / "dump/rank_0/.dump_metadata/control.jsonl").read_text().splitlines()]
    assert len(lines) == 2, lines
    assert lines[0]["uid"] == os.getuid()
    assert lines[0]["old"]["iteration"] == "0" and lines[0]["new"]["iteration"] == "6-8|11"
    # Asked during step 3; the client applied it at its next step mark.
    assert (lines[1]["generation"], lines[1]["in_force_from_iteration"], lines[1]["how"]) == \
        (lines[0]["generation"], 4, "the client applied it"), lines
    assert "changed the selection" in daemon.log_text()


def test_pause_and_resume(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, iteration="all")
    client = dumpd.Client(str(config), socket=daemon.socket)

    def at(step: int) -> None:
        if step == 2:
            control(daemon.socket, "--pause")
            assert status(daemon.socket)["paused"] is True
        if step == 5:
            control(daemon.socket, "--resume")

    run(client, 9, at)
    client.close()
    assert written(tmp_path / "dump") == [0, 1, 2, 6, 7, 8]


def test_a_malformed_range_is_refused_and_nothing_changes(daemon: Daemon,
                                                          tmp_path: Path) -> None:
    config = make_config(tmp_path, iteration="1|4")
    client = dumpd.Client(str(config), socket=daemon.socket)
    outcome: List[subprocess.CompletedProcess] = []

    def at(step: int) -> None:
        if step == 2:
            outcome.append(dumpctl(daemon.socket, "control", "--pid", str(os.getpid()),
                                   "--iteration", "5-3"))

    run(client, 6, at)
    client.close()
    bad = outcome[0]
    assert bad.returncode == 1
    # The error `dumpctl validate` gives for the same value.
    assert 'iteration segment "5-3" is malformed (LOW is greater than HIGH)' in bad.stderr
    assert written(tmp_path / "dump") == [1, 4]
    assert not (tmp_path / "dump/rank_0/.dump_metadata/control.jsonl").exists()


def test_recorder_off_and_on(daemon: Daemon, tmp_path: Path) -> None:
    path = make_config(tmp_path, iteration="1000", saved_data="tensor")
    cfg = json.loads(path.read_text())
    cfg["flight_recorder"] = {"steps": 2, "after_steps": 0, "max_triggers": 0}
    path.write_text(json.dumps(cfg))
    client = dumpd.Client(str(path), socket=daemon.socket)

    def at(step: int) -> None:
        if step == 2:
            control(daemon.socket, "--recorder", "off")
        if step == 4:
            # Off: nothing kept, so an infinity at step 4 triggers nothing.
            client.flush()  # the daemon has handled step 3's mark, where it switched
            assert status(daemon.socket)["recorder"]["kept_iterations"] == 0
            control(daemon.socket, "--recorder", "on")

    x = np.empty(32, dtype=np.float32)
    for step in range(9):
        client.set_step(step)
        for op in range(2):
            x.fill(step * 10 + op)
            if step in (4, 7) and op == 1:
                x[3] = np.inf
            client.dump_op("Mul", f"Default/Mul-op{op}", outputs=[x])
        at(step)
    client.close()
    root = tmp_path / "dump"
    lines = (root / "rank_0/.dump_metadata/triggers.jsonl").read_text().splitlines()
    assert [json.loads(x)["iteration"] for x in lines] == [7]
    assert sorted({int(f.iteration) for f in dump_files(root)}) == [6, 7]


def test_usage_errors() -> None:
    binary = os.environ["DUMPCTL_BIN"]
    out = subprocess.run([binary, "control", "7"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "nothing to change" in out.stderr
    out = subprocess.run([binary, "control", "7", "--recorder", "maybe"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2 and "--recorder needs on or off" in out.stderr


@pytest.mark.conditional
@pytest.mark.skipif(os.geteuid() != 0, reason="runs dumpctl as another uid (needs root)")
def test_only_the_owner_or_root_may_control(tmp_path: Path) -> None:
    d = start_daemon({"socket_mode": "0666"})
    try:
        d.workdir.chmod(0o755)  # let uid 4321 reach the socket
        config = make_config(tmp_path, iteration="all")
        client = dumpd.Client(str(config), socket=d.socket)
        refused: List[subprocess.CompletedProcess] = []

        def at(step: int) -> None:
            if step == 1:
                refused.append(dumpctl(d.socket, "control", "--rank", "0", "--job", "Net",
                                       "--pause", uid=4321))

        run(client, 4, at)
        client.close()
        assert refused[0].returncode == 1
        assert "only the session's own uid or root may control it" in refused[0].stderr
        assert "refused a command from uid 4321" in d.log_text()
        assert written(tmp_path / "dump") == [0, 1, 2, 3]
    finally:
        stop_daemon(d)


@pytest.mark.conditional
@pytest.mark.skipif(os.geteuid() != 0, reason="runs dumpctl as another uid (needs root)")
def test_refusals_of_another_uid_cannot_flood_the_log(tmp_path: Path) -> None:
    """Any local user may send commands as fast as they like: each is refused, but the
    daemon logs a few per window, not one line each, and the owner's job is untouched."""
    d = start_daemon({"socket_mode": "0666"})
    try:
        d.workdir.chmod(0o755)
        config = make_config(tmp_path, iteration="all")
        client = dumpd.Client(str(config), socket=d.socket)
        refused: List[subprocess.CompletedProcess] = []

        def at(step: int) -> None:
            if step == 1:
                for _ in range(15):
                    refused.append(dumpctl(d.socket, "trigger", "--rank", "0", "--job", "Net",
                                           uid=4321))

        run(client, 3, at)
        client.close()
        assert len(refused) == 15
        assert all(r.returncode == 1 and "is not yours" in r.stderr for r in refused)
        logged = d.log_text().count("refused a command from uid 4321")
        assert 1 <= logged <= 5, d.log_text()
        assert written(tmp_path / "dump") == [0, 1, 2]
    finally:
        stop_daemon(d)
