"""step()/steps(): marking iterations, with the same error policy as attach(), and the losses
they hand the flight recorder (its "loss_spike" trigger).

A loss is a float, or anything ``float()`` takes (a one-element tensor of any framework). A
loss that lives on a device would cost the step a synchronisation to read: an adapter
registers a *deferral* for it (``defer(is_deferred, copy)``: dumpd.torch does for CUDA
tensors), whose copy starts now and is read once an event says it arrived."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple, TypeVar

import dumpd
from dumpd._core import gate as _gate
from dumpd._core.session import check_errors as _check_errors
from dumpd._core.session import warn as _warn

_T = TypeVar("_T")


def _guarded(errors: str, what: str, call: Any, *args: Any) -> None:
    try:
        call(*args)
    except dumpd.DaemonError as e:
        if errors == "raise":
            raise
        _warn(e, what)


class StepScope:
    """Returned by :func:`step`. The iteration is already marked when it is created; used
    in a ``with`` block it can also flush when the block ends (``flush=True``)."""

    def __init__(self, client: dumpd.Client, iteration: int, flush: bool, errors: str) -> None:
        self.client = client
        self.iteration = iteration
        self._flush = flush
        self._errors = errors

    def __enter__(self) -> int:
        return self.iteration

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._flush and exc_type is None:
            _guarded(self._errors, "flush failed", self.client.flush)


# (is_deferred(loss), copy(loss) -> (host value for float(), event with query() and
# synchronize())): losses on a device, registered by the adapters.
_deferrals: List[Tuple[Callable[[Any], bool], Callable[[Any], Tuple[Any, Any]]]] = []


def defer(is_deferred: Callable[[Any], bool], copy: Callable[[Any], Tuple[Any, Any]]) -> None:
    """Losses for which `is_deferred` is true are copied by `copy` (which starts the copy and
    returns the host value and an event) and reported once the event says the copy is done."""
    if (is_deferred, copy) not in _deferrals:
        _deferrals.append((is_deferred, copy))


def _is_deferred(loss: Any) -> bool:
    return any(is_deferred(loss) for is_deferred, _ in _deferrals)


def _as_float(loss: Any) -> float:
    try:
        return float(loss)
    except TypeError:
        item = getattr(loss, "item", None)
        if item is None:
            raise TypeError(f"a loss must be a number or a one-element tensor, not "
                            f"{type(loss).__name__}") from None
        return float(item())


class _PendingLosses:
    """Device losses on their way to the host: copied without a wait and reported once their
    copy has completed (an event query, never a wait), at the latest at the step mark after
    the next one. So a device loss never synchronises the step."""

    _MAX = 8

    def __init__(self) -> None:
        self.items: list[tuple[Any, Any]] = []  # (host value, event): _deferrals

    def add(self, loss: Any) -> None:
        for is_deferred, copy in _deferrals:
            if is_deferred(loss):
                self.items.append(copy(loss))
                return
        raise TypeError(f"no deferral takes a loss of type {type(loss).__name__}")

    def ready(self, wait_oldest: bool) -> list[float]:
        out: list[float] = []
        while self.items:
            host, event = self.items[0]
            if not event.query():
                if not (wait_oldest or len(self.items) > self._MAX):
                    break
                event.synchronize()  # the copy was queued a whole step ago
            out.append(float(host))
            self.items.pop(0)
            wait_oldest = False
        return out

    def drain(self) -> list[float]:
        """Every pending loss, waiting for the copies still under way (for the end of a
        loop, after its last step: no step is waiting then)."""
        out: list[float] = []
        for host, event in self.items:
            event.synchronize()
            out.append(float(host))
        self.items.clear()
        return out


# Per client, and gone with it: a new client never inherits another's losses (an id() key
# could be reused by a later client).
_pending: "weakref.WeakKeyDictionary[dumpd.Client, _PendingLosses]" = weakref.WeakKeyDictionary()


# Per client: the attach() sessions whose first-step check (_units.FiredCheck) waits for a mark.
_observers: "weakref.WeakKeyDictionary[dumpd.Client, list]" = weakref.WeakKeyDictionary()


def observe(client: dumpd.Client, session: Any) -> None:
    """step()/steps() give `session`'s check each step mark of `client` until it is done."""
    _observers.setdefault(client, []).append(weakref.ref(session))


def _at_step_mark(client: dumpd.Client) -> None:
    sessions = _observers.get(client)
    if not sessions:
        return
    for ref in list(sessions):
        session = ref()
        if session is not None and session.check is not None:
            session.check.at_step_mark(session)
        if session is None or session.check is None:
            sessions.remove(ref)


def _report_loss(client: dumpd.Client, loss: Any) -> None:
    pending = _pending.setdefault(client, _PendingLosses())
    if isinstance(loss, (int, float)):
        values = [float(loss)]
    elif _is_deferred(loss):
        values = pending.ready(wait_oldest=len(pending.items) >= 2)
        pending.add(loss)
        for v in values:
            client.report_loss(v)
        return
    else:
        values = [_as_float(loss)]  # a host tensor: no device to wait for
    for v in pending.ready(wait_oldest=True) + values:
        client.report_loss(v)


