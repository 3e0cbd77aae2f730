"""The dumpd module cannot clash with another protobuf in the training process.

The neighbour is a shared library holding dumpd's own messages (proto/dumpd.proto) compiled
for the full runtime against the system's libprotobuf.so, loaded RTLD_GLOBAL before dumpd:
the worst case of a process that carries a second copy of the same generated code. A module
whose messages used the full runtime would register proto/dumpd.proto in the same descriptor
pool a second time, and protobuf aborts the process ("File already exists in database"); one
whose message classes were exported could bind to the other copy. dumpd's module uses the lite
runtime (no global registration) and hides every symbol but PyInit__dumpd.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Daemon, dump_files, make_config

NEIGHBOUR = os.environ.get("DUMPD_PROTOBUF_NEIGHBOUR", "")

# Loads the neighbour, uses it (its messages serialise through the shared libprotobuf), then
# runs a dumpd session end to end: Hello, a tensor, a flush, the reply.
CLIENT = r"""
import ctypes, sys
import numpy as np
neighbour = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import dumpd
client = dumpd.Client(sys.argv[2], socket=sys.argv[3])
client.set_step(0)
assert client.dump_op("Add", "Default/Add-op0", inputs=[np.arange(6, dtype=np.float32)],
                      outputs=[np.ones(6, dtype=np.float32)])
reply = client.flush()
print("written", reply["tensors_written"], flush=True)
"""


def _module_path() -> Path:
    import dumpd._dumpd as module
    return Path(module.__file__)


@pytest.mark.skipif(not NEIGHBOUR, reason="DUMPD_PROTOBUF_NEIGHBOUR is not set (run through ctest)")
def test_dumpd_runs_beside_a_second_copy_of_its_messages(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path)
    proc = subprocess.run([sys.executable, "-c", CLIENT, NEIGHBOUR, str(config), daemon.socket],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "written 2"
    files = dump_files(tmp_path / "dump")
    assert sorted(f.io for f in files) == ["input", "output"]


def test_module_exports_only_its_init_function() -> None:
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(_module_path())],
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    exported = set()
    for line in out.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name; defined (Ndx not UND), global or weak.
        if len(fields) >= 8 and fields[0].endswith(":") and fields[6] != "UND" \
                and fields[4] in ("GLOBAL", "WEAK") and fields[5] == "DEFAULT":
            exported.add(fields[7].split("@")[0])
    assert exported == {"PyInit__dumpd"}, sorted(exported)[:20]


def test_module_needs_only_the_lite_runtime() -> None:
    """The full runtime (libprotobuf.so) owns the global descriptor pool; the module never
    loads it, so nothing of dumpd's is ever registered there."""
    out = subprocess.run(["readelf", "-d", "-W", str(_module_path())],
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    needed = [line.split("[")[-1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert needed, out
    assert not [n for n in needed if n.startswith("libprotobuf.so")], needed
