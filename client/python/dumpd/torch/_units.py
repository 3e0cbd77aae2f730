"""Modules dumped as a unit, and the check that names hooked modules that never ran.

attach() hooks leaf modules. Some modules hold leaves they never call: they use the leaves'
weights in a functional call instead. ``nn.MultiheadAttention`` computes its output
projection with ``out_proj``'s weight inside ``F.multi_head_attention_forward``, and
``nn.TransformerEncoderLayer``'s inference fast path runs the whole layer as one kernel. A
hook on such a leaf never fires, and without more the module's output is never dumped.

A *unit* is such a module: a forward pre-hook notes how many dump points have fired so far
(the session's ``fired``), and a forward hook dumps the unit's own inputs and outputs as one
op when none of its hooked modules fired in between. Units are the torch.nn classes of
UNIT_CLASSES (every torch.nn class that holds a submodule it may not call) and what
``attach(units=...)`` names. A unit is named as a leaf would be:
``Default/attn-MultiheadAttention/MultiheadAttention-op3``.

Under ``torch.compile`` both hooks emit a dumpd::dump op (dumpd.torch._compiled) and the
decision is taken when the ops run, in program order: nothing is guarded.

The check: until the first step mark after something was dumped (dumpd.torch.step/steps),
the session collects the names that fired. At that mark, attach()'s hooked modules that never
fired, and were not covered by a unit, are named in one RuntimeWarning.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Set

import torch

if TYPE_CHECKING:
    from dumpd.torch._session import _Session

# torch.nn classes that hold submodules their forward may not call (checked for every torch.nn
# class with submodules in tests/python/test_torch_units.py): MultiheadAttention and
# LinearCrossEntropyLoss use their Linear's weight in a functional call; TransformerEncoderLayer
# runs as one kernel in inference (torch 1.13 even with hooks attached; later torch turns that
# fast path off for a module with hooks).
UNIT_CLASSES = tuple(c for c in (getattr(torch.nn, n, None) for n in (
    "MultiheadAttention", "TransformerEncoderLayer", "LinearCrossEntropyLoss"))
    if c is not None)

# Nested unit calls that raised before their forward hook: kept marks are bounded.
_MAX_OPEN_CALLS = 64


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


def unit_paths(modules: Dict[str, torch.nn.Module], leaves: Iterable[str],
               extra: Iterable[Any]) -> List[str]:
    """Paths of the non-leaf modules to dump as units: instances of UNIT_CLASSES and of any
    class in `extra`, and the module paths `extra` names. Raises ValueError for a path that
    names no module or a leaf (a leaf is dumped anyway)."""
    classes = tuple(UNIT_CLASSES) + tuple(e for e in extra if isinstance(e, type))
    named = [e for e in extra if not isinstance(e, type)]
    leaf_set = set(leaves)
    for path in named:
        if not isinstance(path, str) or path not in modules:
            raise ValueError(f"units: {path!r} is not the path of a module of the model "
                             "(paths as named_modules() gives them, e.g. \"layers.0.attn\")")
        if path in leaf_set:
            raise ValueError(f"units: {path!r} is a leaf module; leaves are dumped anyway")
    return [path for path, module in modules.items()
            if path not in leaf_set and (path in named or isinstance(module, classes))]


class FiredCheck:
    """What the session collects until the check: the names of the ops that fired."""

    __slots__ = ("ran", "names", "done")

    def __init__(self, names: Dict[str, str]) -> None:
        self.ran: Set[str] = set()
        self.names = names  # module path -> full name, the forward ops attach() hooked
        self.done = False

    def at_step_mark(self, session: "_Session") -> None:
        """Called at each step mark until it has warned once (or found nothing to say)."""
        if self.done or session.fired == 0:
            return  # nothing dumped yet: the model has not run since attach()
        self.done = True
        session.check = None
        never = [path or "(the model)" for path, name in self.names.items()
                 if name not in self.ran]
        if never:
            shown = ", ".join(never[:8]) + (f" and {len(never) - 8} more"
                                            if len(never) > 8 else "")
            warnings.warn(
                f"dumpd: {len(never)} hooked module(s) never ran during the first step: "
                f"{shown}. Nothing is dumped for them. If a parent module uses their weights "
                "itself instead of calling them, pass its path or class in "
                "attach(..., units=[...]) to dump that parent's inputs and outputs",
                RuntimeWarning, stacklevel=3)
