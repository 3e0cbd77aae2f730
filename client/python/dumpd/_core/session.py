"""What the hooks of one attach() share (the client, the error policy, dump once), and the
error policy's helpers that step()/steps() use too.

A framework adapter subclasses Session with `make_items`: how one op's values become dump
items (dumpd.torch._items, dumpd.mindspore._items)."""

from __future__ import annotations

import warnings
from typing import Any

import dumpd
from dumpd._core.gate import Gate
from dumpd._core.identities import Identities


def check_errors(errors: str) -> None:
    if errors not in ("raise", "warn"):
        raise ValueError(f'errors must be "raise" or "warn", got {errors!r}')


def warn(error: Exception, what: str) -> None:
    warnings.warn(f"dumpd: {what}: {error}", RuntimeWarning, stacklevel=3)


class Session:
    """What the hooks of one attach() share: the client and the error policy."""

    __slots__ = ("client", "errors", "error", "identities", "fired", "check", "gate",
                 "statistics_only", "__weakref__")

    def __init__(self, client: dumpd.Client, errors: str) -> None:
        self.client = client
        self.identities = Identities()
        self.errors = errors
        self.error: Exception | None = None  # what stopped dumping (errors="warn")
        # Dump points that fired (selected or not): units compare it around their calls.
        self.fired = 0
        # Until the first step mark after a dump: the names that fired (checks.FiredCheck).
        self.check: Any = None
        # Whether traced graphs carry the dump points this step (dumpd._core.gate).
        self.gate = Gate()
        # The job writes only statistics (a traced graph may compute them itself).
        self.statistics_only = client.statistics_only

    def make_items(self, dump_once: bool) -> Any:
        """The adapter's item builder for one op: `.of(values)`, `.of_linked(values, ids)`,
        `.stream()`."""
        raise NotImplementedError

    def dump(self, op_type: str, name: str, inputs: Any, outputs: Any, want_in: bool,
             want_out: bool, dump_once: bool = True, linked: Any = None) -> None:
        """Dumps the selected sides of one op execution (nothing is touched otherwise).
        dump_once=False: no tensor is matched by object and version (tensors from a compiled
        graph, whose buffers are reused unversioned); `linked` then gives each slot of the
        flat `inputs` and `outputs` lists its identity from the graph's value numbers, or
        None."""
        self.fired += 1
        if self.check is not None:
            self.check.ran.add(name)
        if self.error is not None:
            return
        if linked is not None and len(linked) != len(inputs) + len(outputs):
            linked = None
        client = self.client
        try:
            want_in = want_in and client.should_dump(name, "input")
            want_out = want_out and client.should_dump(name, "output")
            if want_in or want_out:
                items = self.make_items(dump_once)
                if linked is not None:
                    n = len(inputs)
                    ins = items.of_linked(inputs, linked[:n]) if want_in else ()
                    outs = items.of_linked(outputs, linked[n:]) if want_out else ()
                else:
                    ins = items.of(inputs) if want_in else ()
                    outs = items.of(outputs) if want_out else ()
                client.dump_op(op_type, name, inputs=ins, outputs=outs, stream=items.stream())
        except (dumpd.DaemonError, ValueError) as e:
            # ValueError: what the client refuses to take (a record larger than the ring, a
            # CUDA op's tensors on two devices); under "warn" it stops dumping too, since
            # training must go on.
            if self.errors == "raise":
                raise
            self.error = e
            warn(e, "dumping stopped, training goes on")

    def begin_unit(self, unit: Any) -> None:
        """A unit's call starts (its forward pre-hook): dumpd._core.checks.Unit."""
        unit.begin(self.fired)

    def end_unit(self, unit: Any, inputs: Any, outputs: Any, want_in: bool, want_out: bool,
                 dump_once: bool = True, linked: Any = None) -> None:
        """A unit's call ends: dumped as one op when no dump point fired during it."""
        if not unit.untouched(self.fired):
            return
        if self.check is not None:
            self.check.ran.update(unit.covered)
        self.dump(unit.op_type, unit.name, inputs, outputs, want_in, want_out, dump_once,
                  linked)
