"""torch.compile as people use it (issue 49): blocks compiled one by one, attach() before or
after compile, attention modules that use their children's weights themselves, a whole
training step compiled, dynamic shapes, the flight recorder in a compiled step.

Runs under the torch 2 environment (scripts/test-torch2); under Debian's torch 1.13 it is
skipped and says so.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Callable, Dict, List

import pytest
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import Daemon, dump_files, index_files, make_config

pytestmark = pytest.mark.conditional

from compile_support import require_compile  # noqa: E402

require_compile()

from compile_support import assert_same_tree, compiled_frames, counters, fresh_counters  # noqa: E402,E501

torch.set_num_threads(1)


class MLPBlock(nn.Module):
    """LayerNorm -> Linear -> GELU with a residual: the block a transformer repeats."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(self.norm(x)))


class Stack(nn.Module):
    def __init__(self, blocks: int = 12, width: int = 16) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MLPBlock(width) for _ in range(blocks))
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class AttentionNet(nn.Module):
    """nn.MultiheadAttention (its out_proj is never called: F.multi_head_attention_forward
    uses its weight), then a Linear."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, 4, batch_first=True)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        return self.out(x + a)






def run_steps(model: nn.Module, inputs: List[torch.Tensor], client: dumpd.Client | None,
              call: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
    """One SGD step per input, iteration i at step i (no marks without a client)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    call = call if call is not None else model
    for step, x in enumerate(inputs):
        if client is not None:
            dumpd.torch.step(client, step)
        loss = call(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def dumped(tmp_path: Path, label: str, daemon: Daemon, make: Callable[[], nn.Module],
           prepare: Callable[[nn.Module, dumpd.Client], Callable], inputs: List[torch.Tensor],
           **config) -> Dict[tuple, object]:
    """The tree of `make()`'s model trained on `inputs`, `prepare(model, client)` giving what
    to call (it attaches, and compiles or not)."""
    (tmp_path / label).mkdir()
    torch.manual_seed(0)
    model = make()
    client = dumpd.Client(str(make_config(tmp_path / label, **config)), socket=daemon.socket)
    call = prepare(model, client)
    run_steps(model, inputs, client, call)
    client.close()
    return index_files(dump_files(tmp_path / label / "dump"))


def eager(model: nn.Module, client: dumpd.Client) -> Callable:
    dumpd.torch.attach(model, client)
    return model




def test_blocks_compiled_one_by_one_compile_as_without_dumpd(daemon: Daemon,
                                                             tmp_path: Path) -> None:
    """12 identical blocks, each `block.compile()`d (TorchTitan's way): the dump point's
    number is a tensor the graph reads, not a constant dynamo guards on, so the blocks share
    the graphs torch makes without dumpd, no recompile limit is hit, and every block's tree
    is the eager one."""
    g = torch.Generator().manual_seed(7)
    inputs = [torch.randn(4, 16, generator=g) for _ in range(3)]
    fresh_counters()
    torch.manual_seed(0)
    plain = Stack()
    for block in plain.layers:
        block.compile()
    run_steps(plain, inputs, None)
    undumped = compiled_frames()

    def per_block(model: nn.Module, client: dumpd.Client) -> Callable:
        dumpd.torch.attach(model, client)
        for block in model.layers:
            block.compile()
        return model

    fresh_counters()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = dumped(tmp_path, "compiled", daemon, Stack, per_block, inputs)
    assert compiled_frames() == undumped, (compiled_frames(), undumped)
    assert not [w for w in caught if "recompile" in str(w.message)], [
        str(w.message) for w in caught]
    eager_tree = dumped(tmp_path, "eager", daemon, Stack, eager, inputs)
    # 12 blocks of 3 ops and the head, both sides, 3 steps.
    assert len(eager_tree) == 3 * (12 * 3 + 1) * 2
    assert {k[1] for k in eager_tree if "layers-ModuleList_11-MLPBlock" in k[1]} == {
        f"Default_layers-ModuleList_11-MLPBlock_{p}-{c}_{c}-op{i}"
        for p, c, i in (("norm", "LayerNorm", 47), ("fc", "Linear", 48), ("act", "GELU", 49))}
    assert_same_tree(eager_tree, compiled, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("order", ["compile-then-attach", "attach-then-compile",
                                   "compiled-blocks-in-place"])
def test_names_do_not_depend_on_when_the_model_was_compiled(daemon: Daemon, tmp_path: Path,
                                                            order: str) -> None:
    """attach(torch.compile(model)) names ops as attach(model) does: a torch.compile wrapper
    stands for the module it wraps, whether it wraps the model or replaced one of its
    blocks, so a compiled tree and an eager one pair by name."""
    g = torch.Generator().manual_seed(8)
    inputs = [torch.randn(4, 16, generator=g) for _ in range(2)]

    def prepare(model: nn.Module, client: dumpd.Client) -> Callable:
        if order == "compile-then-attach":
            compiled = torch.compile(model)
            handle = dumpd.torch.attach(compiled, client)
        elif order == "attach-then-compile":
            handle = dumpd.torch.attach(model, client)
            compiled = torch.compile(model)
        else:  # blocks replaced by their compiled wrappers, then the model attached
            for i, block in enumerate(model.layers):
                model.layers[i] = torch.compile(block)
            handle = dumpd.torch.attach(model, client)
            compiled = model
        assert not [n for n in handle.names.values() if "_orig_mod" in n], handle.names
        assert handle.names["layers.0.fc"] == (
            "Default/layers-ModuleList/0-MLPBlock/fc-Linear/Linear-op4")
        return compiled

    fresh_counters()
    got = dumped(tmp_path, "compiled", daemon, lambda: Stack(blocks=3), prepare, inputs)
    expected = dumped(tmp_path, "eager", daemon, lambda: Stack(blocks=3), eager, inputs)
    assert_same_tree(expected, got, rtol=1e-4, atol=1e-5)


def test_attention_is_dumped_as_a_unit_compiled_as_eager(daemon: Daemon,
                                                         tmp_path: Path) -> None:
    """nn.MultiheadAttention never calls its out_proj: it is dumped as one op, its inputs
    (query, key, value) and its output, in the compiled graph as eagerly."""
    g = torch.Generator().manual_seed(9)
    inputs = [torch.randn(2, 6, 16, generator=g) for _ in range(2)]

    def compiled(model: nn.Module, client: dumpd.Client) -> Callable:
        dumpd.torch.attach(model, client)
        return torch.compile(model, fullgraph=True)

    fresh_counters()
    got = dumped(tmp_path, "compiled", daemon, AttentionNet, compiled, inputs)
    assert not counters()["graph_break"], dict(counters()["graph_break"])
    expected = dumped(tmp_path, "eager", daemon, AttentionNet, eager, inputs)
    unit = "Default_attn-MultiheadAttention_MultiheadAttention-op2"
    assert {k[2:] for k in expected if k[0] == 0 and k[1] == unit} == {
        ("input", 0), ("input", 1), ("input", 2), ("output", 0)}
    assert not [k for k in expected if "out_proj" in k[1]]
    assert_same_tree(expected, got, rtol=1e-4, atol=1e-5)


def test_dynamic_shapes_recompile_no_more_than_without_dumpd(daemon: Daemon,
                                                             tmp_path: Path) -> None:
    """dynamic=True over five sequence lengths, blocks compiled one by one: the graph count
    is torch's own, and each length's files have that length."""
    g = torch.Generator().manual_seed(10)
    inputs = [torch.randn(2, t, 16, generator=g) for t in (5, 9, 13, 17, 21)]

    def per_block(model: nn.Module, client: dumpd.Client | None) -> Callable:
        if client is not None:
            dumpd.torch.attach(model, client)
        for block in model.layers:
            block.compile(dynamic=True)
        return model

    fresh_counters()
    torch.manual_seed(0)
    plain = Stack(blocks=4)
    run_steps(plain, inputs, None, per_block(plain, None))
    undumped = compiled_frames()
    fresh_counters()
    got = dumped(tmp_path, "compiled", daemon, lambda: Stack(blocks=4), per_block, inputs)
    assert compiled_frames() == undumped, (compiled_frames(), undumped)
    lengths = {k[0]: got[k].load().shape[1] for k in got
               if k[1].endswith("_head-Linear_Linear-op18") and k[2] == "output"}
    assert lengths == {0: 5, 1: 9, 2: 13, 3: 17, 4: 21}


def test_a_compiled_training_step_keeps_and_writes_its_steps_on_an_inf(
        daemon: Daemon, tmp_path: Path) -> None:
    """torch.compile of a whole training step (forward, loss, backward, SGD step), the
    flight recorder keeping 2 steps and nothing selected: an inf put in the input of step 6
    fires the recorder, which writes steps 5 and 6; their files are the eager run's."""
    g = torch.Generator().manual_seed(11)
    inputs = [torch.randn(4, 16, generator=g) for _ in range(8)]
    inputs[6][1, 3] = float("inf")

    def run(label: str, compiled: bool) -> Dict[tuple, object]:
        (tmp_path / label).mkdir()
        path = make_config(tmp_path / label, iteration="none", saved_data="full")
        cfg = json.loads(path.read_text())
        cfg["flight_recorder"] = {"steps": 2, "after_steps": 0}
        path.write_text(json.dumps(cfg))
        client = dumpd.Client(str(path), socket=daemon.socket)
        torch.manual_seed(0)
        model = Stack(blocks=2)
        dumpd.torch.attach(model, client)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def train_step(x: torch.Tensor) -> torch.Tensor:
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        step_fn = torch.compile(train_step) if compiled else train_step
        for step in dumpd.torch.steps(client, range(len(inputs))):
            step_fn(inputs[step])
        client.close()
        root = tmp_path / label / "dump"
        [t] = [json.loads(x) for x in
               (root / "rank_0/.dump_metadata/triggers.jsonl").read_text().splitlines()]
        assert t["kind"] == "inf" and t["iteration"] == 6, t
        assert t["op"] == "Default/layers-ModuleList/0-MLPBlock/norm-LayerNorm/LayerNorm-op3", t
        assert t["tensor"] == "input 0", t
        assert t["iterations_written"] == [5, 6], t
        return index_files(dump_files(root))

    fresh_counters()
    got = run("compiled", True)
    expected = run("eager", False)
    assert {k[0] for k in got} == {5, 6}
    assert_same_tree(expected, got, rtol=1e-4, atol=1e-5)


def test_dump_calls_move_past_the_pointwise_ops_after_them() -> None:
    """The joint-graph pass (dumpd/torch/_sink_pass.py): BatchNorm -> dump -> ReLU -> dump
    -> convolution becomes BatchNorm -> ReLU -> dump -> dump -> convolution, the dump calls
    in their order and each still reading its values, nothing moved past the convolution."""
    from dumpd.torch import _sink_pass

    aten = torch.ops.aten
    with_effects = torch.ops.higher_order.with_effects
    dump = torch.ops.dumpd.dump.default
    import operator

    g = torch.fx.Graph()
    token, site, x, w = (g.placeholder(n) for n in ("token", "site", "x", "w"))
    bn = g.call_function(aten.mul.Tensor, (x, 2.0))  # stands for the module's output
    d1 = g.call_function(with_effects, (token, dump, site, [x], [bn], []))
    t1 = g.call_function(operator.getitem, (d1, 0))
    relu = g.call_function(aten.relu.default, (bn,))
    d2 = g.call_function(with_effects, (t1, dump, site, [bn], [relu], []))
    t2 = g.call_function(operator.getitem, (d2, 0))
    conv = g.call_function(aten.convolution.default,
                           (relu, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1))
    g.output((t2, conv))
    assert _sink_pass.sink_dump_calls(g) == 1
    order = [n for n in g.nodes if n.op == "call_function"]
    assert order == [bn, relu, d1, t1, d2, t2, conv], order
    g.lint()  # every node after what it reads


def saved_bool_tensors(model: nn.Module, client: dumpd.Client | None) -> List[str]:
    """Trains `model` one compiled step and returns the bool tensors its compiled forward
    hands to the backward (read from the forward graph inductor receives)."""
    found: List[str] = []

    def look(graph: torch.fx.Graph) -> None:
        out = next(n for n in graph.nodes if n.op == "output")
        if any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes):
            return  # the backward graph
        for value in out.args[0]:
            val = getattr(value, "meta", {}).get("val")
            if isinstance(val, torch.Tensor) and val.dtype == torch.bool:
                found.append(value.name)

    if client is not None:
        dumpd.torch.attach(model, client)
        dumpd.torch.step(client, 0)
    with torch._inductor.config.patch(post_grad_custom_pre_pass=look):
        torch.compile(model)(torch.randn(4, 3, 16, 16)).sum().backward()
    return found


class ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1, self.r1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.c2, self.b2, self.r2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.r2(self.b2(self.c2(self.pool(self.r1(self.b1(self.c1(x)))))))


def test_dump_points_leave_the_training_graph_split_as_torch_splits_it(
        daemon: Daemon, tmp_path: Path) -> None:
    """Conv -> BatchNorm -> ReLU compiled for training: with the dump points the forward
    saves for the backward what it saves without them. Before the joint-graph pass it saved
    each ReLU's mask as a bool tensor (written a byte at a time on the CPU)."""
    fresh_counters()
    plain = saved_bool_tensors(ConvBn(), None)
    fresh_counters()
    client = dumpd.Client(str(make_config(tmp_path, iteration="none")), socket=daemon.socket)
    dumped = saved_bool_tensors(ConvBn(), client)
    client.close()
    assert dumped == plain, (dumped, plain)
