"""dumpd.torch where tensors alias and change in place: two attach() sessions on one client
never send one's tensor as a reference to the other's file, and with backward=True a model
may change module outputs in place (a ResNet block's `out += identity`, ReLU(inplace=True))
and its gradient files are autograd's gradients."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import Daemon, dump_files, index_files, make_config, sanitize
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
    """torchvision's BasicBlock pattern: the block changes a hooked module's output in place,
    then an in-place ReLU changes it again."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn(self.fc(x))
        out += x
        return self.relu(out)


def reference_gradients(model: Residual, x: torch.Tensor) -> dict:
    """The gradients at fc's output, bn's output and relu's input, by autograd alone."""
    a = model.fc(x)
    b = model.bn(a)
    c = b + x
    for t in (a, b, c):
        t.retain_grad()
    torch.relu(c).sum().backward()
    return {"fc": a.grad, "bn": b.grad, "relu": c.grad}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_backward_with_module_outputs_changed_in_place(daemon: Daemon, tmp_path: Path,
                                                       mode: str) -> None:
    if _compiled.UNAVAILABLE is not None:
        pytest.skip(f"torch {torch.__version__} dumps gradients with full backward hooks, "
                    "which refuse an in-place change of a hooked module's output "
                    f"({_compiled.UNAVAILABLE})")
    torch.manual_seed(0)
    model = Residual()
    reference = Residual()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(4, 8)
    want = reference_gradients(reference, x.clone().requires_grad_())
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    handle = dumpd.torch.attach(model, client, backward=True)
    if mode == "compiled":
        torch._dynamo.reset()
    forward = torch.compile(model, fullgraph=True) if mode == "compiled" else model
    dumpd.torch.step(client, 0)
    forward(x.clone().requires_grad_()).sum().backward()
    counts = client.flush()
    client.close()
    assert counts["tensors_failed"] == 0
    files = index_files(dump_files(tmp_path / "dump"))

    def grad(module: str, io: str) -> np.ndarray:
        return files[(0, sanitize(handle.gradient_names[module]), io, 0)].load()

    # Inductor's own batch-norm backward sums in another order: float32 rounding.
    tol = {"rtol": 1e-5, "atol": 1e-7} if mode == "eager" else {"rtol": 1e-4, "atol": 1e-6}
    # A backward op's inputs: the gradients at its module's outputs; outputs: at its inputs.
    np.testing.assert_allclose(grad("bn", "input"), want["bn"].numpy(), **tol)
    np.testing.assert_allclose(grad("relu", "output"), want["relu"].numpy(), **tol)
    np.testing.assert_allclose(grad("fc", "input"), want["fc"].numpy(), **tol)
    np.testing.assert_allclose(grad("bn", "output"), want["fc"].numpy(), **tol)
