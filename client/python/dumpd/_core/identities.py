"""Dump once: one identity per (object, version). Within a step, the very tensor dumped again
(a module's output as the next module's input), unchanged since, gets the identity it had,
and the client sends a reference instead of its bytes. An entry goes away with its object
(weakref), so a new tensor can never inherit an identity."""

from __future__ import annotations

import itertools
import weakref
from typing import Any, Dict, Tuple

# Every identity of the process comes from here: two attach() sessions on one client (or a
# compiled graph's links beside them) can never name two tensors with one number.
NUMBERS = itertools.count(1)


def fresh() -> int:
    """A new identity, never given before in this process."""
    return next(NUMBERS)


class _Ref(weakref.ref):
    """A weak reference that knows its Identities key (no closure per tensor)."""

    __slots__ = ("key",)


class Identities:
    """The identities one session gave, keyed by object; `version` is whatever the framework
    counts changes with (torch's version counter), so a changed tensor is a new one."""

    __slots__ = ("entries", "gone", "__weakref__")

    def __init__(self) -> None:
        self.entries: Dict[int, Tuple[Any, Any, int]] = {}
        entries = self.entries

        def gone(ref: Any) -> None:
            current = entries.get(ref.key)
            if current is not None and current[0] is ref:
                del entries[ref.key]
        self.gone = gone

    def of(self, obj: Any, version: Any) -> int | None:
        """`obj`'s identity at `version`: the one it had if unchanged, else a new one. None
        when `obj` cannot be weakly referenced (it cannot be recognised later)."""
        key = id(obj)
        entry = self.entries.get(key)
        if entry is not None and entry[0]() is obj and entry[1] == version:
            return entry[2]
        identity = fresh()
        try:
            ref = _Ref(obj, self.gone)
        except TypeError:
            return None
        ref.key = key
        self.entries[key] = (ref, version, identity)
        return identity

    def fresh(self) -> int:
        return fresh()
