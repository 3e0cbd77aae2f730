"""What attach() returns in every integration: the hooks it placed, the names it gave, and the
session's error; ``remove()`` takes the hooks off."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import dumpd


class AttachHandle:
    """What attach() returns: ``remove()`` takes every hook off the model.

    ``names`` maps each hooked module's (Cell's) path to its full op name;
    ``gradient_names`` likewise for the backward ops (empty unless backward=True).
    ``error`` is the DaemonError that stopped dumping under ``errors="warn"`` (else None).
    Also a context manager: hooks are removed when the ``with`` block ends.
    """

    def __init__(self, hooks: List[Any], names: Dict[str, str],
                 gradient_names: Dict[str, str], session: Any,
                 on_remove: Callable[[], None] | None = None) -> None:
        self._hooks = hooks
        self._session = session
        self._on_remove = on_remove
        self.names = names
        self.gradient_names = gradient_names

    @property
    def error(self) -> dumpd.DaemonError | None:
        return self._session.error

    def remove(self) -> None:
        """Removes all hooks (idempotent)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._session.check = None  # a detached model's first step is nothing to warn about
        if self._on_remove is not None:
            self._on_remove()
            self._on_remove = None

    def __enter__(self) -> "AttachHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()
