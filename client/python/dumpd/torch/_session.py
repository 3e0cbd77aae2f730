"""What the hooks of one attach() share (the client, the error policy, where CUDA tensors go),
and the error policy's helpers that step()/steps() use too."""

from __future__ import annotations

import warnings
from typing import Any

import dumpd
from dumpd.torch._gate import Gate
from dumpd.torch._items import _Identities, _Items


def _check_errors(errors: str) -> None:
    if errors not in ("raise", "warn"):
        raise ValueError(f'errors must be "raise" or "warn", got {errors!r}')


def _warn(error: dumpd.DaemonError, what: str) -> None:
    warnings.warn(f"dumpd: {what}: {error}", RuntimeWarning, stacklevel=3)


class _Session:
    """What the hooks of one attach() share: the client and the error policy."""

    __slots__ = ("client", "errors", "error", "cuda_mode", "identities", "fired", "check",
                 "gate", "statistics_only", "__weakref__")

    def __init__(self, client: dumpd.Client, errors: str) -> None:
        self.client = client
        self.identities = _Identities()
        self.errors = errors
        self.error: dumpd.DaemonError | None = None
        self.cuda_mode: str | None = None  # "device" or "host", decided at the first one
        # Dump points that fired (selected or not): units compare it around their calls.
        self.fired = 0
        # Until the first step mark after a dump: the names that fired (_units.FiredCheck).
        self.check: Any = None
        # Whether compiled graphs carry the dump points this step (dumpd.torch._gate).
        self.gate = Gate()
        # The job writes only statistics: compiled graphs compute them (_graph_stats), unless
        # attach(graph_statistics=False).
        self.statistics_only = client.statistics_only

    def cuda_on_device(self) -> bool:
        """True when CUDA tensors go device-to-ring; False for the host fallback. Raises
        DaemonError when CUDA cannot be used and the client did not ask for the fallback."""
        if self.cuda_mode is None:
            reason = dumpd.cuda_unavailable_reason()
            if reason is None:
                self.cuda_mode = "device"
            elif self.client.cuda_fallback == "host":
                warnings.warn(f"dumpd: {reason}; CUDA tensors are copied with tensor.cpu() "
                              "(cuda_fallback=\"host\"), which synchronises with the device",
                              RuntimeWarning, stacklevel=4)
                self.cuda_mode = "host"
            else:
                raise dumpd.DaemonError(f"{reason}. Pass cuda_fallback=\"host\" to dumpd.Client "
                                        "to copy CUDA tensors through host memory instead")
        return self.cuda_mode == "device"

    def dump(self, op_type: str, name: str, inputs: Any, outputs: Any, want_in: bool,
             want_out: bool, dump_once: bool = True, linked: Any = None) -> None:
        """Dumps the selected sides of one op execution (nothing is touched otherwise).
        dump_once=False: no tensor is matched by object and version (tensors from a compiled
        graph, whose buffers are reused unversioned); `linked` then gives each slot of the
        flat `inputs` and `outputs` lists its identity from the graph's value numbers
        (_items.LINKS), or None."""
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
                items = _Items(self, dump_once)
                if linked is not None:
                    n = len(inputs)
                    ins = items.of_linked(inputs, linked[:n]) if want_in else ()
                    outs = items.of_linked(outputs, linked[n:]) if want_out else ()
                else:
                    ins = items.of(inputs) if want_in else ()
                    outs = items.of(outputs) if want_out else ()
                client.dump_op(op_type, name, inputs=ins, outputs=outs, stream=items.stream())
        except dumpd.DaemonError as e:
            if self.errors == "raise":
                raise
            self.error = e
            _warn(e, "dumping stopped, training goes on")


    def begin_unit(self, unit: Any) -> None:
        """A unit's call starts (its forward pre-hook): dumpd.torch._units."""
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
