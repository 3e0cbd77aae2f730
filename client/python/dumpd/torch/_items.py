"""Turning tensors into dump_op items: dtype tables, dump-once identities, CUDA tensors as
dumpd.DeviceArray, nested outputs flattened one slot per leaf."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

import torch

import dumpd
from dumpd._core.identities import fresh
from dumpd._core.items import ItemsBase
from dumpd.torch._graph_stats import Row

if TYPE_CHECKING:
    from dumpd._core.session import Session as _Session

# Tensor dtypes .numpy() represents exactly, as dumpd dtypes of the same name.
_NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)


# dumpd dtype names of the tensor dtypes a CUDA tensor can be dumped as (bytes as they are).
_DEVICE_DTYPES = {
    torch.bool: "bool",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
}
for _name in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        _DEVICE_DTYPES[getattr(torch, _name)] = _name


def _current_stream_object(device: int) -> int:
    return torch.cuda.current_stream(device).cuda_stream


# The current stream's handle without making a torch.cuda.Stream object each op (what
# Inductor's generated code calls); the public API where this torch lacks it.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _current_stream_object)


class _Links(threading.local):
    """Dump once in a compiled graph: identities by the graph's own value numbers
    (dumpd.torch._graph_pass), whichever attach() session each dump point belongs to. A
    number's first dump point in a graph run takes a new identity; its later ones in that run
    take the same. A thread runs one graph at a time and the first precedes the later ones in
    program order, so a later one never sees another run's identity."""

    def __init__(self) -> None:
        self.values: Dict[int, int] = {}

    def resolve(self, keys: Any) -> List[int | None]:
        out: List[int | None] = []
        values = self.values
        for k in keys:
            if k > 0:
                identity = fresh()
                values[k] = identity
                out.append(identity)
            elif k < 0:
                out.append(values.get(-k))
            else:
                out.append(None)
        return out


LINKS = _Links()


def _whole_view_base(t: torch.Tensor) -> torch.Tensor:
    """The tensor `t` is a view of when it views all of it, as it is (same offset, shape and
    strides: the views backward=True hands the next module), else `t`. Such a view holds the
    base's bytes and shares its version counter, so it is the same tensor to dump once."""
    base = t._base
    if (base is not None and base.shape == t.shape and base.stride() == t.stride() and
            base.storage_offset() == t.storage_offset() and base.dtype == t.dtype):
        return base
    return t


class _Items(ItemsBase):
    """Builds one op's dump items. CUDA tensors become dumpd.DeviceArray (no host copy);
    temporaries made for them (contiguous copies) stay referenced in `keep` until the op is
    enqueued, so the allocator cannot hand their memory to another tensor of the same op."""

    __slots__ = ("session", "keep", "cuda_device", "dump_once")

    def __init__(self, session: "_Session", dump_once: bool = True) -> None:
        self.session = session
        self.dump_once = dump_once
        self.keep: List[Any] = []
        self.cuda_device: int | None = None

    def item(self, value: Any, linked: int | None = None) -> Any:
        """One dump_op item for `value`: an array, an (array, dtype[, identity]) tuple, or
        None. `linked`: the identity a compiled graph's value numbers gave it."""
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            # A compiled graph's statistics row (dumpd.torch._graph_stats), else nothing.
            return value.item() if isinstance(value, Row) else None
        if value.is_cuda and value.dtype in _DEVICE_DTYPES and self.session.cuda_on_device():
            item = self.device_item(value)  # the hot path: no detach(), no torch.device
        elif value.is_quantized or value.device.type == "meta":
            return None
        else:
            item = self.plain_item(value)
        if item is None or (value.is_cuda and not value.is_contiguous()):
            return item  # a contiguous copy is new each time: nothing to repeat
        if self.dump_once:
            base = _whole_view_base(value)
            try:
                version = base._version
            except RuntimeError:  # inference tensors have no version counter
                return item
            identity = self.session.identities.of(base, version)
        elif linked is not None:
            identity = linked
        else:
            return item
        if isinstance(item, tuple):
            return (item[0], item[1], identity)
        return (item, None, identity)

    def plain_item(self, value: torch.Tensor) -> Any:
        t = value.detach()
        if (t.device.type == "cuda" and t.dtype in _DEVICE_DTYPES and
                self.session.cuda_on_device()):
            return self.device_item(t)
        if t.dtype not in _NUMPY_DTYPES and t.dtype != torch.bfloat16:
            return None
        if t.device.type != "cpu":
            t = t.cpu()  # synchronous host copy (non-CUDA devices, cuda_fallback="host")
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        if t.dtype == torch.bfloat16:
            # Same element size, so this is a view (no copy) of the raw bfloat16 bits.
            return (t.view(torch.int16).numpy(), "bfloat16")
        # Shares memory; a non-contiguous view is made contiguous by the client (one copy).
        return t.numpy()

    def device_item(self, t: torch.Tensor) -> Any:
        if t.is_conj() or t.is_neg() or not t.is_contiguous():
            # A new tensor, made on the current stream like the snapshot after it, and kept
            # alive until then.
            t = t.detach().resolve_conj().resolve_neg().contiguous()
            self.keep.append(t)
        device = t.get_device()
        if self.cuda_device is None:
            self.cuda_device = device
        return dumpd.DeviceArray(t.data_ptr(), t.shape, _DEVICE_DTYPES[t.dtype], device)

    def stream(self) -> int | None:
        """The current stream of the op's CUDA device: the snapshot is enqueued on it."""
        if self.cuda_device is None:
            return None
        return _raw_stream(self.cuda_device)

