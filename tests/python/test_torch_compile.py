"""dumpd.torch inside torch.compile (issue 40): the dump point is the dumpd::dump custom op
(dumpd/torch/_compiled.py), so a compiled model dumps the tree the eager model dumps, with no
graph break and no recompile when the iteration, the selection or the recorder changes.

Runs under a torch with torch.compile and custom ops with effects (the torch 2 environment of
tests/reference/pins.txt: scripts/test-torch2); under Debian's torch 1.13 it is skipped and
says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import pytest
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import Daemon, dump_files, dumpctl_control, index_files, make_config

pytestmark = pytest.mark.conditional

from compile_support import require_compile  # noqa: E402

require_compile()

from compile_support import CNN, assert_same_tree, compiled_frames, counters, fresh_counters  # noqa: E402,E501
from dumpd.torch import _compiled  # noqa: E402

torch.set_num_threads(1)


class Block(nn.Module):
    """A pre-norm transformer block: attention (its softmax in the block's own forward) and
    an MLP, each leaf module an op."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.gelu = nn.GELU()
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.down(self.gelu(self.up(self.norm2(x))))


def train(model: nn.Module, client: dumpd.Client, inputs: List[torch.Tensor],
          compile_options: Dict | None, at: Callable[[int, nn.Module], None] = lambda s, m: None,
          backward: bool = False) -> None:
    """One training step per input (forward, backward, SGD), iteration i at step i; the
    forward compiled with `compile_options` (None: eager)."""
    dumpd.torch.attach(model, client, backward=backward)
    run = torch.compile(model, **compile_options) if compile_options is not None else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step, x in enumerate(inputs):
        dumpd.torch.step(client, step)
        at(step, model)
        loss = run(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    client.close()


def trees(tmp_path: Path, make_model: Callable[[], nn.Module], inputs: List[torch.Tensor],
          daemon: Daemon, compile_options: Dict, backward: bool = False, **config) -> tuple:
    """(eager tree, compiled tree) of the same model, weights and inputs."""
    out = []
    for label, options in (("eager", None), ("compiled", compile_options)):
        (tmp_path / label).mkdir()
        torch.manual_seed(0)
        model = make_model()
        client = dumpd.Client(str(make_config(tmp_path / label, **config)),
                              socket=daemon.socket)
        train(model, client, inputs, options, backward=backward)
        out.append(index_files(dump_files(tmp_path / label / "dump")))
    return tuple(out)








def test_a_compiled_cnn_dumps_the_eager_tree_in_one_graph(daemon: Daemon,
                                                          tmp_path: Path) -> None:
    fresh_counters()
    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(4, 3, 16, 16, generator=g) for _ in range(3)]
    eager, compiled = trees(tmp_path, CNN, inputs, daemon, {"fullgraph": True})
    assert not counters()["graph_break"], dict(counters()["graph_break"])
    assert compiled_frames() == 1  # one graph for three steps: no recompile
    # Every leaf module, both sides, every step: the eager tree by name.
    assert {k[1] for k in eager} == {f"Default_{p}-{c}_{c}-op{i}" for i, p, c in (
        (1, "conv", "Conv2d"), (2, "act", "ReLU"), (3, "pool", "MaxPool2d"),
        (4, "flat", "Flatten"), (5, "fc", "Linear"))}
    assert len(eager) == 3 * 5 * 2
    # Convolution and matmul are the same library calls compiled as eager, ReLU, max pooling
    # and Flatten exact: every file is bit-identical, three training steps in.
    assert_same_tree(eager, compiled, rtol=0, atol=0)


def test_a_compiled_transformer_block_with_dynamic_shapes(daemon: Daemon,
                                                          tmp_path: Path) -> None:
    """fullgraph and dynamic=True: three sequence lengths, one graph. Inductor generates its
    own kernels for LayerNorm, GELU and the additions (reductions in another order): values
    within float32 rounding of the eager ones (about 5e-7 here)."""
    fresh_counters()
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(2, t, 32, generator=g) for t in (8, 12, 16)]
    eager, compiled = trees(tmp_path, Block, inputs, daemon,
                            {"fullgraph": True, "dynamic": True})
    assert not counters()["graph_break"], dict(counters()["graph_break"])
    assert compiled_frames() == 1
    assert len(eager) == 3 * 7 * 2
    assert {f.load().shape[1] for k, f in compiled.items() if k[1].endswith("_gelu-GELU_GELU-op6")
            } == {8, 12, 16}
    assert_same_tree(eager, compiled, rtol=1e-4, atol=1e-5)


def test_gradients_of_a_compiled_model_are_the_eager_ones(daemon: Daemon,
                                                          tmp_path: Path) -> None:
    """backward=True with fullgraph: AOTAutograd traces the gradient dump points into the
    compiled backward; the tree (forward and Gradients/ ops) is the eager one."""
    fresh_counters()
    g = torch.Generator().manual_seed(5)
    inputs = [torch.randn(4, 3, 16, 16, generator=g) for _ in range(2)]
    eager, compiled = trees(tmp_path, CNN, inputs, daemon, {"fullgraph": True}, backward=True)
    assert not counters()["graph_break"], dict(counters()["graph_break"])
    assert compiled_frames() == 1
    grads = {k for k in eager if k[1].startswith("Gradients_")}
    # Each module's gradient at its output, and at its input but for conv's (the data
    # needs none): 5 + 4 a step.
    assert len(grads) == 2 * 9, sorted(grads)
    assert ("Gradients_Default_fc-Linear_gradLinear_LinearGrad-op5" in {k[1] for k in grads})
    assert_same_tree(eager, compiled, rtol=1e-4, atol=1e-6)


