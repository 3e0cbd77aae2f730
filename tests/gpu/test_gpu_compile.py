"""torch.compile on CUDA tensors (issue 41, item 4): the dumpd::dump custom op inside graphs
inductor compiles for the GPU. A compiled CNN dumps the tree the eager one dumps, in one
graph with no graph break; the values dump points share go once (the inductor pass of
dumpd/torch/_graph_pass.py), as hard links; gradients too; and a dumped compiled step makes
no host synchronisation.

DUMPD_GPU_TEST_DEVICE=cpu runs the same tests on the CPU (with tests/python/conftest.py), to
check the tests themselves where there is no GPU; the sync check is then left out.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import dumpd  # noqa: E402
import dumpd.torch  # noqa: E402
from dumpd.torch import _compiled  # noqa: E402

from conftest import daemon, dump_files, index_files, make_config, sanitize  # noqa: E402,F401

pytestmark = pytest.mark.conditional  # needs a CUDA GPU: conftest.py skips every test otherwise

if _compiled.UNAVAILABLE is not None or not hasattr(torch, "compile"):
    pytest.skip(f"no compiled dump point: {_compiled.UNAVAILABLE or 'no torch.compile'}",
                allow_module_level=True)

from torch._dynamo.utils import counters  # noqa: E402

DEVICE = os.environ.get("DUMPD_GPU_TEST_DEVICE", "cuda")


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(self.flat(self.pool(self.act(self.conv(x)))))


CHAIN = ["conv", "act", "pool", "flat", "fc"]


def train(tmp_path, daemon, compiled, backward=False, steps=3, no_sync_from=None):
    """`steps` SGD steps of a CNN on DEVICE, every module dumped (gradients too with
    backward); steps from `no_sync_from` on run with CUDA's sync debug mode set to "error".
    Returns (flush counts, file index, op names, gradient op names, dynamo graphs)."""
    tmp_path.mkdir()
    torch.manual_seed(0)
    model = CNN().to(DEVICE)
    xs = [torch.randn(8, 3, 16, 16, device=DEVICE) for _ in range(steps)]
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    handle = dumpd.torch.attach(model, client, backward=backward)
    torch._dynamo.reset()
    counters.clear()
    forward = torch.compile(model, fullgraph=True) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step, x in enumerate(xs):
        dumpd.torch.step(client, step)
        strict = no_sync_from is not None and step >= no_sync_from and DEVICE == "cuda"
        if strict:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        try:
            loss = forward(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        finally:
            if strict:
                torch.cuda.set_sync_debug_mode("default")
    counts = client.flush()
    client.close()
    files = index_files(dump_files(tmp_path / "dump"))
    return counts, files, handle.names, handle.gradient_names, counters["stats"]["unique_graphs"]


def assert_same_tree(eager, compiled):
    assert eager and sorted(compiled) == sorted(eager)
    for key, f in eager.items():
        a, b = f.load(), compiled[key].load()
        assert a.dtype == b.dtype and a.shape == b.shape, key
        # cuDNN/cuBLAS are the same calls compiled or not; inductor's own kernels (bias add,
        # ReLU, pooling) may round differently in the last place.
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=str(key))


def linked(a, b):
    return a.path.stat().st_ino == b.path.stat().st_ino


def test_a_compiled_cuda_cnn_dumps_the_eager_tree_in_one_graph(daemon, tmp_path):
    _, eager, _, _, _ = train(tmp_path / "eager", daemon, compiled=False)
    counts, compiled, names, _, graphs = train(tmp_path / "compiled", daemon, compiled=True,
                                               no_sync_from=1)
    assert graphs == 1, "the dump points broke the graph or recompiled it"
    assert counts["tensors_failed"] == 0 and counts["tensors_dropped"] == 0
    assert_same_tree(eager, compiled)
    for step in range(3):
        for before, after in zip(CHAIN, CHAIN[1:]):
            out = compiled[(step, sanitize(names[before]), "output", 0)]
            inp = compiled[(step, sanitize(names[after]), "input", 0)]
            assert linked(out, inp), f"step {step}: {after}'s input is not {before}'s output"
    assert counts["tensors_linked"] == 3 * (len(CHAIN) - 1)


def test_compiled_cuda_gradients_are_the_eager_ones(daemon, tmp_path):
    _, eager, _, _, _ = train(tmp_path / "eager", daemon, compiled=False, backward=True)
    counts, compiled, _, gradient_names, graphs = train(
        tmp_path / "compiled", daemon, compiled=True, backward=True, no_sync_from=1)
    assert graphs == 1
    assert counts["tensors_failed"] == 0
    assert_same_tree(eager, compiled)
    fc_grad = sanitize(gradient_names["fc"])
    assert (2, fc_grad, "input", 0) in compiled and (2, fc_grad, "output", 0) in compiled
