"""Dump once inside torch.compile: inductor's post-grad pass (dumpd/torch/_graph_pass.py)
numbers the graph values several dump points take, and those go once, the later dump points
as references (hard links), as in eager mode. A value the graph changes between two dump
points (functional code in a parent's forward, an in-place op) is never linked.

Runs under the torch 2 environment (scripts/test-torch2); skipped under Debian's torch 1.13.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import Daemon, dump_files, index_files, make_config, sanitize

pytestmark = pytest.mark.conditional

from dumpd.torch import _compiled, _graph_pass  # noqa: E402

if _compiled.UNAVAILABLE is not None or _graph_pass.PASS is None:
    pytest.skip(f"no compiled dump point: {_compiled.UNAVAILABLE or 'no inductor custom passes'}"
                " (run under the torch 2 environment: scripts/test-torch2)",
                allow_module_level=True)

from test_torch_compile import CNN  # noqa: E402  conv -> relu -> pool -> flatten -> fc

torch.set_num_threads(1)
DUMP = torch.ops.dumpd.dump.default


class Tampered(nn.Module):
    """Between modules the parent changes the value: out of place (inductor may compute it
    into the buffer of the value it replaces) and in place."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.ReLU()
        self.c = nn.Linear(16, 16)
        self.d = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x) * 2 + 1
        z = self.c(self.b(y))
        z.mul_(3)
        return self.d(z)


def run(model: nn.Module, tmp_path: Path, daemon: Daemon, compiled: bool, x_shape: tuple,
        steps: int = 2) -> Dict:
    """Trains `steps` steps with every module dumped; returns the flush counts and index."""
    tmp_path.mkdir()
    torch.manual_seed(1)
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    handle = dumpd.torch.attach(model, client)
    forward = torch.compile(model, fullgraph=True) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        dumpd.torch.step(client, step)
        loss = forward(torch.randn(*x_shape)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    counts = client.flush()
    client.close()
    return {"counts": counts, "files": index_files(dump_files(tmp_path / "dump")),
            "names": handle.names}


def linked(a, b) -> bool:
    return a.path.stat().st_ino == b.path.stat().st_ino


def test_the_pass_numbers_shared_values_and_skips_what_the_graph_mutates() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(torch.ops.aten.relu.default, (x,))
    first = g.call_function(DUMP, (0, [x], [a], []))
    b = g.call_function(torch.ops.aten.neg.default, (a,))
    second = g.call_function(DUMP, (1, [a], [b], []))
    c = g.call_function(torch.ops.aten.mul_.Tensor, (b, 2))
    third = g.call_function(DUMP, (2, [b, None], [c], []))
    g.output(c)
    assert _graph_pass.number_repeats(g) == 1
    # x and c are dumped once each, b is written in place: only a is a repeat.
    assert first.args[3] == [0, 1]
    assert second.args[3] == [-1, 0]
    assert third.args[3] == []


def test_a_compiled_cnn_sends_each_module_output_once(daemon: Daemon, tmp_path: Path) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = run(CNN(), tmp_path / "eager", daemon, compiled=False, x_shape=(4, 3, 16, 16))
    torch.manual_seed(0)
    compiled = run(CNN(), tmp_path / "compiled", daemon, compiled=True, x_shape=(4, 3, 16, 16))
    files, names = compiled["files"], compiled["names"]
    assert sorted(files) == sorted(eager["files"])
    for key, f in eager["files"].items():
        np.testing.assert_array_equal(files[key].load(), f.load(), err_msg=str(key))
    chain = ["conv", "act", "pool", "flat", "fc"]
    for step in range(2):
        for before, after in zip(chain, chain[1:]):
            out = files[(step, sanitize(names[before]), "output", 0)]
            inp = files[(step, sanitize(names[after]), "input", 0)]
            assert linked(out, inp), f"step {step}: {after}'s input is not {before}'s output"
    # Four repeats a step, each written as a link, not copied.
    assert compiled["counts"]["tensors_linked"] == 2 * 4
    assert compiled["counts"]["tensors_failed"] == 0


def test_a_value_changed_between_modules_is_never_linked(daemon: Daemon, tmp_path: Path) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = run(Tampered(), tmp_path / "eager", daemon, compiled=False, x_shape=(8, 16))
    torch.manual_seed(0)
    compiled = run(Tampered(), tmp_path / "compiled", daemon, compiled=True, x_shape=(8, 16))
    files, names = compiled["files"], compiled["names"]
    assert sorted(files) == sorted(eager["files"])
    for key, f in eager["files"].items():
        np.testing.assert_allclose(files[key].load(), f.load(), rtol=1e-5, atol=1e-6,
                                   err_msg=str(key))
    for step in range(2):
        def file(module: str, io: str):
            return files[(step, sanitize(names[module]), io, 0)]
        assert not linked(file("a", "output"), file("b", "input"))
        assert not linked(file("c", "output"), file("d", "input"))
        assert linked(file("b", "output"), file("c", "input"))
        # What was written is what the model computed, not the value the buffer held first.
        a_out = file("a", "output").load()
        np.testing.assert_allclose(file("b", "input").load(), a_out * 2 + 1, rtol=1e-6)
        c_out = file("c", "output").load()
        np.testing.assert_allclose(file("d", "input").load(), c_out * 3, rtol=1e-6)


def test_installing_keeps_a_programs_own_post_grad_pass() -> None:
    from torch._inductor import config

    seen: List[int] = []

    def own(graph: torch.fx.Graph) -> None:
        seen.append(len(graph.nodes))

    with config.patch(post_grad_custom_post_pass=own):
        assert _graph_pass.install()
        current = config.post_grad_custom_post_pass
        assert isinstance(current, list) and current[0] is own
        assert current[1] is _graph_pass.PASS
        assert _graph_pass.install() and config.post_grad_custom_post_pass == current
        torch._dynamo.reset()
        torch.compile(lambda t: (t * 2).sum())(torch.ones(3))
    assert seen, "the program's own pass no longer runs"


class Twice(nn.Module):
    def forward(self, x: torch.Tensor):
        y = x * 2
        return y, y


class TwiceParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.twice = Twice()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.twice(self.fc(x))
        return (a * 3 + b).sum(dim=1)


def test_a_module_returning_one_tensor_twice_compiles_with_gradients(daemon: Daemon,
                                                                     tmp_path: Path) -> None:
    """Dynamo refuses one tensor twice among an autograd function's inputs; each slot's
    gradient is its own (3 and 1 here), as in eager mode."""
    trees = []
    for mode in ("eager", "compiled"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = TwiceParent()
        (tmp_path / mode).mkdir()
        client = dumpd.Client(str(make_config(tmp_path / mode)), socket=daemon.socket)
        handle = dumpd.torch.attach(model, client, backward=True)
        forward = torch.compile(model, fullgraph=True) if mode == "compiled" else model
        dumpd.torch.step(client, 0)
        forward(torch.randn(4, 6)).sum().backward()
        client.close()
        trees.append(index_files(dump_files(tmp_path / mode / "dump")))
    eager, compiled = trees
    assert sorted(compiled) == sorted(eager)
    grad = sanitize(handle.gradient_names["twice"])
    for tree in trees:
        np.testing.assert_array_equal(tree[(0, grad, "input", 0)].load(), np.full((4, 6), 3.0))
        np.testing.assert_array_equal(tree[(0, grad, "input", 1)].load(), np.full((4, 6), 1.0))
    for key, f in eager.items():
        np.testing.assert_allclose(compiled[key].load(), f.load(), rtol=1e-5, err_msg=str(key))
