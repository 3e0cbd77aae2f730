"""What tests/package checks on an installed dumpd (a `cmake --install` prefix or the .deb):
a daemon started from the installed binary, a Python client and C++ consumers built outside
the source tree, and the dumped files read back with numpy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "tests" / "integration"))
from conftest import can_connect, wait_for  # noqa: E402  (tests/integration/conftest.py)

CONSUMER = Path(__file__).resolve().parent / "consumer"
VERSION = "0.2.0"  # checked against CMakeLists.txt by test_version_is_the_project_version
EXPECTED = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5


def project_version() -> str:
    text = (REPO / "CMakeLists.txt").read_text()
    return text.split("project(dumpd VERSION ", 1)[1].split()[0]


def run(cmd: List[str], **kw) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{out.stdout}\n{out.stderr}"
    return out


def wait_for_socket(path: str, proc: subprocess.Popen, log: Path, timeout: float = 20) -> None:
    def listening() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"dumpd exited {proc.returncode}: {log.read_text()}")
        return can_connect(path)
    wait_for(listening, timeout, f"dumpd to listen on {path}")


def start_daemon(cmd: List[str], workdir: Path, sock: str) -> subprocess.Popen:
    """`cmd` ends with its own socket arguments where needed; its log goes to workdir."""
    log = workdir / "dumpd.log"
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL,
                            stderr=open(log, "wb"))
    wait_for_socket(sock, proc, log)
    return proc


def stop_daemon(proc: subprocess.Popen) -> None:
    proc.terminate()
    assert proc.wait(timeout=60) == 0


def job_config(workdir: Path, name: str) -> Path:
    root = workdir / f"dump-{name}"
    path = workdir / f"{name}.json"
    path.write_text(json.dumps({"common_dump_settings": {
        "dump_mode": 0, "path": str(root), "net_name": "Net", "iteration": "all",
        "saved_data": "tensor", "input_output": 0, "kernels": [], "support_device": [0]}}))
    return path


def dumped(workdir: Path, name: str, op_name: str) -> np.ndarray:
    files = list((workdir / f"dump-{name}").glob(f"rank_0/Net/0/0/*.{op_name}.*output.0.*npy"))
    assert len(files) == 1, list((workdir / f"dump-{name}").rglob("*"))
    return np.load(files[0])


PY_CLIENT = """
import sys, numpy as np, dumpd
assert dumpd.__version__ == sys.argv[3], dumpd.__version__
with dumpd.Client(sys.argv[1], socket=sys.argv[2]) as c:
    c.set_step(0)
    x = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5
    c.dump_op("Py", "Default/Py-op0", outputs=[x])
    x[:] = -1  # the buffer may be reused at once
    counts = c.flush()
assert counts["tensors_written"] == 1, counts
print(dumpd.__file__)
"""


def python_dump(python: str, workdir: Path, sock: str, name: str,
                env: Optional[Dict[str, str]] = None) -> str:
    """Dumps one array with `python` from a directory outside the source tree; returns where
    it imported dumpd from."""
    cwd = workdir / f"cwd-{name}"
    cwd.mkdir()
    out = run([python, "-c", PY_CLIENT, job_config(workdir, name), sock, project_version()],
              cwd=cwd, env=env)
    np.testing.assert_array_equal(dumped(workdir, name, "Default_Py-op0"), EXPECTED)
    return out.stdout.strip()


def cmake_consumer(workdir: Path, sock: str, name: str, prefix: Optional[Path],
                   static: bool) -> str:
    build = workdir / f"consumer-{name}"
    cfg = ["cmake", "-S", CONSUMER, "-B", build, f"-DDUMPD_STATIC={'ON' if static else 'OFF'}"]
    if prefix is not None:
        cfg.append(f"-DCMAKE_PREFIX_PATH={prefix}")
    run(cfg)
    run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2)])
    out = run([build / "consumer", job_config(workdir, name), sock])
    np.testing.assert_array_equal(dumped(workdir, name, "Default_Consumer-op0"), EXPECTED)
    return out.stdout


def pkgconfig_consumer(workdir: Path, sock: str, name: str, env: Dict[str, str]) -> str:
    exe = workdir / f"consumer-{name}"
    flags = run(["pkg-config", "--cflags", "--libs", "dumpd"], env=env).stdout.split()
    run(["c++", "-std=c++20", "-o", exe, CONSUMER / "consumer.cc", *flags], env=env)
    out = run([exe, job_config(workdir, name), sock], env=env)
    np.testing.assert_array_equal(dumped(workdir, name, "Default_Consumer-op0"), EXPECTED)
    return out.stdout


def pip_venv(workdir: Path, env: Dict[str, str]) -> str:
    """A venv of the system interpreter (numpy and torch from Debian) with dumpd installed by
    pip from client/python; returns its python."""
    venv = workdir / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    py = str(venv / "bin" / "python")
    run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
         "--no-cache-dir", "-q", REPO / "client" / "python"], env=env, cwd=workdir)
    return py


def tree_snapshot(root: Path) -> Dict[str, Tuple[int, int]]:
    """Every file and directory under `root`: relative path -> (size, mtime in ns)."""
    snap = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        snap[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return snap


def snapshot_changes(before: Dict[str, Tuple[int, int]],
                     after: Dict[str, Tuple[int, int]]) -> str:
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    return f"source tree changed: added {added[:20]}, removed {removed[:20]}, changed {changed[:20]}"


def exported_symbols(lib: Path) -> List[str]:
    out = run(["nm", "-D", "--defined-only", "-C", lib]).stdout
    return [l.split(" ", 2)[2] for l in out.splitlines() if len(l.split(" ", 2)) == 3]


def needed(lib: Path) -> List[str]:
    out = run(["objdump", "-p", lib]).stdout
    return [l.split()[1] for l in out.splitlines() if l.strip().startswith("NEEDED")]


def check_client_library(lib: Path) -> None:
    """The shared library exports dumpd's API only and needs none of the daemon's libraries."""
    symbols = exported_symbols(lib)
    assert any("dumpd::client::Client::connect" in s for s in symbols), symbols[:20]
    foreign = [s for s in symbols if not s.startswith(("dumpd::", "typeinfo for dumpd::",
                                                       "typeinfo name for dumpd::",
                                                       "vtable for dumpd::", "DUMPD_0"))]
    assert foreign == [], foreign[:20]
    libs = needed(lib)
    for banned in ("libssl", "libcrypto", "liblz4", "libspdlog", "libsystemd"):
        assert not any(n.startswith(banned) for n in libs), libs


def which(tool: str) -> bool:
    return shutil.which(tool) is not None
