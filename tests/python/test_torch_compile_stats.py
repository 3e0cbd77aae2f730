"""Statistics inside compiled graphs (dumpd/torch/_graph_stats.py, issue 52): for a job that
writes only statistics, a compiled model's dump points compute each tensor's statistics in
the graph and only the rows leave it. statistic.csv has the eager run's rows: the same
tensors, dtypes and shapes, the same max, min and counts, avg and l2norm within the last
digits (plain float64 sums against MindSpore's chunked rule), and no tensor crosses the ring.

Runs under the torch 2 environment (scripts/test-torch2); skipped under Debian's torch 1.13.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict, Tuple

import pytest
import torch

import dumpd
import dumpd.torch
from conftest import Daemon, make_config

pytestmark = pytest.mark.conditional

from compile_support import require_compile  # noqa: E402

require_compile()

from compile_support import CNN, compiled_frames, counters, fresh_counters  # noqa: E402

torch.set_num_threads(1)

CATEGORIES = ["max", "min", "avg", "count", "nan count", "negative inf count",
              "positive inf count", "zero count", "l2norm"]
SUMS = ("Avg Value", "L2Norm Value")


def run(daemon: Daemon, root: Path, compiled: bool) -> Tuple[Dict[tuple, dict], dict]:
    root.mkdir()
    config = make_config(root, saved_data="statistic", statistic_category=CATEGORIES)
    client = dumpd.Client(str(config), socket=daemon.socket)
    torch.manual_seed(0)
    model = CNN()
    dumpd.torch.attach(model, client)
    forward = torch.compile(model, fullgraph=True) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(5)
    for step in range(3):
        x = torch.randn(4, 3, 16, 16, generator=g)
        if step == 2:  # non-finite values reach the counts, max and min
            x[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
        dumpd.torch.step(client, step)
        loss = forward(x).pow(2).mean()
        opt.zero_grad()
        if step < 2:
            loss.backward()
            opt.step()
    client.flush()
    stats = client.stats()
    client.close()
    rows: Dict[tuple, dict] = {}
    for path in (root / "dump").rglob("statistic.csv"):
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                rows[(path.parent.name, r["Op Name"], r["IO"], r["Slot"])] = r
    return rows, stats


def test_compiled_statistics_are_the_eager_rows_without_the_tensors(daemon: Daemon,
                                                                     tmp_path: Path) -> None:
    fresh_counters()
    eager, _ = run(daemon, tmp_path / "eager", compiled=False)
    compiled, stats = run(daemon, tmp_path / "compiled", compiled=True)
    assert not counters()["graph_break"], dict(counters()["graph_break"])
    assert compiled_frames() == 1
    assert sorted(compiled) == sorted(eager) and len(eager) == 3 * 5 * 2
    for key, want in eager.items():
        got = compiled[key]
        for column, value in want.items():
            if column == "Timestamp":
                continue
            if column in SUMS and value not in ("nan", "inf", "-inf"):
                assert float(got[column]) == pytest.approx(float(value), rel=1e-9), (key, column)
            else:
                assert got[column] == value, (key, column)
    nan_rows = [k for k, r in compiled.items() if r["NaN Count"] != "0"]
    assert nan_rows and all(k[0] == "2" for k in nan_rows), nan_rows
    # Every tensor went as its graph-computed row: 96 bytes each, not its bytes.
    assert stats["given_statistics"] == len(compiled)
    assert stats["bytes_committed"] == 96 * stats["tensors_committed"], stats


def test_a_job_that_writes_tensors_keeps_the_dump_op(daemon: Daemon, tmp_path: Path) -> None:
    """saved_data "tensor": the graph hands the tensors over, as before (no rows)."""
    fresh_counters()
    client = dumpd.Client(str(make_config(tmp_path, saved_data="tensor")), socket=daemon.socket)
    model = CNN()
    dumpd.torch.attach(model, client)
    dumpd.torch.step(client, 0)
    torch.compile(model)(torch.randn(2, 3, 16, 16))
    client.flush()
    stats = client.stats()
    client.close()
    assert stats["given_statistics"] == 0
    assert len(list((tmp_path / "dump").rglob("*.npy"))) == 10
