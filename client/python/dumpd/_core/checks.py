"""Units, and the first-step check that names hooked ops that never ran.

A *unit* is a non-leaf module dumped as one op (its own inputs and outputs) in a call where
none of the hooked modules under it fired: for modules that use their children's weights in
a functional call instead of calling them (dumpd.torch._units says which). The session's
``fired`` counter, noted when the unit's call begins and compared when it ends, tells.

The check: until the first step mark after something was dumped, the session collects the
names that fired; at that mark, the hooked ops that never fired are named in one warning.
When nothing at all fired for several marks, the integration's `idle_hint` is warned once
(a MindSpore net in GRAPH_MODE runs no Cell hook: an empty dump must never be silent).
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Iterable, List, Optional, Set

# Nested unit calls that raised before their forward hook: kept marks are bounded.
_MAX_OPEN_CALLS = 64

# Step marks with nothing fired before the idle hint is given.
IDLE_MARKS = 3


class Unit:
    """One module dumped as a unit: its op's name and the names of the hooked modules under
    it (what a unit dump covers). ``marks`` holds, per call in progress, the session's
    ``fired`` count at the call's start."""

    __slots__ = ("op_type", "name", "covered", "marks")

    def __init__(self, op_type: str, name: str, covered: Iterable[str]) -> None:
        self.op_type = op_type
        self.name = name
        self.covered = frozenset(covered)
        self.marks: List[int] = []

    def begin(self, fired: int) -> None:
        if len(self.marks) >= _MAX_OPEN_CALLS:
            del self.marks[0]
        self.marks.append(fired)

    def untouched(self, fired: int) -> bool:
        """Ends the call in progress: True when no dump point fired during it."""
        return bool(self.marks) and self.marks.pop() == fired


class FiredCheck:
    """What the session collects until the check: the names of the ops that fired.
    `names`: path -> full name of the ops attach() hooked; `what`: how the warning calls
    them ("module", "Cell"); `hint`: what the warning suggests; `idle_hint`: warned once when
    IDLE_MARKS step marks passed and no hook fired at all (None: say nothing)."""

    __slots__ = ("ran", "names", "done", "what", "hint", "idle_hint", "idle_marks")

    def __init__(self, names: Dict[str, str], what: str = "module", hint: str = "",
                 idle_hint: Optional[str] = None) -> None:
        self.ran: Set[str] = set()
        self.names = names
        self.done = False
        self.what = what
        self.hint = hint
        self.idle_hint = idle_hint
        self.idle_marks = 0

    def at_step_mark(self, session: Any) -> None:
        """Called at each step mark until it has warned once (or found nothing to say)."""
        if self.done:
            return
        if session.fired == 0:  # nothing dumped yet: the model has not run since attach()
            self.idle_marks += 1
            if self.idle_hint is not None and self.idle_marks == IDLE_MARKS:
                warnings.warn(f"dumpd: {self.idle_marks} steps were marked and no hooked "
                              f"{self.what} ran: {self.idle_hint}", RuntimeWarning,
                              stacklevel=3)
            return
        self.done = True
        session.check = None
        never = [path or "(the model)" for path, name in self.names.items()
                 if name not in self.ran]
        if never:
            shown = ", ".join(never[:8]) + (f" and {len(never) - 8} more"
                                            if len(never) > 8 else "")
            warnings.warn(
                f"dumpd: {len(never)} hooked {self.what}(s) never ran during the first step: "
                f"{shown}. Nothing is dumped for them.{' ' + self.hint if self.hint else ''}",
                RuntimeWarning, stacklevel=3)
