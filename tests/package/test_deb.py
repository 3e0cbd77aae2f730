"""The Debian package on this machine (scripts/test-package; root only): dpkg -i with its
Depends, the file list, the installed units verified and run under systemd-socket-activate
with the unit's own command line, Python and C++ clients outside the tree, pip into a venv,
an upgrade under a live session, then removal (nothing left, dump trees untouched) and purge
(the configuration gone)."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

import package_checks as pc

DEB = os.environ.get("DUMPD_DEB", "")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="installs a .deb: needs root"),
    pytest.mark.skipif(not DEB, reason="DUMPD_DEB (the .deb to test) is not set"),
]


def listed() -> list[str]:
    return pc.run(["dpkg", "-L", "dumpd"]).stdout.split()


def exec_start() -> list[str]:
    unit = Path("/lib/systemd/system/dumpd.service").read_text()
    [line] = [l for l in unit.splitlines() if l.startswith("ExecStart=")]
    return shlex.split(line.split("=", 1)[1])


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    assert subprocess.run(["dpkg", "-s", "dumpd"], capture_output=True).returncode != 0, \
        "a dumpd package is installed already (DUMPD_PACKAGE_REPLACE=1 scripts/test-package " \
        "removes it first)"
    out = subprocess.run(["dpkg", "-i", DEB], capture_output=True, text=True)
    if out.returncode != 0:  # missing Depends: apt installs them and configures dumpd
        pc.run(["apt-get", "-f", "install", "-y", "-q"])
    yield Path(DEB)
    subprocess.run(["dpkg", "-P", "dumpd"], capture_output=True)


@pytest.fixture(scope="module")
def activated(deb, tmp_path_factory):
    """The installed dumpd under systemd-socket-activate, started with the unit's ExecStart."""
    work = tmp_path_factory.mktemp("deb")
    sock = str(work / "d.sock")
    cmd = ["systemd-socket-activate", "-l", sock, *exec_start()]
    daemon = pc.start_daemon(cmd, work, sock)
    yield work, sock
    daemon.terminate()
    daemon.wait(timeout=60)


def test_installed_files_and_metadata(deb):
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


def test_installed_units_verify(deb):
    out = subprocess.run(["systemd-analyze", "verify", "/lib/systemd/system/dumpd.socket",
                          "/lib/systemd/system/dumpd.service"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert exec_start()[0] == "/usr/bin/dumpd"


def test_python_and_cpp_clients_outside_the_tree(activated, tmp_path):
    work, sock = activated
    where = pc.python_dump("/usr/bin/python3", tmp_path, sock, "system")
    assert where.startswith("/usr/lib/python3/dist-packages/dumpd"), where
    assert "dumpd client library" in pc.cmake_consumer(tmp_path, sock, "cmake", None, False)
    assert "dumpd client library" in pc.cmake_consumer(tmp_path, sock, "static", None, True)
    assert "dumpd client library" in pc.pkgconfig_consumer(tmp_path, sock, "pc", dict(os.environ))
    pc.check_client_library(Path([f for f in listed() if f.endswith("libdumpd_client.so.0")][0]))


def test_pip_into_a_venv_against_the_installed_library(activated, tmp_path):
    _, sock = activated
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    py = pc.pip_venv(tmp_path, env)
    where = pc.python_dump(py, tmp_path, sock, "venv", env)
    assert where.startswith(str(tmp_path / "venv")), where


def test_upgrade_leaves_a_running_session_alone(activated, tmp_path):
    """Installing the package again (what an upgrade runs: prerm upgrade, unpack, postinst
    configure) while a job dumps: the running daemon goes on, the session finishes whole."""
    _, sock = activated
    script = pc.PY_CLIENT.replace('counts = c.flush()',
                                  'import time; time.sleep(3); counts = c.flush()')
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    job = subprocess.Popen(["/usr/bin/python3", "-c", script,
                            str(pc.job_config(tmp_path, "upgrade")), sock, pc.VERSION],
                           cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    pc.run(["dpkg", "-i", DEB])
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    pc.np.testing.assert_array_equal(pc.dumped(tmp_path, "upgrade", "Default_Py-op0"),
                                     pc.EXPECTED)


def test_remove_then_purge(deb, activated, tmp_path):
    work, _ = activated
    files = [f for f in listed() if Path(f).is_file() or Path(f).is_symlink()]
    trees = sorted(p for p in work.rglob("*") if p.is_file())
    assert trees, "the earlier tests left dump trees"
    pc.run(["dpkg", "-r", "dumpd"])
    left = [f for f in files if os.path.lexists(f) and f != "/etc/dumpd/dumpd.json"]
    assert left == [], left
    assert Path("/etc/dumpd/dumpd.json").exists()  # a configuration file stays until purge
    assert sorted(p for p in work.rglob("*") if p.is_file()) == trees  # dumps untouched
    pc.run(["dpkg", "-P", "dumpd"])
    assert not Path("/etc/dumpd").exists()
