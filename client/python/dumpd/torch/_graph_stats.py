"""Statistics inside a compiled graph: for a job that writes nothing but statistics
(``Client.statistics_only``), a traced dump point computes each tensor's statistics with
torch ops where the tensor is made, and only those rows (10 float64 values a tensor) leave
the graph, through ``dumpd::dump_statistics``. Inductor fuses the reductions with the
tensor's producer, so a module output that nothing else keeps is not written to memory for
dumpd's sake, and no tensor crosses the ring: 96 bytes do.

The row (``dumpd.Statistics``): the counts of NaN, -inf, +inf, zero, negative and positive
elements, max and min with NaN left out (as the device kernel and the host rule do), and the
plain sums of the values and of their squares, in float64 in the order inductor's reduction
takes them (row() below). statistic.csv's avg is sum / count and l2norm sqrt(sum_squares), as for device
statistics: max, min and the counts are exact, avg and l2norm can differ from the host rule
(MindSpore's chunked sums, storage/format/chunk_sums.h) in their last digits
(docs/compatibility.md).

Only CPU tensors of a real dtype, with elements: a site with another (CUDA, whose
statistics the device pipeline computes without a sync; complex; empty) dumps as before.
"""

from __future__ import annotations

from typing import Any, List, Optional

import torch

import dumpd

# dtype codes of the graph's metadata: an index into this tuple.
_DTYPES = (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
           torch.float16, torch.bfloat16, torch.float32, torch.float64)
_NAMES = ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64")
_CODES = {d: i for i, d in enumerate(_DTYPES)}
NONE = -1  # a slot without a tensor


def takes(t: Any) -> bool:
    """True when the graph can compute `t`'s statistics (a non-tensor slot: trivially)."""
    if not isinstance(t, torch.Tensor):
        return True
    if t.device.type != "cpu" or t.layout != torch.strided or t.dtype not in _CODES:
        return False
    numel = t.numel()
    return not (isinstance(numel, int) and numel == 0)


# Counts are sums of 1.0 and 0.0, exact while every partial sum is a whole number the float
# holds: float32 up to 2^24 elements. Up to 2^26 elements two counts share one float64 sum
# (one counted as 1, the other as 2^26: at most 2^52). Larger tensors, and shapes dynamo
# keeps symbolic, take one float64 sum a count.
_FLOAT32_COUNTS = 1 << 24
_PAIR = 1 << 26


def _pair(first: torch.Tensor, second: torch.Tensor, packed: bool) -> tuple:
    """The counts of two disjoint masks."""
    if not packed:
        return (torch.where(first, 1.0, 0.0).to(torch.float64).sum(),
                torch.where(second, 1.0, 0.0).to(torch.float64).sum())
    both = torch.where(first, 1.0, torch.where(second, float(_PAIR), 0.0))
    total = both.to(torch.float64).sum()
    upper = torch.floor(total / _PAIR)
    return total - upper * _PAIR, upper


def row(t: torch.Tensor) -> torch.Tensor:
    """`t`'s statistics as 10 float64 values (dumpd.Statistics's order), as torch ops.

    Written for inductor's CPU code, which fuses them into one pass over `t` (measured on
    8 MiB tensors: bool-to-integer sums are not vectorised, float sums are, 3x apart): the
    comparisons and max/min on the tensor's own dtype, the counts as float sums (negative
    with positive and -inf with +inf sharing one sum), zeros as what the others leave, the
    value sums in float64."""
    x = t.detach()
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)
    numel = x.numel()
    static = isinstance(numel, int)
    packed = static and numel < _PAIR
    inf = float("inf")
    nan = torch.isnan(x)
    nans = torch.where(nan, 1.0, 0.0)
    nans = nans.sum() if static and numel <= _FLOAT32_COUNTS else nans.to(torch.float64).sum()
    nans = nans.to(torch.float64)
    negative, positive = _pair(x < 0, x > 0, packed)
    negative_inf, positive_inf = _pair(x == -inf, x == inf, packed)
    zero = numel - nans - negative - positive
    if x.is_floating_point():
        top, bottom = torch.where(nan, -inf, x).amax(), torch.where(nan, inf, x).amin()
    else:
        top, bottom = x.amax(), x.amin()
    wide = x.to(torch.float64)
    values = [nans, negative_inf, positive_inf, zero, negative, positive, top, bottom,
              wide.sum(), (wide * wide).sum()]
    return torch.stack([v.to(torch.float64) for v in values])


def rows(tensors: List[Optional[torch.Tensor]], meta: List[Any]) -> List[Optional[torch.Tensor]]:
    """The rows of `tensors` (None stays None); appends each slot's dtype code and shape to
    `meta` ([code, ndim, *dims], or [NONE])."""
    out: List[Optional[torch.Tensor]] = []
    for t in tensors:
        if t is None:
            meta.append(NONE)
            out.append(None)
            continue
        meta.extend([_CODES[t.dtype], t.dim(), *t.shape])
        out.append(row(t))
    return out


class Row:
    """One slot's row as the graph returned it; dumped as a dumpd.Statistics if selected."""

    __slots__ = ("values", "shape", "dtype")

    def __init__(self, values: torch.Tensor, shape: List[int], dtype: str) -> None:
        self.values = values
        self.shape = shape
        self.dtype = dtype

    def item(self) -> Any:
        return dumpd.Statistics(self.shape, self.dtype, self.values.tolist())


def decode(values: List[Optional[torch.Tensor]], meta: List[int], at: int) -> tuple:
    """(slots, next position in meta): each slot a Row, or None."""
    out: List[Optional[Row]] = []
    for v in values:
        code = meta[at]
        if code == NONE or v is None:
            at += 1
            out.append(None)
            continue
        ndim = meta[at + 1]
        out.append(Row(v, list(meta[at + 2:at + 2 + ndim]), _NAMES[code]))
        at += 2 + ndim
    return out, at
