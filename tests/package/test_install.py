"""`cmake --install` into a temporary prefix, and dumpd used from there as a node would:
the installed daemon, `import dumpd` from outside the source tree, C++ projects that find
the library with find_package(dumpd) (shared and static) and with pkg-config, and pip
installing the Python package into a venv. Files read back with numpy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import package_checks as pc

BUILD = Path(os.environ["DUMPD_BUILD_DIR"])


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("install")
    prefix = work / "prefix"
    pc.run(["cmake", "--install", BUILD, "--prefix", prefix])
    sock = str(work / "d.sock")
    daemon = pc.start_daemon([prefix / "bin" / "dumpd", "--socket", sock], work, sock)
    yield prefix, sock
    pc.stop_daemon(daemon)


def libdir(prefix: Path) -> Path:
    [lib] = [p.parent for p in prefix.glob("lib*/**/libdumpd_client.so.0")]
    return lib


def test_version_is_the_project_version(installed):
    prefix, _ = installed
    assert pc.VERSION == pc.project_version()
    out = pc.run([prefix / "bin" / "dumpd", "--version"]).stdout
    assert out.startswith(f"dumpd {pc.VERSION} (wire protocol 2.0, ring format "), out
    assert "client CUDA device path: " in out
    out = pc.run([prefix / "bin" / "dumpctl", "--version"]).stdout
    assert out == f"dumpctl {pc.VERSION} (wire protocol 2.0)\n"


def test_the_prefix_holds_every_part(installed):
    prefix, _ = installed
    lib = libdir(prefix).relative_to(prefix)
    for rel in ["bin/dumpd", "bin/dumpctl",
                "lib/systemd/system/dumpd.service", "lib/systemd/system/dumpd.socket",
                "lib/tmpfiles.d/dumpd.conf", "lib/sysusers.d/dumpd.conf", "etc/dumpd/dumpd.json",
                "include/dumpd/dumpd.h", "include/dumpd/client/client.h",
                "include/dumpd/base/result.h", f"{lib}/libdumpd_client.so.0",
                f"{lib}/libdumpd_client.so", f"{lib}/libdumpd_client.a",
                f"{lib}/pkgconfig/dumpd.pc", f"{lib}/cmake/dumpd/dumpdConfig.cmake",
                f"{lib}/cmake/dumpd/dumpdConfigVersion.cmake",
                "lib/python3/dist-packages/dumpd/__init__.py",
                "lib/python3/dist-packages/dumpd/torch/__init__.py",
                "lib/python3/dist-packages/dumpd/_core/steps.py",
                "lib/python3/dist-packages/dumpd/mindspore/_graph.py",
                "share/doc/dumpd/operations.md", "share/doc/dumpd/examples"]:
        assert (prefix / rel).exists(), rel
    assert list((prefix / "lib/python3/dist-packages/dumpd").glob("_dumpd*.so"))
    # No header of the install reaches outside include/dumpd.
    for h in (prefix / "include" / "dumpd").rglob("*.h"):
        for line in h.read_text().splitlines():
            if line.startswith("#include \""):
                assert line.startswith("#include \"dumpd/"), (h, line)
    socket_unit = (prefix / "lib/systemd/system/dumpd.socket").read_text()
    assert "SocketGroup=dumpd" in socket_unit
    assert '"socket_group": "dumpd"' in (prefix / "etc/dumpd/dumpd.json").read_text()
    assert (prefix / "lib/sysusers.d/dumpd.conf").read_text().splitlines()[-1] == "g dumpd - -"


def test_the_shared_library_exports_only_the_client_api(installed):
    prefix, _ = installed
    pc.check_client_library(libdir(prefix) / "libdumpd_client.so.0")


def test_python_package_imports_from_the_prefix(installed, tmp_path):
    prefix, sock = installed
    site = prefix / "lib/python3/dist-packages"
    env = dict(os.environ, PYTHONPATH=str(site))
    where = pc.python_dump("/usr/bin/python3", tmp_path, sock, "prefix", env)
    assert where.startswith(str(site)), where


@pytest.mark.parametrize("static", [False, True], ids=["shared", "static"])
def test_cmake_project_finds_the_library(installed, tmp_path, static):
    prefix, sock = installed
    out = pc.cmake_consumer(tmp_path, sock, "static" if static else "shared", prefix, static)
    assert f"dumpd client library {pc.VERSION}" in out


def test_pkg_config_project_links_the_library(installed, tmp_path):
    prefix, sock = installed
    lib = libdir(prefix)
    env = dict(os.environ, PKG_CONFIG_PATH=str(lib / "pkgconfig"), LD_LIBRARY_PATH=str(lib))
    assert pc.run(["pkg-config", "--modversion", "dumpd"], env=env).stdout.strip() == pc.VERSION
    out = pc.pkgconfig_consumer(tmp_path, sock, "pkgconfig", env)
    assert f"dumpd client library {pc.VERSION}" in out


def test_pip_installs_the_python_package_into_a_venv(installed, tmp_path):
    prefix, sock = installed
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir(prefix) / "pkgconfig"))
    env.pop("PYTHONPATH", None)
    source = pc.REPO / "client" / "python"
    before = pc.tree_snapshot(source)
    py = pc.pip_venv(tmp_path, env)
    where = pc.python_dump(py, tmp_path, sock, "venv", env)
    assert where.startswith(str(tmp_path / "venv")), where
    # The source tree stays as it was: pip built in a temporary directory. (A listing, not
    # `git status`: the tests also run from a source tarball, outside any git checkout.)
    after = pc.tree_snapshot(source)
    assert after == before, pc.snapshot_changes(before, after)
