"""What the torch.compile tests share: the skip under a torch without the dump point,
dynamo's counters, and comparing a compiled run's tree with the eager one's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dumpd.torch import _compiled


def require_compile() -> None:
    """Skips the calling test module under a torch without torch.compile and custom ops
    with effects (Debian's 1.13), saying where it runs."""
    if _compiled.UNAVAILABLE is not None or not hasattr(torch, "compile"):
        pytest.skip(f"no torch.compile dump point: "
                    f"{_compiled.UNAVAILABLE or 'no torch.compile'} "
                    "(run under the torch 2 environment: scripts/test-torch2)",
                    allow_module_level=True)


def counters():
    from torch._dynamo.utils import counters as dynamo_counters
    return dynamo_counters


def fresh_counters() -> None:
    torch._dynamo.reset()
    counters().clear()


def compiled_frames() -> int:
    """Graphs dynamo compiled since fresh_counters()."""
    return counters()["stats"]["unique_graphs"]


def assert_same_tree(expected: dict, got: dict, rtol: float, atol: float) -> None:
    """The same files (index_files keys), each with the same dtype, shape and values."""
    assert expected and sorted(got) == sorted(expected), sorted(set(expected) ^ set(got))[:10]
    for key, f in expected.items():
        a, b = f.load(), got[key].load()
        assert a.dtype == b.dtype and a.shape == b.shape, key
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, err_msg=str(key))


class CNN(nn.Module):
    """Conv2d, ReLU, MaxPool2d, Flatten, Linear: compiled, their values are bit-identical to
    eager's (test_torch_compile.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flat(self.pool(self.act(self.conv(x)))))
