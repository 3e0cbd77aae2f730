"""dumpd.torch with the flight recorder: a real model whose weights turn NaN at one step,
and losses reported through dumpd.torch.step(loss=...) and steps(loss=...)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
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
    path = make_config(tmp_path, iteration="none", saved_data="full")
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


def test_losses_through_steps_fire_a_loss_spike(daemon: Daemon, tmp_path: Path) -> None:
    """steps(loss=callback): the callback's losses reach the recorder without report_loss."""
    config = recorder_config(tmp_path, triggers=["loss_spike"],
                             loss_spike={"window": 4, "factor": 2.0})
    model = Net()
    client = dumpd.Client(str(config), socket=daemon.socket)
    dumpd.torch.attach(model, client)
    x = torch.randn(3, 8)
    last = None
    calls = []

    def loss():
        calls.append(client.stats()["iteration"])
        return last

    for step in dumpd.torch.steps(client, range(10), loss=loss):
        with torch.no_grad():
            model(x)
        # None at step 0 (no loss: nothing reported), a tensor at 6, floats else.
        last = (None if step == 0 else torch.tensor(25.0) if step == 6
                else 1.0 + 0.1 * (step % 2))
    client.close()
    # Called after each step's body, before the next mark; once more after the last step.
    assert calls == list(range(10))
    [t] = triggers(tmp_path / "dump")
    assert t["kind"] == "loss_spike"
    # The window (steps 2..5), then the spike; step 1's loss was reported and left it.
    assert t["losses"] == pytest.approx([1.0, 1.1, 1.0, 1.1, 25.0])
    # Reported before step 7's mark: it fired during step 6, which is written with step 5.
    assert t["iteration"] == 6 and t["iterations_written"] == [5, 6]


def test_steps_reports_the_last_steps_loss_when_the_loop_ends(daemon: Daemon,
                                                              tmp_path: Path) -> None:
    config = recorder_config(tmp_path, triggers=["loss_spike"],
                             loss_spike={"window": 4, "factor": 2.0})
    client = dumpd.Client(str(config), socket=daemon.socket)
    last = None
    for step in dumpd.torch.steps(client, range(8), loss=lambda: last):
        client.dump_op("Mul", "Default/Mul-op0", outputs=[np.full(4, step, np.float32)])
        last = torch.tensor(40.0) if step == 7 else 1.0
    client.close()
    [t] = triggers(tmp_path / "dump")
    assert t["kind"] == "loss_spike" and t["losses"] == [1.0] * 4 + [40.0]
    assert t["iteration"] == 7 and t["iterations_written"] == [6, 7]


class _FakeClient:
    """What steps() calls on a client, in order."""

    def __init__(self) -> None:
        self.log: list = []

    def set_step(self, iteration: int, graph_id: int = 0) -> None:
        self.log.append(("mark", iteration))

    def report_loss(self, loss: float) -> None:
        assert type(loss) is float
        self.log.append(("loss", loss))

    def flush(self) -> dict:
        self.log.append(("flush",))
        return {}


def test_steps_reports_each_loss_before_the_flush_and_the_next_mark() -> None:
    client = _FakeClient()
    losses = iter([None, 2.0, torch.tensor([3.0])])
    for i in dumpd.torch.steps(client, range(3), flush=True, loss=lambda: next(losses)):
        client.log.append(("body", i))
    assert client.log == [
        ("mark", 0), ("body", 0), ("flush",),
        ("mark", 1), ("body", 1), ("loss", 2.0), ("flush",),
        ("mark", 2), ("body", 2), ("loss", 3.0), ("flush",)]


def test_steps_refuses_a_loss_that_is_not_callable() -> None:
    client = _FakeClient()
    with pytest.raises(TypeError, match="callable"):
        dumpd.torch.steps(client, range(3), loss=1.5)  # at the call, not at the first step
    assert client.log == []


def test_cuda_losses_through_steps_are_never_waited_for_within_the_loop(monkeypatch) -> None:
    """A CUDA loss goes the way step(loss=) sends it: copied to the host without a wait and
    reported once its copy is done. Only the end of the loop waits, for the last ones.
    (No GPU here: the copy and its CUDA event are stand-ins; tests/gpu runs the real one.)"""
    from dumpd.torch import _steps
    client = _FakeClient()
    events = []

    class Event:
        def __init__(self) -> None:
            self.done = False

        def query(self) -> bool:
            return self.done

        def synchronize(self) -> None:
            client.log.append(("wait",))
            self.done = True

    class Host:
        def __init__(self, value: float) -> None:
            self.value = value

        def __float__(self) -> float:
            return self.value

    class CudaLoss:
        is_cuda = True

        def __init__(self, value: float) -> None:
            self.value = value

        def __float__(self) -> float:
            raise AssertionError("float() of a CUDA tensor synchronises")

    def add(self, loss) -> None:
        event = Event()
        events.append(event)
        self.items.append((Host(loss.value), event))

    monkeypatch.setattr(_steps._PendingLosses, "add", add)
    last = None
    for step in dumpd.torch.steps(client, range(4), flush=True, loss=lambda: last):
        for e in events:
            e.done = True  # the device has finished the previous steps' copies
        client.log.append(("body", step))
        last = CudaLoss(float(step))
    assert client.log == [
        ("mark", 0), ("body", 0), ("flush",),
        ("mark", 1), ("body", 1), ("loss", 0.0), ("flush",),
        ("mark", 2), ("body", 2), ("loss", 1.0), ("flush",),
        ("mark", 3), ("body", 3), ("loss", 2.0), ("flush",),
        # After the loop: the last copy is waited for, and what its report wrote flushed.
        ("wait",), ("loss", 3.0), ("flush",)]
    assert _steps._pending[client].items == []
