"""`pip install client/python` into interpreters other than Debian's (issue 40): the torch 2 /
numpy 2 environment of tests/reference/pins.txt, and a venv of the first `python3` on PATH
(here pyenv's 3.11: the "pip install into your own interpreter" case). Each builds the module
from source against the build tree's client library (PKG_CONFIG_PATH), then dumps an array
through the real daemon; the file is read back with numpy. Run by scripts/test-torch2 (label
torch2): the second case downloads setuptools, wheel and numpy from PyPI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import package_checks as pc

BUILD = Path(os.environ["DUMPD_BUILD_DIR"])
TORCH2 = os.environ["DUMPD_TORCH2_PYTHON"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    work = tmp_path_factory.mktemp("daemon")
    sock = str(work / "d.sock")
    proc = pc.start_daemon([BUILD / "bin" / "dumpd", "--socket", sock], work, sock)
    yield sock
    pc.stop_daemon(proc)


def build_env() -> dict:
    env = dict(os.environ, PKG_CONFIG_PATH=str(BUILD / "pkgconfig"))
    env.pop("PYTHONPATH", None)
    return env


def test_pip_installs_into_the_torch2_environment(daemon, tmp_path):
    """Into a target directory with the torch 2 environment's pip, setuptools and numpy 2
    (the cached environment itself stays as it is); dumpd then imports beside torch 2. As
    README says it, without PKG_CONFIG_PATH: setup.py finds the build tree by itself
    (<source tree>/build, or DUMPD_BUILD_DIR for another one)."""
    env = build_env()
    del env["PKG_CONFIG_PATH"]
    if BUILD.resolve() == (pc.REPO / "build").resolve():
        env.pop("DUMPD_BUILD_DIR", None)  # the README's line exactly
    else:
        env["DUMPD_BUILD_DIR"] = str(BUILD)
    if subprocess.run(["pkg-config", "--exists", "dumpd"], env=env).returncode == 0:
        pytest.skip("a dumpd package is installed: pkg-config finds it before the build tree")
    target = tmp_path / "site"
    pc.run([TORCH2, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
            "--no-cache-dir", "-q", "--target", target, pc.REPO / "client" / "python"],
           env=env, cwd=tmp_path)
    env["PYTHONPATH"] = str(target)
    where = pc.python_dump(TORCH2, tmp_path, daemon, "torch2", env)
    assert where.startswith(str(target)), where
    out = pc.run([TORCH2, "-c", "import numpy, torch, dumpd.torch; "
                  "print(numpy.__version__, torch.__version__)"], env=env, cwd=tmp_path)
    assert out.stdout.split()[0].startswith("2."), out.stdout
    # Every subpackage is installed: the framework-neutral core, and dumpd.mindspore (which
    # needs MindSpore to import, so only its files are looked for here).
    assert (target / "dumpd" / "_core" / "steps.py").is_file()
    assert (target / "dumpd" / "mindspore" / "_graph.py").is_file()


FIRST_PYTHON3 = shutil.which("python3")


@pytest.mark.conditional
def test_pip_installs_into_a_venv_of_the_first_python3_on_path(daemon, tmp_path):
    """A plain venv (no system packages) of the `python3` first on PATH: pip fetches its
    build requirements and numpy, builds, installs; dumpd imports from the venv."""
    if FIRST_PYTHON3 is None or os.path.realpath(FIRST_PYTHON3).startswith("/usr/bin/"):
        pytest.skip(f"the first python3 on PATH is {FIRST_PYTHON3}: Debian's, which "
                    "test_install.py covers")
    env = build_env()
    venv = tmp_path / "venv"
    pc.run([FIRST_PYTHON3, "-m", "venv", venv], env=env)
    py = str(venv / "bin" / "python")
    pc.run([py, "-m", "pip", "install", "--no-cache-dir", "-q", "numpy",
            pc.REPO / "client" / "python"], env=env, cwd=tmp_path)
    where = pc.python_dump(py, tmp_path, daemon, "path", env)
    assert where.startswith(str(venv)), where
