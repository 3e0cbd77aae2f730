"""Builds the dumpd._dumpd extension with setuptools for the interpreter that runs pip.

The extension is compiled from this directory's sources (with the source tree's headers)
and linked with the static client library, libdumpd_client.a, that pkg-config finds as
"dumpd": the installed package, or a build tree's dumpd-uninstalled.pc when
PKG_CONFIG_PATH=<build>/pkgconfig, else the build tree $DUMPD_BUILD_DIR or <source tree>/build. Like the CMake build, the module exports PyInit__dumpd
alone and hides every library it links (exports.map, --exclude-libs).
"""

import atexit
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the source tree: client/python/ -> repo


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(dumpd VERSION ([0-9.]+)", text)
    if not m:
        sys.exit("setup.py: no 'project(dumpd VERSION ...)' in " + str(ROOT / "CMakeLists.txt"))
    return m.group(1)


def build_tree_pkgconfig():
    """The pkgconfig directory of a dumpd build tree: $DUMPD_BUILD_DIR's, else the source
    tree's build/ (where scripts/test and scripts/demo build), when it holds the client."""
    build = os.environ.get("DUMPD_BUILD_DIR") or str(ROOT / "build")
    directory = Path(build) / "pkgconfig"
    return directory if (directory / "dumpd-uninstalled.pc").exists() else None


def pkg_config(*args):
    if shutil.which("pkg-config") is None:
        sys.exit("setup.py: pkg-config is not installed (apt-get install pkg-config)")
    env = dict(os.environ)
    out = subprocess.run(["pkg-config", *args, "dumpd"], capture_output=True, text=True)
    if out.returncode != 0 and build_tree_pkgconfig() is not None:
        # No installed dumpd: the build tree's client library, as PKG_CONFIG_PATH would give.
        tree = str(build_tree_pkgconfig())
        env["PKG_CONFIG_PATH"] = os.pathsep.join(
            p for p in (tree, os.environ.get("PKG_CONFIG_PATH", "")) if p)
        out = subprocess.run(["pkg-config", *args, "dumpd"], capture_output=True, text=True,
                             env=env)
        if out.returncode == 0 and args and args[0] == "--modversion":
            print(f"setup.py: no installed dumpd; using the build tree's ({tree})")
    if out.returncode != 0:
        sys.exit("setup.py: pkg-config cannot find the dumpd client library: install the dumpd "
                 "package (apt install ./dumpd_*.deb), or build dumpd (scripts/test builds "
                 "build/, found by itself) and set DUMPD_BUILD_DIR=<build> or "
                 "PKG_CONFIG_PATH=<build>/pkgconfig for another build directory\n" + out.stderr)
    return out.stdout.strip()


def pybind11_include():
    try:
        import pybind11  # python3-pybind11, or pybind11 from pip
        return pybind11.get_include()
    except ImportError:
        if Path("/usr/include/pybind11/pybind11.h").exists():  # Debian's pybind11-dev
            return "/usr/include"
        sys.exit("setup.py: pybind11 headers not found (apt-get install pybind11-dev)")


class BuildExt(build_ext):
    def build_extensions(self):
        # -Wno-missing-field-initializers as in the CMake build; C++20 as the library.
        for ext in self.extensions:
            ext.extra_compile_args = ["-std=c++20", "-O2", "-fvisibility=hidden",
                                      "-Wno-missing-field-initializers"]
        super().build_extensions()


def can_build_wheels():
    """bdist_wheel comes from the wheel package, or from setuptools itself since 70.1."""
    try:
        import setuptools.command.bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        return True
    except ImportError:
        try:
            import wheel  # noqa: F401
            return True
        except ImportError:
            return False


# pip --no-build-isolation uses what the environment holds: a venv of an interpreter other
# than Debian's (pyenv, python.org) has setuptools < 70.1 and no wheel, and pip's own message
# would be "invalid command 'bdist_wheel'".
if {"dist_info", "bdist_wheel"} & set(sys.argv[1:]) and not can_build_wheels():
    import setuptools
    sys.exit(f"setup.py: this environment cannot build a wheel (setuptools "
             f"{setuptools.__version__} and no wheel package): `pip install wheel` into it, or "
             "run pip without --no-build-isolation so that it fetches setuptools and wheel")

VERSION = project_version()
LIB_VERSION = pkg_config("--modversion")
if LIB_VERSION != VERSION:
    sys.exit(f"setup.py: this source tree is dumpd {VERSION} but pkg-config found the client "
             f"library {LIB_VERSION}: build against the same version")
LIBDIR = pkg_config("--variable=libdir")
ARCHIVE = Path(LIBDIR) / "libdumpd_client.a"
if not ARCHIVE.exists():
    sys.exit(f"setup.py: {ARCHIVE} is missing (the static client library)")
PRIVATE = [a for a in shlex.split(pkg_config("--static", "--libs")) if a != "-ldumpd_client"]

extension = Extension(
    "dumpd._dumpd",
    sources=sorted(str(p.relative_to(HERE)) for p in HERE.glob("*.cc")),
    include_dirs=[str(ROOT), pybind11_include()],
    extra_objects=[str(ARCHIVE)],
    extra_link_args=[*PRIVATE, "-Wl,--exclude-libs,ALL", "-Wl,--as-needed",
                     f"-Wl,--version-script={HERE / 'exports.map'}"],
    language="c++",
)

# Intermediate files in a temporary directory, not in the source tree, removed on exit (pip
# runs setup.py once per step; the wheel itself goes to pip's own directory).
BUILD_BASE = tempfile.mkdtemp(prefix="dumpd-pip-build-")
atexit.register(shutil.rmtree, BUILD_BASE, ignore_errors=True)

setup(
    version=VERSION,
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExt},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
)
