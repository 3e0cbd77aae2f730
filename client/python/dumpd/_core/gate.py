"""Which graph a compiled step runs: with its dump points, or the model's own graph.

Framework-neutral: a flag per attach() session, set at each step mark. dumpd.torch's traced
hooks read it under torch.compile, as follows. A dump point in a compiled graph costs more than its call: ``dumpd::dump`` needs every value it
reads as a real tensor, so inductor cannot fuse a module into the next one, and a step that
dumps nothing still pays for those buffers (docs/performance.md, row 11). So the hooks, while
dynamo traces them, read their session's ``Gate``: armed, they emit the dump points; disarmed,
they emit nothing and the graph is the one the model compiles to without dumpd. Dynamo guards
on the flag's value, so there are two graphs at most per compiled frame, each compiled the
first time it is needed and then chosen at run time by that guard: changing the selection
never compiles again.

The step marks (``step()``/``steps()``) set the flag after the mark: armed when the client
says the new step can dump anything at all (``Client.step_selected``: the iteration, the
device, ``dumpctl control``, the flight recorder). Two rules keep compiling where it already
happens, at the start: the gate stays armed until a dump point ran once (so the armed graph
is compiled in the first step, not at the first selected one, hours in), and a session whose
dumping stopped (``errors="warn"``) is disarmed for good. Without step marks the gate stays
armed: every step asks the client at each dump point, as before.
"""

from __future__ import annotations

import weakref
from typing import Any

import dumpd


class Gate:
    """One flag a traced hook reads (dynamo guards on it). `listener`, when set, is called
    with the new value each time a step mark changes it (dumpd.mindspore takes its hooks off
    the Cells for steps that dump nothing, and puts them back)."""

    __slots__ = ("armed", "listener", "applied")

    def __init__(self) -> None:
        self.armed = True
        self.listener: Any = None
        self.applied = True

    def changed(self) -> None:
        """Tells the listener when `armed` differs from what it was last told."""
        if self.listener is not None and self.armed != self.applied:
            self.listener(self.armed)
            self.applied = self.armed  # after: a listener that raised is told again next mark


# Per client: the attach() sessions whose gates its step marks set.
_sessions: "weakref.WeakKeyDictionary[dumpd.Client, list]" = weakref.WeakKeyDictionary()


def register(client: dumpd.Client, session: Any) -> None:
    """`client`'s step marks set `session.gate` from now on (while the session lives)."""
    _sessions.setdefault(client, []).append(weakref.ref(session))


def after_mark(client: dumpd.Client) -> None:
    """Sets the gates of `client`'s sessions for the step just marked."""
    refs = _sessions.get(client)
    if not refs:
        return
    try:
        selected = bool(client.step_selected)
    except dumpd.DaemonError:
        return  # the client is closed: nothing changes, the next dump call says so
    for ref in list(refs):
        session = ref()
        if session is None:
            refs.remove(ref)
            continue
        if session.error is not None:
            session.gate.armed = False
        elif session.fired:
            session.gate.armed = selected
        session.gate.changed()
