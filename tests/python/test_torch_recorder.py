"""dumpd.torch with the flight recorder: a real model whose weights turn NaN at one step,
and losses reported through dumpd.torch.step(loss=...)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import Daemon, dump_files, make_config

torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def recorder_config(tmp_path: Path, **section) -> Path:
    path = make_config(tmp_path, iteration="100000", saved_data="full")
    cfg = json.loads(path.read_text())
    cfg["flight_recorder"] = {"steps": 2, "after_steps": 0, **section}
    path.write_text(json.dumps(cfg))
    return path


def triggers(root: Path):
    [f] = list(root.glob("rank_0/.dump_metadata/triggers.jsonl"))
    return [json.loads(x) for x in f.read_text().splitlines()]


def test_a_nan_in_weights_names_the_first_module_with_a_non_finite_output(
        daemon: Daemon, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    client = dumpd.Client(str(recorder_config(tmp_path)), socket=daemon.socket)
    dumpd.torch.attach(model, client)
    x = torch.randn(5, 8)
    for step in range(8):
        dumpd.torch.step(client, step)
        if step == 5:
            with torch.no_grad():
                model.fc2.weight[1, 3] = float("nan")  # fc1 and act stay finite
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if step < 5:
            opt.step()
    client.close()
    root = tmp_path / "dump"
    [t] = triggers(root)
    assert t["kind"] == "nan" and t["iteration"] == 5
    assert t["op"].startswith("Default/fc2-Linear/") and t["tensor"] == "output 0", t
    assert t["iterations_written"] == [4, 5]
    assert sorted({int(f.iteration) for f in dump_files(root)}) == [4, 5]
    out = [f for f in dump_files(root)
           if f.iteration == "5" and "fc2" in f.op_name and f.io == "output"]
    assert np.isnan(out[0].load()[:, 1]).all()


def test_losses_through_step_fire_a_loss_spike(daemon: Daemon, tmp_path: Path) -> None:
    config = recorder_config(tmp_path, triggers=["loss_spike"],
                             loss_spike={"window": 4, "factor": 2.0})
    model = Net()
    client = dumpd.Client(str(config), socket=daemon.socket)
    dumpd.torch.attach(model, client)
    x = torch.randn(3, 8)
    loss = None
    for step in range(10):
        # The loss of step k is reported at step k + 1's mark: a tensor at 7, a float else.
        dumpd.torch.step(client, step, loss=loss)
        with torch.no_grad():
            model(x)
        loss = torch.tensor(25.0) if step == 6 else 1.0 + 0.1 * (step % 2)
    client.close()
    [t] = triggers(tmp_path / "dump")
    assert t["kind"] == "loss_spike" and t["losses"][-1] == 25.0
    # Reported before step 7's mark: it fired during step 6, which is written with step 5.
    assert t["iteration"] == 6 and t["iterations_written"] == [5, 6]


def test_pending_losses_belong_to_their_client_and_go_with_it(daemon: Daemon,
                                                              tmp_path: Path) -> None:
    """dumpd.torch keeps the losses not yet reported per client, and forgets a client when it
    is gone (no leak, and no later client can inherit them by a reused id())."""
    import gc

    from dumpd.torch import _steps
    config = recorder_config(tmp_path, triggers=["loss_spike"],
                             loss_spike={"window": 4, "factor": 2.0})
    before = len(_steps._pending)
    client = dumpd.Client(str(config), socket=daemon.socket)
    dumpd.torch.step(client, 0, loss=1.0)
    assert client in _steps._pending and len(_steps._pending) == before + 1
    client.close()
    del client
    gc.collect()
    assert len(_steps._pending) == before
