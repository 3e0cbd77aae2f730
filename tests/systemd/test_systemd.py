"""dumpd under systemd's own tools: unit verification, socket activation, sd_notify."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
from conftest import Daemon, can_connect, npy_files, run_producer, wait_for, write_config  # noqa: E402

DUMPD = os.environ["DUMPD_BIN"]
UNITS = Path(os.environ["DUMPD_UNIT_DIR"])


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory(prefix="dumpd-sd-", dir="/tmp") as d:
        yield Path(d)


def test_units_pass_systemd_analyze_verify():
    out = subprocess.run(["systemd-analyze", "verify", str(UNITS / "dumpd.service"),
                          str(UNITS / "dumpd.socket")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "", out.stderr


def test_service_is_notify_type_with_watchdog_and_hardening():
    unit = (UNITS / "dumpd.service").read_text()
    for line in ["Type=notify", "WatchdogSec=", "Restart=on-failure", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "PrivateTmp=yes", "ProtectHome=read-only",
                 "RestrictAddressFamilies=AF_UNIX", "Requires=dumpd.socket"]:
        assert line in unit, line
    assert "ListenStream=/run/dumpd/dumpd.sock" in (UNITS / "dumpd.socket").read_text()


def test_socket_activation_serves_clients_on_the_inherited_socket(workdir):
    sock = str(workdir / "act.sock")
    log = open(workdir / "log", "wb")
    proc = subprocess.Popen(["systemd-socket-activate", "-l", sock, DUMPD, "--log-level", "debug"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: os.path.exists(sock), what="the activation socket")

        class Activated:  # what run_producer needs of a daemon
            socket = sock

            @staticmethod
            def logtext():
                return (workdir / "log").read_text()

        cfg = write_config(workdir)
        run_producer(Activated, cfg, "--iterations", 2, "--layers", 1, "--elements", 8)
        assert len(npy_files(workdir / "dump")) == 30
        assert "listening on the socket passed by systemd" in Activated.logtext()
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        log.close()
    assert rc == 0, (workdir / "log").read_text()


def test_sd_notify_ready_status_watchdog_and_stopping(workdir):
    notify_path = str(workdir / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(notify_path)
    listener.settimeout(20)
    env = dict(os.environ, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC="400000")
    sock = str(workdir / "d.sock")
    proc = subprocess.Popen([DUMPD, "--socket", sock], env=env, stderr=subprocess.DEVNULL)
    messages = []

    def receive_until(key):
        while True:
            msg = listener.recv(4096).decode()
            messages.append(msg)
            if key in msg.split("\n"):
                return msg

    try:
        ready = receive_until("READY=1")
        assert any(l.startswith("STATUS=serving on " + sock) for l in ready.split("\n"))
        assert can_connect(sock), "READY=1 only once the socket accepts"
        receive_until("WATCHDOG=1")
        assert any(l.startswith("STATUS=") and "session(s)" in l
                   for m in messages for l in m.split("\n"))
        proc.send_signal(signal.SIGTERM)
        receive_until("STOPPING=1")
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        listener.close()
    assert rc == 0


def test_stale_socket_is_replaced_but_a_live_daemon_is_not(workdir):
    d = Daemon(workdir)
    second = subprocess.run([DUMPD, "--socket", d.socket], capture_output=True, text=True,
                            timeout=30)
    assert second.returncode == 1
    assert "another dumpd is already serving" in second.stderr
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    assert os.path.exists(d.socket), "a crash leaves the socket file behind"
    again = Daemon(workdir)
    try:
        assert "replacing stale socket file" in again.logtext()
        cfg = write_config(workdir)
        run_producer(again, cfg, "--iterations", 1, "--layers", 1, "--elements", 4)
    finally:
        assert again.stop() == 0


def test_socket_mode_comes_from_the_settings(workdir):
    d = Daemon(workdir, settings={"socket_mode": "0600"})
    try:
        assert oct(os.stat(d.socket).st_mode & 0o777) == "0o600"
    finally:
        assert d.stop() == 0


def test_bad_settings_file_is_a_clear_error(workdir):
    cfg = workdir / "bad.json"
    cfg.write_text(json.dumps({"writer_threadz": 2}))
    out = subprocess.run([DUMPD, "--config", str(cfg), "--socket", str(workdir / "s")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "writer_threadz" in out.stderr


def test_sighup_rereads_settings(workdir):
    d = Daemon(workdir, settings={"backpressure": "block"})
    try:
        (workdir / "dumpd.json").write_text(json.dumps({"backpressure": "drop"}))
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "settings re-read" in d.logtext(), what="SIGHUP to be handled")
        assert "settings: backpressure block -> drop" in d.logtext()
        (workdir / "dumpd.json").write_text("{ broken")
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "keeping the current settings" in d.logtext(), what="a bad reload")
        assert d.alive()
    finally:
        assert d.stop() == 0


def test_socket_group_is_applied_and_unknown_group_is_an_error(workdir):
    import grp
    group = grp.getgrgid(os.getgid()).gr_name
    d = Daemon(workdir, settings={"socket_group": group})
    try:
        assert os.stat(d.socket).st_gid == os.getgid()
    finally:
        assert d.stop() == 0
    cfg = workdir / "g.json"
    cfg.write_text(json.dumps({"socket_group": "no-such-group-dumpd"}))
    out = subprocess.run([DUMPD, "--config", str(cfg), "--socket", str(workdir / "g.sock")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "socket_group 'no-such-group-dumpd' does not exist" in out.stderr


def thread_policies(pid):
    """{tid: scheduling policy} of a process (field 41 of /proc/<pid>/task/<tid>/stat)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(task.name)] = int(fields[38])
    return out


