"""dumpd.torch.digest: the replica digest in torch operations, the way CUDA tensors and
compiled graphs get it. It must equal dumpd.fingerprint (the C++ digest) of the same bytes,
bit for bit, for every dtype's element size, every length (partial last words, eager mode's
chunk boundaries), views and complex tensors; and under torch.compile it traces into the
graph with no break and no recompile when the values change.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed for this interpreter")

import dumpd  # noqa: E402
import dumpd.torch  # noqa: E402
from dumpd.torch import _digest  # noqa: E402

M64 = (1 << 64) - 1
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.complex64]


def random_tensor(dtype: torch.dtype, n: int, seed: int) -> torch.Tensor:
    size = torch.empty((), dtype=dtype).element_size()
    raw = np.random.default_rng(seed).integers(0, 256, n * size, dtype=np.uint8)
    if n == 0:
        return torch.empty(0, dtype=dtype)
    return torch.from_numpy(raw).view(dtype)


def host_digest(t: torch.Tensor) -> int:
    """dumpd.fingerprint of the tensor's bytes in C order."""
    c = t.contiguous()
    if c.is_complex():
        c = torch.view_as_real(c)
    return dumpd.fingerprint(c.reshape(-1).view(torch.uint8).numpy())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 9, 63, 1000, 1001, 2999, 4097])
def test_it_equals_the_host_digest(dtype, n, monkeypatch):
    monkeypatch.setattr(_digest, "CHUNK", 1000)  # n > 1000: summed in chunks
    t = random_tensor(dtype, n, seed=n)
    got = dumpd.torch.digest(t)
    assert got.dtype is torch.int64 and got.dim() == 0 and got.device == t.device
    assert int(got) & M64 == host_digest(t)


def test_bool_and_views_are_digested_in_c_order():
    b = torch.from_numpy(np.random.default_rng(3).integers(0, 2, 77).astype(bool))
    assert int(dumpd.torch.digest(b)) & M64 == dumpd.fingerprint(b.numpy().view(np.uint8))
    m = random_tensor(torch.float32, 12 * 7, seed=4).reshape(12, 7)
    view = m.t()[2:5]
    assert not view.is_contiguous()
    assert int(dumpd.torch.digest(view)) & M64 == host_digest(view)


def test_every_single_bit_flip_changes_it():
    t = random_tensor(torch.bfloat16, 40, seed=5)
    bits = t.view(torch.int16)
    seen = {int(dumpd.torch.digest(t))}
    for i in range(bits.numel()):
        for b in range(16):
            flipped = bits.clone()
            flipped[i] ^= (1 << b) if b < 15 else -(1 << 15)
            seen.add(int(dumpd.torch.digest(flipped.view(torch.bfloat16))))
    assert len(seen) == 1 + 40 * 16


def test_a_large_tensor_is_summed_in_chunks_to_the_same_digest():
    t = random_tensor(torch.float32, (1 << 22) + 12345, seed=6)
    assert int(dumpd.torch.digest(t)) & M64 == host_digest(t)


@pytest.mark.conditional  # torch.compile: torch 2 only
def test_under_torch_compile_no_graph_break_no_recompile():
    if not hasattr(torch, "compile"):
        pytest.skip(f"torch {torch.__version__} has no torch.compile "
                    "(run under the torch 2 environment: scripts/test-torch2)")
    import importlib

    dynamo = importlib.import_module("torch._dynamo")
    dynamo.reset()
    compiled = torch.compile(lambda x, y: dumpd.torch.digest(x * y), fullgraph=True)
    y = torch.full((33, 17), 3.0)
    with dynamo.config.patch(error_on_recompile=True):
        for seed in range(3):  # new values, the same graph
            x = random_tensor(torch.float32, 33 * 17, seed=seed).reshape(33, 17)
            x = torch.nan_to_num(x)
            got = compiled(x, y)
            assert int(got) & M64 == host_digest(x * y)
