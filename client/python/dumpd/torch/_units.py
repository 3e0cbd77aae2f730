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

from typing import Any, Dict, Iterable, List

import torch

from dumpd._core.checks import FiredCheck, Unit  # noqa: F401  (the torch names of both)

# torch.nn classes that hold submodules their forward may not call (checked for every torch.nn
# class with submodules in tests/python/test_torch_units.py): MultiheadAttention and
# LinearCrossEntropyLoss use their Linear's weight in a functional call; TransformerEncoderLayer
# runs as one kernel in inference (torch 1.13 even with hooks attached; later torch turns that
# fast path off for a module with hooks).
UNIT_CLASSES = tuple(c for c in (getattr(torch.nn, n, None) for n in (
    "MultiheadAttention", "TransformerEncoderLayer", "LinearCrossEntropyLoss"))
    if c is not None)

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