@pytest.mark.parametrize("priority", ["idle", "normal"])
def test_worker_threads_run_at_the_configured_priority(workdir, priority):
    SCHED_OTHER, SCHED_IDLE = 0, 5
    d = Daemon(workdir, settings={"worker_priority": priority, "writer_threads": 2})
    p = None
    try:
        cfg = write_config(workdir)
        p = subprocess.Popen([os.environ["DUMPD_PRODUCER"], "--socket", d.socket, "--config",
                              str(cfg), "--iterations", "1", "--layers", "1", "--pause-at-end"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().startswith("committed")
        policies = wait_for(lambda: (lambda t: t if list(t.values()).count(SCHED_IDLE) >= 3 or
                                     priority == "normal" else None)(thread_policies(d.proc.pid)),
                            what="worker threads to lower their priority")
        assert policies[d.proc.pid] == SCHED_OTHER, "the io thread stays responsive"
        idle = list(policies.values()).count(SCHED_IDLE)
        assert idle == (3 if priority == "idle" else 0)  # 2 writers + 1 session consumer
    finally:
        if p is not None:
            p.stdin.close()
            assert p.wait(timeout=60) == 0
        assert d.stop() == 0


@pytest.mark.conditional  # needs a private read-only mount
def test_daemon_writes_through_the_clients_fd_where_its_namespace_is_read_only(workdir):
    """What ProtectSystem=strict relies on: dumpd sees the dump root read-only in its own
    mount namespace, yet writes beneath the directory fd the client passed, which carries
    the client's writable mount."""
    dumps = workdir / "dumps"
    dumps.mkdir()
    sock = str(workdir / "ro.sock")
    script = (f"mount --bind {dumps} {dumps} && mount -o remount,bind,ro {dumps} && "
              f"if touch {dumps}/probe 2>/dev/null; then exit 97; fi; "
              f"exec {DUMPD} --socket {sock} --log-level info")
    log = open(workdir / "ro.log", "wb")
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: proc.poll() is not None or can_connect(sock), what="dumpd in a namespace")
        if proc.poll() is not None:
            pytest.skip(f"cannot make a private read-only mount here (exit {proc.returncode})")

        class InNamespace:
            socket = sock

            @staticmethod
            def logtext():
                return (workdir / "ro.log").read_text()

        cfg = write_config(workdir, path=str(dumps / "dump"))
        run_producer(InNamespace, cfg, "--iterations", 1, "--layers", 1, "--elements", 4)
        assert len(npy_files(dumps / "dump")) == 15
        assert not (dumps / "probe").exists()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        log.close()
    assert rc == 0, (workdir / "ro.log").read_text()
