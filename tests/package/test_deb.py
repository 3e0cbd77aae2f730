"""The Debian package on this machine (scripts/test-package; root only): dpkg -i with its
Depends, the file list, the installed units verified and run under systemd-socket-activate
with the unit's own command line, Python and C++ clients outside the tree, pip into a venv,
an upgrade under a live session, then removal (nothing left, dump trees untouched) and purge
(the configuration gone)."""

from __future__ import annotations

import os
import json
import shlex
import subprocess
from pathlib import Path

import pytest

import package_checks as pc

DEB = os.environ.get("DUMPD_DEB", "")

pytestmark = [pytest.mark.conditional,  # needs root and a .deb (scripts/test-package)
              pytest.mark.skipif(os.geteuid() != 0, reason="installs a .deb: needs root"),
              pytest.mark.skipif(not DEB, reason="DUMPD_DEB (the .deb to test) is not set")]

# A job that dumps step 0, says "live" once step 0 is on disk, waits for "go" on stdin while its
# session stays open, then dumps step 1 and closes.
LIVE_CLIENT = """
import sys, numpy as np, dumpd
with dumpd.Client(sys.argv[1], socket=sys.argv[2]) as c:
    x = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5
    c.set_step(0)
    c.dump_op("Py", "Default/Py-op0", outputs=[x])
    print("live", c.flush()["tensors_written"], flush=True)
    assert sys.stdin.readline().strip() == "go"
    c.set_step(1)
    c.dump_op("Py", "Default/Py-op0", outputs=[x + 1])
    print("done", c.flush()["tensors_written"], flush=True)
"""


def installed() -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "dumpd"], capture_output=True,
                         text=True)
    return out.returncode == 0 and out.stdout.endswith(" installed")


def install() -> None:
    out = subprocess.run(["dpkg", "-i", DEB], capture_output=True, text=True)
    if out.returncode != 0:  # missing Depends: apt installs them and configures dumpd
        pc.run(["apt-get", "-f", "install", "-y", "-q"])
    assert installed()


@pytest.fixture
def package(deb):
    """The package installed, whatever ran before (test_remove_then_purge removes it)."""
    if not installed():
        install()
    return deb


def listed() -> list[str]:
    return pc.run(["dpkg", "-L", "dumpd"]).stdout.split()


def exec_start() -> list[str]:
    unit = Path("/lib/systemd/system/dumpd.service").read_text()
    [line] = [l for l in unit.splitlines() if l.startswith("ExecStart=")]
    return shlex.split(line.split("=", 1)[1])


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    assert not installed(), "a dumpd package is installed already (DUMPD_PACKAGE_REPLACE=1 " \
        "scripts/test-package removes it first)"
    install()
    yield Path(DEB)
    subprocess.run(["dpkg", "-P", "dumpd"], capture_output=True)


@pytest.fixture(scope="module")
def activated(deb, tmp_path_factory):
    """The installed dumpd under systemd-socket-activate, started with the unit's ExecStart."""
    work = tmp_path_factory.mktemp("deb")
    sock = str(work / "d.sock")
    cmd = ["systemd-socket-activate", "-l", sock, *exec_start()]
    daemon = pc.start_daemon(cmd, work, sock)
    yield work, sock, daemon
    daemon.terminate()
    daemon.wait(timeout=60)


def test_installed_files_and_metadata(package):
    files = set(listed())
    for path in ["/usr/bin/dumpd", "/usr/bin/dumpctl", "/lib/systemd/system/dumpd.service",
                 "/lib/systemd/system/dumpd.socket", "/usr/lib/tmpfiles.d/dumpd.conf",
                 "/usr/lib/sysusers.d/dumpd.conf", "/etc/dumpd/dumpd.json",
                 "/usr/include/dumpd/dumpd.h", "/usr/lib/python3/dist-packages/dumpd/__init__.py",
                 "/usr/share/doc/dumpd/operations.md"]:
        assert path in files or path.replace("/lib/systemd", "/usr/lib/systemd") in files, path
    assert any(f.endswith("/libdumpd_client.so.0") for f in files)
    assert any(f.endswith("/pkgconfig/dumpd.pc") for f in files)
    assert any(f.endswith("/cmake/dumpd/dumpdConfig.cmake") for f in files)
    status = pc.run(["dpkg", "-s", "dumpd"]).stdout
    assert f"Version: {pc.VERSION}" in status
    depends = [l for l in status.splitlines() if l.startswith("Depends:")][0]
    for dep in ("libc6", "libstdc++6", "python3 (>= ", "init-system-helpers"):
        assert dep in depends, depends
    conffiles = pc.run(["dpkg-query", "-W", "-f=${Conffiles}", "dumpd"]).stdout
    assert "/etc/dumpd/dumpd.json" in conffiles
    assert pc.run(["getent", "group", "dumpd"]).stdout.startswith("dumpd:")
    out = pc.run(["dumpd", "--version"]).stdout
    assert out.startswith(f"dumpd {pc.VERSION} (wire protocol 2.0"), out
    # The description says what --version says about the CUDA device path.
    cuda = "client CUDA device path: yes" in out
    assert ("Built with CUDA" in status) == cuda, status
    assert pc.run(["dumpctl", "--version"]).stdout.startswith(f"dumpctl {pc.VERSION}")


