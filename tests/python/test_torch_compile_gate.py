"""The two graphs of an attached, compiled model (dumpd/_core/gate.py, issue 52): a step
that the client says can dump nothing runs the model's own graph, without dump points, and
a selected step the graph with them. Each is compiled once; selection changes afterwards
compile nothing, and the tree is the one the selection asks for.

Runs under the torch 2 environment (scripts/test-torch2); skipped under Debian's torch 1.13.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import Daemon, dump_files, dumpctl_control, make_config

pytestmark = pytest.mark.conditional

from compile_support import require_compile  # noqa: E402

require_compile()

from compile_support import compiled_frames, counters, fresh_counters  # noqa: E402

torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def run_steps(client: dumpd.Client, handle: dumpd.torch.AttachHandle, run, model: nn.Module,
              steps: range, fired: List[int], before=lambda step: None) -> None:
    """Training steps; fired[step] = the dump points that ran in it (selected or not)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3))
    for step in steps:
        before(step)
        dumpd.torch.step(client, step)
        start = handle._session.fired
        loss = run(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        fired.append(handle._session.fired - start)


def iterations(root: Path) -> List[int]:
    return sorted({int(f.iteration) for f in dump_files(root)})


def test_unselected_steps_run_the_graph_without_dump_points(daemon: Daemon,
                                                            tmp_path: Path) -> None:
    fresh_counters()
    client = dumpd.Client(str(make_config(tmp_path, iteration="3-4")), socket=daemon.socket)
    torch.manual_seed(0)
    model = Net()
    handle = dumpd.torch.attach(model, client, backward=True)
    run = torch.compile(model, fullgraph=True)
    fired: List[int] = []
    run_steps(client, handle, run, model, range(0, 6), fired)
    # Step 0 runs armed although unselected (the graph with dump points is compiled at the
    # start, not at the first selected step); 1, 2 and 5 have none; 3 and 4 dump.
    # Three forward ops; the backward ops' two records each (gradients at the module's
    # outputs, then at its inputs), but fc1's input x takes no gradient: 3 + 5.
    points = 8
    assert fired == [points, 0, 0, points, points, 0], fired
    graphs = compiled_frames()
    assert not counters()["graph_break"], dict(counters()["graph_break"])
    # Later selection changes, an operator's among them, choose between the two graphs.
    with torch._dynamo.config.patch(error_on_recompile=True):
        run_steps(client, handle, run, model, range(6, 12), fired,
                  before=lambda s: s == 7 and dumpctl_control(daemon.socket, "--iteration",
                                                              "9-10"))
    assert compiled_frames() == graphs
    assert fired[6:] == [0, 0, 0, points, points, 0], fired
    client.close()
    assert iterations(tmp_path / "dump") == [3, 4, 9, 10]
    # Every selected step holds the same files, forward and backward ops alike.
    files = {it: {(f.op_name, f.io, f.slot) for f in dump_files(tmp_path / "dump")
                  if f.iteration == it} for it in ("3", "4", "9", "10")}
    assert files["3"] == files["4"] == files["9"] == files["10"], files
    names = {name for name, _, _ in files["9"]}
    assert len(names) == 6 and len({n for n in names if "Grad" in n}) == 3, sorted(names)


def test_a_recorder_keeps_the_dump_points_in_every_step(daemon: Daemon,
                                                         tmp_path: Path) -> None:
    """The flight recorder copies every step (step_selected): no step may skip them."""
    fresh_counters()
    path = make_config(tmp_path, iteration="none", saved_data="statistic")
    cfg = json.loads(path.read_text())
    cfg["flight_recorder"] = {"steps": 2, "after_steps": 0}
    path.write_text(json.dumps(cfg))
    client = dumpd.Client(str(path), socket=daemon.socket)
    model = Net()
    handle = dumpd.torch.attach(model, client)
    fired: List[int] = []
    run_steps(client, handle, torch.compile(model), model, range(4), fired)
    assert fired == [3, 3, 3, 3]
    assert compiled_frames() == 1
    client.close()


def test_a_session_that_stopped_dumping_runs_the_model_alone(daemon: Daemon,
                                                              tmp_path: Path) -> None:
    """errors="warn": once a dump failed, the steps after it carry no dump points."""
    fresh_counters()
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    model = Net()
    handle = dumpd.torch.attach(model, client, errors="warn")
    fired: List[int] = []
    run = torch.compile(model)
    run_steps(client, handle, run, model, range(2), fired)
    handle._session.error = dumpd.DaemonError("the test says the session ended")
    run_steps(client, handle, run, model, range(2, 4), fired)
    assert fired == [3, 3, 0, 0], fired
    client.close()
