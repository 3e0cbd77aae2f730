"""step()/steps(): marking iterations, with the same error policy as attach()."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, TypeVar

import dumpd
from dumpd.torch._session import _check_errors, _warn

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


def step(client: dumpd.Client, iteration: int, graph_id: int = 0, *, flush: bool = False,
         errors: str = "raise") -> StepScope:
    """Marks iteration `iteration` (of graph `graph_id`) for `client`.

    Works as a plain call (``dumpd.torch.step(client, i)``) or as a block::

        with dumpd.torch.step(client, i, flush=True):
            train_one_step()          # dumped under iteration i; flushed when the block ends

    errors="warn" turns a DaemonError (session gone) into a RuntimeWarning.
    """
    _check_errors(errors)
    _guarded(errors, "cannot mark the step", client.set_step, iteration, graph_id)
    return StepScope(client, iteration, flush, errors)


def steps(client: dumpd.Client, iterable: Iterable[_T], *, start: int = 0, graph_id: int = 0,
          flush: bool = False, errors: str = "raise") -> Iterator[_T]:
    """Yields the items of `iterable`, marking iteration start, start+1, ... before each.

    ``for batch in dumpd.torch.steps(client, loader): ...`` dumps batch k's step as
    iteration k (so ``for i in steps(client, range(n))`` has i == iteration). With
    flush=True, each step is flushed before the next item is taken. errors="warn" turns a
    DaemonError (session gone) into a RuntimeWarning and stops marking steps.
    """
    _check_errors(errors)
    failed = False
    for iteration, item in enumerate(iterable, start):
        if not failed:
            try:
                client.set_step(iteration, graph_id)
            except dumpd.DaemonError as e:
                if errors == "raise":
                    raise
                failed = True
                _warn(e, "cannot mark steps any more")
        yield item
        if flush and not failed:
            try:
                client.flush()
            except dumpd.DaemonError as e:
                if errors == "raise":
                    raise
                failed = True
                _warn(e, "flush failed")