def test_installed_units_verify(package):
    out = subprocess.run(["systemd-analyze", "verify", "/lib/systemd/system/dumpd.socket",
                          "/lib/systemd/system/dumpd.service"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert exec_start()[0] == "/usr/bin/dumpd"


def test_python_and_cpp_clients_outside_the_tree(package, activated, tmp_path):
    _, sock, _ = activated
    where = pc.python_dump("/usr/bin/python3", tmp_path, sock, "system")
    assert where.startswith("/usr/lib/python3/dist-packages/dumpd"), where
    assert "dumpd client library" in pc.cmake_consumer(tmp_path, sock, "cmake", None, False)
    assert "dumpd client library" in pc.cmake_consumer(tmp_path, sock, "static", None, True)
    assert "dumpd client library" in pc.pkgconfig_consumer(tmp_path, sock, "pc", dict(os.environ))
    pc.check_client_library(Path([f for f in listed() if f.endswith("libdumpd_client.so.0")][0]))


def test_pip_into_a_venv_against_the_installed_library(package, activated, tmp_path):
    _, sock, _ = activated
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    py = pc.pip_venv(tmp_path, env)
    where = pc.python_dump(py, tmp_path, sock, "venv", env)
    assert where.startswith(str(tmp_path / "venv")), where


def status(sock: str) -> dict:
    return json.loads(pc.run(["dumpctl", "--socket", sock, "status", "--json"]).stdout)


def test_upgrade_leaves_a_running_session_alone(package, activated, tmp_path):
    """Installing the package again (what an upgrade runs: prerm upgrade, unpack, postinst
    configure) while a job's session is open: the same daemon process goes on, the session is
    listed live before and after `dpkg -i`, and it then completes whole (both steps on disk)."""
    _, sock, daemon = activated
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    job = subprocess.Popen(["/usr/bin/python3", "-c", LIVE_CLIENT,
                            str(pc.job_config(tmp_path, "upgrade")), sock],
                           cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().split() == ["live", "1"], job.stderr.read()
        [before] = [s for s in status(sock)["sessions"] if s["pid"] == job.pid]
        pc.run(["dpkg", "-i", DEB])
        assert daemon.poll() is None, "the upgrade stopped the running daemon"
        after = status(sock)
        assert after["pid"] == daemon.pid
        [still] = [s for s in after["sessions"] if s["pid"] == job.pid]
        assert still["id"] == before["id"] and still["state"] == before["state"]
        job.stdin.write("go\n")
        job.stdin.flush()
        out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, err
    assert out.split() == ["done", "2"], out
    root = tmp_path / "dump-upgrade" / "rank_0" / "Net" / "0"
    for step, expected in ((0, pc.EXPECTED), (1, pc.EXPECTED + 1)):
        [f] = list((root / str(step)).glob("*.Default_Py-op0.*output.0.*npy"))
        pc.np.testing.assert_array_equal(pc.np.load(f), expected)


def test_remove_then_purge(package, activated, tmp_path):
    """Removal leaves no package file but the configuration and never touches dump trees;
    purge removes the configuration."""
    work, sock, _ = activated
    pc.python_dump("/usr/bin/python3", work, sock, "before-remove")
    files = [f for f in listed() if Path(f).is_file() or Path(f).is_symlink()]
    trees = sorted(p for p in work.rglob("*") if p.is_file())
    pc.run(["dpkg", "-r", "dumpd"])
    left = [f for f in files if os.path.lexists(f) and f != "/etc/dumpd/dumpd.json"]
    assert left == [], left
    assert Path("/etc/dumpd/dumpd.json").exists()  # a configuration file stays until purge
    assert sorted(p for p in work.rglob("*") if p.is_file()) == trees  # dumps untouched
    pc.run(["dpkg", "-P", "dumpd"])
    assert not Path("/etc/dumpd").exists()
