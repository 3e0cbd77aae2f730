"""Statistics inside a compiled graph: for a job that writes nothing but statistics
(``Client.statistics_only``), a traced dump point computes each tensor's statistics with
torch ops where the tensor is made, and only those rows (10 float64 values a tensor) leave
the graph, through ``dumpd::dump_statistics``. Inductor fuses the reductions with the
tensor's producer, so a module output that nothing else keeps is not written to memory for
dumpd's sake, and no tensor crosses the ring: 96 bytes do.

The row (``dumpd.Statistics``): the counts of NaN, -inf, +inf, zero, negative and positive
elements, max and min with NaN left out (as the device kernel and the host rule do), and the
plain sums of the values and of their squares, in float64 in the order inductor's reduction
takes them. statistic.csv's avg is sum / count and l2norm sqrt(sum_squares), as for device
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


def row(t: torch.Tensor) -> torch.Tensor:
    """`t`'s statistics as 10 float64 values (dumpd.Statistics's order), as torch ops."""
    x = t.detach().to(torch.float64)
    nan = torch.isnan(x)
    inf = float("inf")
    parts = [nan.sum(), (x == -inf).sum(), (x == inf).sum(), (x == 0).sum(), (x < 0).sum(),
             (x > 0).sum()]
    values = [torch.where(nan, -inf, x).amax(), torch.where(nan, inf, x).amin(), x.sum(),
              (x * x).sum()]
    return torch.stack([p.to(torch.float64) for p in parts] + values)


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
