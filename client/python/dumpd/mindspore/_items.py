"""Turning MindSpore tensors into dump_op items: host arrays (``Tensor.asnumpy()``, which on
the CPU shares the tensor's memory, so the client's copy into the ring is the only one),
bfloat16 as its raw bits, dump-once identities by (tensor, version), nested outputs flattened
one slot per leaf."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from mindspore import Tensor

from dumpd._core.items import ItemsBase

if TYPE_CHECKING:
    from dumpd._core.session import Session


def _array(t: Tensor) -> Any:
    """The dump item of a tensor without its identity: an array, or (array, dtype)."""
    a = t.asnumpy()
    if a.dtype.name == "bfloat16":  # MindSpore's numpy bfloat16: send its bits
        return (a.view(np.int16), "bfloat16")
    if a.dtype.kind not in "biufc":
        return None  # strings, objects: nothing a dump file holds
    return a


class Items(ItemsBase):
    """Builds one op's dump items."""

    __slots__ = ("session", "dump_once")

    def __init__(self, session: "Session", dump_once: bool = True) -> None:
        self.session = session
        self.dump_once = dump_once

    def item(self, value: Any, linked: Any = None) -> Any:
        if isinstance(value, np.ndarray):
            # A GRAPH_MODE tap's array (dumpd.mindspore._graph): valid for the call only,
            # copied by the client before it returns; nothing to recognise later.
            return value if value.dtype.kind in "biufc" else None
        if not isinstance(value, Tensor):
            return None  # not a tensor: its slot stays reserved
        try:
            item = _array(value)
        except (TypeError, RuntimeError, ValueError):
            return None  # a dtype numpy cannot hold here (bfloat16 without ml_dtypes)
        if item is None or not self.dump_once:
            return item
        version = getattr(value, "_version", None)
        if version is None:
            return item
        identity = self.session.identities.of(value, version)
        if identity is None:
            return item
        if isinstance(item, tuple):
            return (item[0], item[1], identity)
        return (item, None, identity)
