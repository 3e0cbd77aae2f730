"""dumpd.torch where tensors alias and change in place: two attach() sessions on one client
never send one's tensor as a reference to the other's file; with backward=True, in-place
modules are refused at attach() with the fix, and an in-place change of a hooked output gets
autograd's error rather than silently wrong gradients."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import Daemon, dump_files, index_files, make_config
from dumpd.torch import _compiled

torch.set_num_threads(1)


class TwoParts(nn.Module):
    """p and q see the same tensor object, changed in place in between."""

    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Sequential(nn.Identity())
        self.q = nn.Sequential(nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.p(x)
        x.mul_(2)
        return self.q(x)


def test_two_sessions_on_one_client_never_share_an_identity(daemon: Daemon,
                                                            tmp_path: Path) -> None:
    """Each attach() numbered tensors from 1: the second session's first tensor then had the
    first session's number, and the client sent it as a link to the first one's file."""
    model = TwoParts()
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    dumpd.torch.attach(model.p, client, prefix="P")
    dumpd.torch.attach(model.q, client, prefix="Q")
    dumpd.torch.step(client, 0)
    model(torch.ones(4, 4))
    counts = client.flush()
    client.close()
    files = index_files(dump_files(tmp_path / "dump"))
    q_in = files[(0, "Q_0-Identity_Identity-op1", "input", 0)]
    p_out = files[(0, "P_0-Identity_Identity-op1", "output", 0)]
    np.testing.assert_array_equal(q_in.load(), np.full((4, 4), 2.0, dtype=np.float32))
    np.testing.assert_array_equal(p_out.load(), np.ones((4, 4), dtype=np.float32))
    assert q_in.path.stat().st_ino != p_out.path.stat().st_ino
    # Within each session the input and output of Identity are one tensor: linked.
    assert counts["tensors_linked"] == 2


class Residual(nn.Module):
    """torchvision's BasicBlock pattern: the block changes a hooked module's output in place."""

    def __init__(self, inplace_relu: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.relu = nn.ReLU(inplace=inplace_relu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn(self.fc(x))
        out += x
        return self.relu(out)


def test_backward_refuses_in_place_modules_at_attach(daemon: Daemon, tmp_path: Path) -> None:
    """Not at the first forward, with autograd's error about a view of a custom Function."""
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 4),
                          nn.Dropout(0.1, inplace=True))
    with pytest.raises(ValueError, match=r"inplace=False on 1, 3 \(or attach"):
        dumpd.torch.attach(model, client, backward=True)
    # Nothing was hooked: the model runs and dumps nothing.
    dumpd.torch.step(client, 0)
    model(torch.randn(2, 4, requires_grad=True)).sum().backward()
    assert client.flush()["tensors_received"] == 0
    handle = dumpd.torch.attach(model, client)  # forward only: in-place modules are fine
    handle.remove()
    client.close()


@pytest.mark.conditional  # compiled: torch 2 only
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_an_in_place_change_of_a_hooked_output_is_refused_not_silently_wrong(
        daemon: Daemon, tmp_path: Path, mode: str) -> None:
    """The gradient taps hand on views, which autograd keeps track of: a model that changes
    one in place (`out += identity`) gets autograd's error. An alias autograd did not know
    (detach()) would have let it through with wrong gradients."""
    if mode == "compiled" and _compiled.UNAVAILABLE is not None:
        pytest.skip(f"no torch.compile dump point: {_compiled.UNAVAILABLE}")
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    model = Residual()
    dumpd.torch.attach(model, client, backward=True)
    if mode == "compiled":
        torch._dynamo.reset()
    forward = torch.compile(model, fullgraph=True) if mode == "compiled" else model
    dumpd.torch.step(client, 0)
    with pytest.raises(Exception, match="is a view and is being modified inplace"):
        forward(torch.randn(4, 8, requires_grad=True)).sum().backward()
    client.close()