def _report_pending_losses(client: dumpd.Client) -> int:
    """Reports the device losses still on their way, waiting for their copies; returns how
    many it reported."""
    pending = _pending.get(client)
    values = pending.drain() if pending is not None else []
    for v in values:
        client.report_loss(v)
    return len(values)


def step(client: dumpd.Client, iteration: int, graph_id: int = 0, *, flush: bool = False,
         errors: str = "raise", loss: Any = None) -> StepScope:
    """Marks iteration `iteration` (of graph `graph_id`) for `client`.

    Works as a plain call (``step(client, i)``) or as a block::

        with step(client, i, flush=True):
            train_one_step()          # dumped under iteration i; flushed when the block ends

    loss: the loss of the step that just ended, for the flight recorder's "loss_spike"
    trigger (a float, or a one-element tensor; a device tensor whose adapter defers it (CUDA) is copied without synchronising
    and reported once it has arrived, by the next step mark at the latest).

    errors="warn" turns a DaemonError (session gone) into a RuntimeWarning.
    """
    _check_errors(errors)
    if loss is not None:
        _guarded(errors, "cannot report the loss", _report_loss, client, loss)
    _at_step_mark(client)
    _guarded(errors, "cannot mark the step", client.set_step, iteration, graph_id)
    _gate.after_mark(client)
    return StepScope(client, iteration, flush, errors)


def steps(client: dumpd.Client, iterable: Iterable[_T], *, start: int = 0, graph_id: int = 0,
          flush: bool = False, errors: str = "raise",
          loss: Optional[Callable[[], Any]] = None) -> Iterator[_T]:
    """Yields the items of `iterable`, marking iteration start, start+1, ... before each.

    ``for batch in steps(client, loader): ...`` dumps batch k's step as
    iteration k (so ``for i in steps(client, range(n))`` has i == iteration). With
    flush=True, each step is flushed before the next item is taken. errors="warn" turns a
    DaemonError (session gone) into a RuntimeWarning and stops marking steps; a
    DaemonTimeout (the ring full for the daemon's block_timeout_ms) warns and the next step
    is marked again.

    loss: a callable taking no arguments, called after each step's body (before the step is
    flushed and the next one marked, and once after the last item when the loop runs to its
    end). It returns the loss of the step that just ran, as step(loss=) takes it (a float or
    a one-element tensor; a CUDA tensor is reported without synchronising the step), or None
    for no loss. The losses feed the flight recorder's "loss_spike" trigger::

        last = None
        for batch in steps(client, loader, loss=lambda: last):
            last = loss_fn(model(batch.x), batch.y)
            ...

    When the loop runs to its end, device losses still on their way are waited for and
    reported (one wait, after the last step). A loop left early (break, an exception)
    reports nothing more.
    """
    _check_errors(errors)
    if loss is not None and not callable(loss):
        raise TypeError("steps(loss=) takes a callable returning the loss of the step that "
                        f"just ran, not {type(loss).__name__}; to pass a value, use "
                        "step(client, i, loss=value) or report_loss")
    return _steps(client, iterable, start, graph_id, flush, errors, loss)


def _gives_up(error: dumpd.DaemonError, what: str) -> bool:
    """steps(errors="warn") after `error`: warns, and says whether to stop marking steps. A
    DaemonTimeout passes (the ring stayed full for the daemon's block_timeout_ms): the next
    step is marked again, since a client left at the old iteration would file every later
    op under it."""
    if isinstance(error, dumpd.DaemonTimeout):
        _warn(error, what.removesuffix(" any more") + " (timed out; tried again next step)")
        return False
    _warn(error, what)
    return True


def _steps(client: dumpd.Client, iterable: Iterable[_T], start: int, graph_id: int,
           flush: bool, errors: str, loss: Optional[Callable[[], Any]]) -> Iterator[_T]:
    failed = False
    for iteration, item in enumerate(iterable, start):
        _at_step_mark(client)
        if not failed:
            try:
                client.set_step(iteration, graph_id)
                _gate.after_mark(client)
            except dumpd.DaemonError as e:
                if errors == "raise":
                    raise
                failed = _gives_up(e, "cannot mark steps any more")
        yield item
        if loss is not None and not failed:
            # Before the flush and the next mark: a spike fires in the step it belongs to,
            # and the flush covers what it writes.
            value = loss()
            if value is not None:
                try:
                    _report_loss(client, value)
                except dumpd.DaemonError as e:
                    if errors == "raise":
                        raise
                    failed = _gives_up(e, "cannot report the loss")
        if flush and not failed:
            try:
                client.flush()
            except dumpd.DaemonError as e:
                if errors == "raise":
                    raise
                failed = _gives_up(e, "flush failed")
    if loss is not None and not failed:
        try:
            if _report_pending_losses(client) and flush:
                client.flush()  # what a spike among them wrote, as for any step
        except dumpd.DaemonError as e:
            if errors == "raise":
                raise
            _warn(e, "cannot report the loss")
