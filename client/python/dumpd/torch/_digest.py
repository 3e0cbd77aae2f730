"""The replica digest of a tensor (:func:`dumpd.fingerprint`'s rule, docs/replicas.md)
computed where the tensor is: on a CUDA device no byte crosses to the host and nothing waits
for the device (the result is a 0-dim int64 tensor on the tensor's device). In eager mode a
CUDA tensor takes one launch of dumpd's kernel (client/device_fingerprint.cu); under
``torch.compile``, or where that kernel cannot be used, torch operations compute it, which
trace into the graph (no graph break; inductor fuses them into one reduction).

The rule reads the bytes as little-endian 32-bit words w_i weighted by k_i and sums
w_i * k_i mod 2^64. Summing per *element* instead gives the same sum: an element of e bytes
at byte offset o is the part of word o // 4 that starts at bit 8 * (o % 4), so it
contributes value * (k_{o//4} << 8 * (o % 4)); an 8-byte element is two words. No padding
and no byte view is needed (a partial last word is zero-padded by definition), only a view
as the integer type of the element's size. Sums and products are int64 arithmetic, which
wraps mod 2^64 on every torch backend; the tests hold the result to the C++ digest bit for
bit.
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch

# base/fingerprint.h: the weights' bases and steps, the length constant, splitmix64's
# multipliers.
BASE = (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1, 0xD3A2646D, 0xFD7046C5,
        0xB55A4F09)
STEP = (0x2545F492, 0x61C88646, 0x7FEB352E, 0x846CA68C, 0x94D049BA, 0xBF58476C, 0x3C6EF372,
        0xDAA66D2A)
LENGTH = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
_MASK32 = 0xFFFFFFFF
# Eager mode sums this many elements at a time, so that a large tensor needs a few tensors of
# this size as scratch (int64 products and weights), not 8 bytes of it per element.
CHUNK = 1 << 22

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# The CUDA kernel's scratch (two int64 it leaves zero), one pair per device and stream.
_SCRATCH: Dict[Tuple[int, int], torch.Tensor] = {}
_KERNEL: Dict[str, bool] = {}
_TABLES: Dict[Tuple[str, int], Tuple[torch.Tensor, torch.Tensor]] = {}


def _signed(x: int) -> int:
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= (1 << 63) else x


def _tables(device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    key = (device.type, device.index if device.index is not None else -1)
    t = _TABLES.get(key)
    if t is None:
        t = (torch.tensor(BASE, dtype=torch.int64, device=device),
             torch.tensor(STEP, dtype=torch.int64, device=device))
        if not _compiling():
            _TABLES[key] = t
    return t


def _compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return bool(compiler.is_compiling())
    dynamo = getattr(torch, "_dynamo", None)
    return bool(dynamo is not None and dynamo.is_compiling())


def _kernel_usable() -> bool:
    usable = _KERNEL.get("cuda")
    if usable is None:
        from dumpd import cuda_unavailable_reason
        usable = _KERNEL["cuda"] = cuda_unavailable_reason() is None
    return usable


def _kernel_digest(t: torch.Tensor) -> torch.Tensor:
    """One launch of dumpd's digest kernel on the current stream (client/device_fingerprint.cu)."""
    from dumpd._dumpd import _device_digest
    stream = torch.cuda.current_stream(t.device)
    key = (t.device.index, stream.cuda_stream)
    scratch = _SCRATCH.get(key)
    if scratch is None:
        scratch = _SCRATCH[key] = torch.zeros(2, dtype=torch.int64, device=t.device)
    out = torch.empty((), dtype=torch.int64, device=t.device)
    _device_digest(t.data_ptr(), t.numel() * t.element_size(), out.data_ptr(),
                   scratch.data_ptr(), t.device.index, stream.cuda_stream)
    return out


def _weights(words: torch.Tensor, base: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """k_i of word indices `words` (int64), as int64 holding the unsigned 32-bit value."""
    lane = words % 8
    return (base[lane] + (words // 8) * step[lane]) & _MASK32


def _sum(flat: torch.Tensor, first: int, size: int, base: torch.Tensor,
         step: torch.Tensor) -> torch.Tensor:
    """The weighted sum of elements [first, first + len(flat)) of `size` bytes each, `flat`
    viewed as the integer type of that size."""
    u = flat.to(torch.int64)
    if size < 8:
        u = u & ((1 << (8 * size)) - 1)
    n = u.numel()
    index = torch.arange(first, first + n, dtype=torch.int64, device=u.device)
    if size == 8:
        lo = u & _MASK32
        hi = (u >> 32) & _MASK32
        return (lo * _weights(2 * index, base, step)).sum() + \
            (hi * _weights(2 * index + 1, base, step)).sum()
    if size == 4:
        return (u * _weights(index, base, step)).sum()
    per_word = 4 // size  # 2 or 4 elements a word
    shift = (index % per_word) * (8 * size)
    return (u * (_weights(index // per_word, base, step) << shift)).sum()


def _mix(x: torch.Tensor) -> torch.Tensor:
    # splitmix64's finaliser; >> on int64 is arithmetic, so the shifted-in bits are masked.
    x = x ^ ((x >> 30) & ((1 << 34) - 1))
    x = x * _signed(MIX1)
    x = x ^ ((x >> 27) & ((1 << 37) - 1))
    x = x * _signed(MIX2)
    return x ^ ((x >> 31) & ((1 << 33) - 1))


def digest(t: torch.Tensor) -> torch.Tensor:
    """The replica digest of `t`'s bytes in C order, as a 0-dim int64 tensor on `t`'s device
    (the digest's 64 bits as a signed value: ``int(d) & (2**64 - 1)`` equals
    ``dumpd.fingerprint`` of the same bytes). Asynchronous on a device; traceable by
    ``torch.compile``."""
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if not t.is_contiguous():
        t = t.contiguous()
    if t.device.type == "cuda" and not _compiling() and _kernel_usable():
        return _kernel_digest(t)  # one kernel, whatever the dtype: the same bytes
    size = t.element_size()
    if size not in _SAME_SIZE_INT:
        raise TypeError(f"dumpd.torch.digest: no replica digest for {t.dtype} "
                        f"({size}-byte elements)")
    flat = t.reshape(-1)
    if flat.dtype is torch.bool:
        flat = flat.to(torch.uint8)
    elif flat.dtype is not _SAME_SIZE_INT[size]:
        flat = flat.view(_SAME_SIZE_INT[size])
    base, step = _tables(t.device)
    n = flat.numel()
    if _compiling() or n <= CHUNK:
        s = _sum(flat, 0, size, base, step)
    else:
        s = torch.zeros((), dtype=torch.int64, device=t.device)
        for first in range(0, n, CHUNK):
            s = s + _sum(flat[first:first + CHUNK], first, size, base, step)
    nbytes = n * size
    return _mix(s ^ _signed(nbytes * LENGTH))


__all__ = ["digest"]
