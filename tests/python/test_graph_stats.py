"""The statistics row a compiled graph computes (dumpd/torch/_graph_stats.py), run eagerly
here against numpy: the counts exact on every path (float32 sums, two counts sharing one
float64 sum, one float64 sum a count), max and min without NaN, float64 sums; and the
decoding of the graph's metadata back into dumpd.Statistics."""

import math

import numpy as np
import pytest
import torch

import dumpd
from dumpd.torch import _graph_stats


def reference(a: np.ndarray) -> list:
    finite = a[~np.isnan(a)] if a.dtype.kind == "f" else a
    wide = a.astype(np.float64)
    # Nothing but NaN: max -inf and min inf, as the device kernel leaves them.
    top, bottom = (float(finite.max()), float(finite.min())) if finite.size else (-np.inf,
                                                                                   np.inf)
    return [float(np.isnan(wide).sum()), float((wide == -np.inf).sum()),
            float((wide == np.inf).sum()), float((wide == 0).sum()), float((wide < 0).sum()),
            float((wide > 0).sum()), top, bottom,
            float(wide.sum()), float((wide * wide).sum())]


def tensors():
    g = torch.Generator().manual_seed(52)
    special = torch.randn(3000, generator=g)
    special[[5, 77, 901]] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    special[[6, 7]] = torch.tensor([0.0, -0.0])
    return {
        "float32": special,
        "float64": torch.randn(1000, generator=g, dtype=torch.float64) * 1e6,
        "float16": (torch.randn(2048, generator=g) * 8).half(),
        "int64": torch.randint(-50, 50, (4, 333), generator=g),
        "uint8": torch.randint(0, 3, (999,), generator=g).to(torch.uint8),
        "bool": torch.randint(0, 2, (257,), generator=g).bool(),
        "nan only": torch.full((7,), float("nan")),
    }


@pytest.mark.parametrize("pair, float32", [(1 << 26, 1 << 24), (1 << 12, 1 << 10), (8, 4)],
                         ids=["packed", "packed-float64", "float64"])
@pytest.mark.parametrize("name", list(tensors()))
def test_the_row_is_numpys(name: str, pair: int, float32: int, monkeypatch) -> None:
    """Limits lowered so each size takes each path: below both, packed with float64 nan
    counts, and one float64 sum a count."""
    monkeypatch.setattr(_graph_stats, "_PAIR", pair)
    monkeypatch.setattr(_graph_stats, "_FLOAT32_COUNTS", float32)
    t = tensors()[name]
    got = _graph_stats.row(t).tolist()
    a = t.numpy() if t.dtype != torch.bfloat16 else t.float().numpy()
    want = reference(a.astype(np.float64) if a.dtype == np.float16 else a)
    assert got[:8] == want[:8], (got, want)
    assert got[8] == pytest.approx(want[8], rel=1e-12, abs=1e-9) or (
        math.isnan(got[8]) and math.isnan(want[8]))
    assert got[9] == pytest.approx(want[9], rel=1e-12) or (
        math.isnan(got[9]) and math.isnan(want[9]))


def test_metadata_decodes_into_statistics() -> None:
    a, b = torch.randn(2, 3), torch.arange(5, dtype=torch.int32)
    meta: list = []
    rows = _graph_stats.rows([a, None], meta) + _graph_stats.rows([b], meta)
    assert meta == [8, 2, 2, 3, _graph_stats.NONE, 4, 1, 5]
    ins, at = _graph_stats.decode(rows[:2], meta, 0)
    outs, end = _graph_stats.decode(rows[2:], meta, at)
    assert end == len(meta) and ins[1] is None
    first, second = ins[0].item(), outs[0].item()
    assert isinstance(first, dumpd.Statistics)
    assert (first.shape, first.dtype, first.count) == ([2, 3], "float32", 6)
    assert (second.shape, second.dtype, second.count) == ([5], "int32", 5)


def test_what_the_graph_cannot_take() -> None:
    assert _graph_stats.takes(None) and _graph_stats.takes(torch.ones(2))
    assert not _graph_stats.takes(torch.ones(0))
    assert not _graph_stats.takes(torch.ones(2, dtype=torch.complex64))
    assert not _graph_stats.takes(torch.ones(2).to_sparse())
