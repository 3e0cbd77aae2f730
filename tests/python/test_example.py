"""client/python/examples/train_alexnet.py runs against a real daemon and dumps its model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from conftest import Daemon, dump_files

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "client" / "python" / "examples" / "train_alexnet.py"
CONFIG = REPO / "config" / "examples" / "all_ops.json"  # iteration "0|5-8"


def test_train_alexnet_example(daemon: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "dump"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--socket", daemon.socket, "--config", str(CONFIG),
         "--path", str(out), "--steps", "6", "--batch", "2", "--size", "16", "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "step 5:" in proc.stdout and "tensors written" in proc.stdout
    files = dump_files(out)
    assert {f.iteration for f in files} == {"0", "5"}
    convs = [f for f in files if f.op_type == "Conv2d" and f.iteration == "0"]
    assert len(convs) == 5 * 2  # five convolutions, input and output each
    first = [f for f in convs if f.op_name == "Default_features-Sequential_0-Conv2d_Conv2d-op2"
             and f.io == "input"]
    assert len(first) == 1 and first[0].load().shape == (2, 3, 16, 16)
    assert all(np.isfinite(f.load()).all() for f in files)