def test_an_instance_attached_after_its_class_was_compiled_unhooked_dumps(
        daemon: Daemon, tmp_path: Path) -> None:
    """dynamo by default does not guard on a module's hooks while it has none: a second
    instance of a class compiled without hooks would reuse that graph and dump nothing.
    attach() turns that shortcut off, so the hooked instance compiles its own graph."""
    fresh_counters()
    x = torch.randn(2, 3, 16, 16)
    # torch's default, whatever attach() calls before this one did.
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=True):
        torch.compile(CNN(), fullgraph=True)(x)  # the class's forward, compiled unhooked
        model = CNN()
        client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
        dumpd.torch.attach(model, client)
        dumpd.torch.step(client, 0)
        torch.compile(model, fullgraph=True)(x)
        client.close()
    assert len(dump_files(tmp_path / "dump")) == 5 * 2


def test_a_compiled_model_dropped_without_remove_releases_its_client(
        daemon: Daemon, tmp_path: Path) -> None:
    """The dump points of a compiled graph name their hook by number; the table behind the
    numbers refers to the hooks' sites weakly, so dropping the model (and its compiled
    wrapper, without remove()) frees the session and the client, and the graph compiled for
    it, if dynamo kept one, dumps nothing."""
    import gc
    import weakref

    model = CNN()
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    dumpd.torch.attach(model, client, backward=True)
    compiled = torch.compile(model, fullgraph=True)
    dumpd.torch.step(client, 0)
    compiled(torch.randn(2, 3, 16, 16)).sum().backward()
    client.close()
    freed = weakref.ref(client)
    numbers = set(_compiled._sites.keys())
    assert numbers, "attach() registered no dump point"
    del model, compiled, client
    gc.collect()
    assert freed() is None, [type(r).__name__ for r in gc.get_referrers(freed())]
    assert not numbers & set(_compiled._sites.keys())
    # Five ops forward and backward, each side one file, but the image needs no gradient.
    assert len(dump_files(tmp_path / "dump")) == 5 * 2 * 2 - 1


def test_compiling_a_whole_step_adds_no_graph_break(daemon: Daemon, tmp_path: Path) -> None:
    """torch.compile(step_fn): the step's own breaks (backward, the optimizer) are torch's;
    dumpd adds none, and the forward's dumps are the eager ones."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 16, 16, generator=g)
    breaks = {}
    for label in ("plain", "dumped"):
        fresh_counters()
        torch.manual_seed(0)
        model = CNN()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        client = None
        if label == "dumped":
            client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
            dumpd.torch.attach(model, client)

        @torch.compile
        def step_fn(x: torch.Tensor) -> torch.Tensor:
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        for step in range(2):
            if client is not None:
                dumpd.torch.step(client, step)
            step_fn(x)
        if client is not None:
            client.close()
        breaks[label] = sum(counters()["graph_break"].values())
    assert breaks["dumped"] == breaks["plain"], breaks
    files = index_files(dump_files(tmp_path / "dump"))
    assert {k[0] for k in files} == {0, 1} and len(files) == 2 * 5 * 2


def test_selection_changes_and_the_recorder_never_recompile(daemon: Daemon,
                                                            tmp_path: Path) -> None:
    """20 compiled steps: nothing selected at first, `dumpctl control` selects 8-9 at step
    5, a NaN put in the weights at step 15 fires the flight recorder (2 steps kept, no limit
    on triggers): the tree holds 8, 9 and 14 on, and the compiled graph is the one of step
    0."""
    fresh_counters()
    path = make_config(tmp_path, iteration="none", saved_data="full")
    cfg = json.loads(path.read_text())
    # max_triggers 0: the recorder goes on after its trigger. With the default (1) it stops,
    # the client's steps stop being selected, and the gate rightly compiles the graph without
    # dump points once the client hears of it: a recompile, late enough to race the end.
    cfg["flight_recorder"] = {"steps": 2, "after_steps": 0, "max_triggers": 0}
    path.write_text(json.dumps(cfg))
    client = dumpd.Client(str(path), socket=daemon.socket)
    g = torch.Generator().manual_seed(4)
    inputs = [torch.randn(4, 3, 16, 16, generator=g) for _ in range(20)]

    def at(step: int, model: nn.Module) -> None:
        if step == 5:
            dumpctl_control(daemon.socket, "--iteration", "8-9")
        if step == 15:
            with torch.no_grad():
                model.fc.weight[2, 7] = float("nan")  # conv, act, pool, flat stay finite

    torch.manual_seed(0)
    with torch._dynamo.config.patch(error_on_recompile=True):
        train(CNN(), client, inputs, {"fullgraph": True}, at)
    assert not counters()["graph_break"], dict(counters()["graph_break"])
    assert compiled_frames() == 1
    root = tmp_path / "dump"
    # The NaN stays in the weights: every step from 15 on triggers, and keeps its own.
    t, *later = [json.loads(x) for x in
                 (root / "rank_0/.dump_metadata/triggers.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in later] == [16, 17, 18, 19]
    assert t["kind"] == "nan" and t["iteration"] == 15, t
    assert t["op"] == "Default/fc-Linear/Linear-op5" and t["tensor"] == "output 0", t
    assert t["iterations_written"] == [14, 15]
    files = dump_files(root)
    assert sorted({int(f.iteration) for f in files}) == [8, 9, 14, 15, 16, 17, 18, 19]
    [out] = [f for f in files if f.iteration == "15" and f.op_name.endswith("Linear-op5")
             and f.io == "output"]
    assert np.isnan(out.load()[:, 2]).all() and np.isfinite(out.load()[:, 3]).all()
