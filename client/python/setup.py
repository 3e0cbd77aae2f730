"""Builds the dumpd._dumpd extension with setuptools for the interpreter that runs pip.

The extension is compiled from this directory's sources (with the source tree's headers)
and linked with the static client library, libdumpd_client.a, that pkg-config finds as
"dumpd": the installed package, or a build tree's dumpd-uninstalled.pc when
PKG_CONFIG_PATH=<build>/pkgconfig. Like the CMake build, the module exports PyInit__dumpd
alone and hides every library it links (exports.map, --exclude-libs).
"""

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


def pkg_config(*args):
    if shutil.which("pkg-config") is None:
        sys.exit("setup.py: pkg-config is not installed (apt-get install pkg-config)")
    out = subprocess.run(["pkg-config", *args, "dumpd"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("setup.py: pkg-config cannot find the dumpd client library: install the dumpd "
                 "package (apt install ./dumpd_*.deb), or build dumpd and set "
                 "PKG_CONFIG_PATH=<build>/pkgconfig\n" + out.stderr)
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

# Intermediate files in a temporary directory, not in the source tree.
BUILD_BASE = tempfile.mkdtemp(prefix="dumpd-pip-build-")

setup(
    version=VERSION,
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExt},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
)
