"""A client SIGKILLed mid-step loses nothing it committed: the daemon drains its ring."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

import dumpd
from conftest import Daemon, dump_files, make_config, wait_for

# Dumps N records of 64 KiB each, flushes nothing, reports, then dies without any cleanup
# (no Goodbye, no flush, no destructor).
CLIENT = r"""
import os, signal, sys
import numpy as np
import dumpd

config, sock, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = dumpd.Client(config, socket=sock)
client.set_step(2)
for i in range(n):
    assert client.dump_op("Mul", f"Default/Mul-op{i}",
                          inputs=[np.full(8192, i, dtype=np.float32)],
                          outputs=[np.full(8192, 2 * i, dtype=np.float32)])
print(f"committed {n}", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_sigkilled_client_loses_nothing_it_committed(daemon: Daemon, tmp_path: Path) -> None:
    n = 300  # ~39 MB: more than the daemon writes before the client dies
    config = make_config(tmp_path)
    proc = subprocess.run([sys.executable, "-c", CLIENT, str(config), daemon.socket, str(n)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ), timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == f"committed {n}"

    root = tmp_path / "dump"
    print("files when the client died:", len(dump_files(root)), "of", 2 * n)
    wait_for(lambda: len(dump_files(root)) == 2 * n, 60, f"{2 * n} files after the crash")
    for f in dump_files(root):
        assert f.iteration == "2"
        i = int(f.op_name.rsplit("-op", 1)[1])
        want = i if f.io == "input" else 2 * i
        data = f.load()
        assert data.shape == (8192,)
        assert (data == want).all(), f.path.name
    # No temporary (half-written) files are left behind.
    leftovers = [p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".npy")
                 and p.parent.name not in (".dump_metadata", "execution_order")]
    assert leftovers == []
    # The manifest tells the truth about the iteration the crash cut short: everything the job
    # committed is there and no write failed, but the job never finished iteration 2.
    manifest = root / "rank_0" / ".dump_metadata" / "manifest.jsonl"
    wait_for(manifest.exists, 30, "the manifest line of the cut iteration")
    [line] = [json.loads(l) for l in manifest.read_text().splitlines()]
    assert (line["iteration"], line["tensors"]) == (2, 2 * n), line
    assert (line["whole"], line["writes_ok"], line["complete"]) == (False, True, False), line
    assert line["reasons"] == ["the job went away during this iteration"], line

    # The daemon keeps serving: the same job can reconnect at once.
    def reconnect() -> bool:
        try:
            with dumpd.Client(config, socket=daemon.socket) as client:
                client.set_step(3)
                client.dump("Add", "Default/Add-op0", "output", 0, np.ones(3))
                return client.flush()["tensors_written"] == 1
        except dumpd.DaemonError as e:  # the dead session may still hold its claim briefly
            assert "another live session" in str(e)
            return False

    wait_for(reconnect, 30, "a new session for the same job")
