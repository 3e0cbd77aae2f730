"""The replica digest of CUDA tensors (issue 51): dumpd's kernel (eager) and the torch-op
digest (compiled, or forced) give dumpd.fingerprint's digest of the same bytes, for every
element size, lengths around the kernel's 32-byte blocks, and tensors at addresses that are
not 16-byte aligned (the kernel's byte path); and digesting makes no host synchronisation
(CUDA's sync debug mode set to "error" while it runs).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dumpd  # noqa: E402
import dumpd.torch  # noqa: E402
from dumpd.torch import _digest  # noqa: E402

pytestmark = pytest.mark.conditional  # needs a CUDA GPU: conftest.py skips every test otherwise

M64 = (1 << 64) - 1
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.bool]


def host_digest(t: torch.Tensor) -> int:
    c = t.detach().cpu().contiguous()
    return dumpd.fingerprint(c.reshape(-1).view(torch.uint8).numpy())


def random_cuda(dtype, n, seed):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (n * torch.empty((), dtype=dtype).element_size(),),
                        dtype=torch.uint8, generator=g)
    if dtype is torch.bool:
        raw = raw % 2
    return raw.view(dtype).cuda()


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "torch-ops"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 7, 8, 9, 31, 32, 33, 1000, 1 << 20])
def test_the_device_digest_is_the_host_digest(kernel, dtype, n, monkeypatch):
    if not kernel:
        monkeypatch.setitem(_digest._KERNEL, "cuda", False)
    t = random_cuda(dtype, n, seed=n)
    d = dumpd.torch.digest(t)
    assert d.device == t.device and d.dtype is torch.int64
    assert int(d) & M64 == host_digest(t)


def test_an_unaligned_view_takes_the_byte_path_with_the_same_digest():
    base = random_cuda(torch.int8, 4099, seed=3)
    view = base[3:]
    assert view.data_ptr() % 16 != 0
    assert int(dumpd.torch.digest(view)) & M64 == host_digest(view)


def test_digesting_makes_no_host_synchronisation():
    tensors = [random_cuda(torch.float32, 1 << 18, seed=s) for s in range(8)]
    dumpd.torch.digest(tensors[0])  # first use: the scratch is allocated
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        digests = torch.stack([dumpd.torch.digest(t) for t in tensors])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert [int(d) & M64 for d in digests.cpu()] == [host_digest(t) for t in tensors]


def test_a_replica_check_over_one_rank_digests_on_the_device(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "store"), rank=0,
                            world_size=1)
    try:
        model = torch.nn.Linear(64, 64).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        class Reports:
            def __init__(self):
                self.replica_every = None

            def report_replica_mismatch(self, *args):
                raise AssertionError(f"one rank cannot differ from itself: {args}")

        check = dumpd.torch.check_replicas(model, opt, Reports())
        for _ in range(3):
            model(torch.randn(8, 64, device="cuda")).sum().backward()
            opt.step()
            opt.zero_grad()
        check.remove()
        assert check.mismatches == [] and check.stopped is None
    finally:
        dist.destroy_process_group()
