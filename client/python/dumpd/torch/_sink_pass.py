"""Dump points that do not change how AOTAutograd splits a training graph: a joint-graph pass.

A dump point reads a module's output right after the module, in program order (its ordered
effect keeps it there among the dump points). To AOTAutograd's min-cut partitioner it is an
op that cannot be fused. One of the partitioner's rules ("used far apart") bans recomputing,
in the backward, a pointwise op that comes *after* the first unfusible use of its input. So
``BatchNorm2d -> dump -> ReLU`` makes ReLU unrecomputable: its backward mask is computed in
the forward and saved, and on the CPU inductor writes that bool mask one byte at a time. In a
Conv+BatchNorm CNN compiled for training that was most of the cost of dumping nothing
(docs/performance.md, row 11 for the channels-last Conv+BatchNorm CNN).

This pass, run on the joint graph before the partition (inductor's
``joint_custom_pre_pass``), moves each dump call down past the ops that directly follow it
and that the partitioner counts fusible (its own table; pointwise and view ops where this
torch has none), so that a module's fusible successor comes before the dump point, as in
the graph without dumpd. Dump calls keep their order
among themselves (the effect token chains them, and a move never passes another dump call),
and a dump point still reads the very values it read: the graph is functional, so moving a
reader later changes no value. Nothing is moved past an op that is not fusible (a
convolution, a matmul, another dump call): the values a dump point holds stay alive for no
longer than one run of fusible ops. Measured: a channels-last Conv+BatchNorm CNN's compiled
step with nothing selected went from 1.57x to 1.05x of the undumped step.
"""

from __future__ import annotations

import operator
from typing import Any, List

import torch

from dumpd.torch import _graph_pass


def _partitioner_ops() -> Any:
    """The partitioner's own table of fusible and view ops, where this torch has one."""
    try:
        from torch._functorch.partitioners import get_default_op_list
        return get_default_op_list()
    except (ImportError, AttributeError):
        return None


_OPS = _partitioner_ops()


def _passable(node: torch.fx.Node) -> bool:
    """A node a dump call may move past: one the partitioner counts fusible or a view (else a
    pointwise or view aten op), or a getitem."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if _OPS is not None:
        return bool(_OPS.is_fusible(node) or _OPS.is_view(node))
    return torch.Tag.pointwise in target.tags or bool(getattr(target, "is_view", False))


def sink_dump_calls(graph: torch.fx.Graph) -> int:
    """Moves every dump call of `graph` (with its getitems) past the fusible and view ops
    that follow it; returns how many moved."""
    moved = 0
    for call in _graph_pass._dump_calls(graph):
        own: List[torch.fx.Node] = [u for u in call.users if u.target is operator.getitem]
        mine = set(own) | {call}
        cursor = call.next
        while cursor in mine:
            cursor = cursor.next
        stop = cursor
        while (stop.op != "output" and _passable(stop)
               and not any(isinstance(a, torch.fx.Node) and a in mine
                           for a in stop.all_input_nodes)):
            stop = stop.next
            while stop in mine:
                stop = stop.next
        if stop is cursor:
            continue
        for node in [call] + own:
            stop.prepend(node)
        moved += 1
    return moved


if _graph_pass.CustomGraphPass is not None:

    class SinkDumpCalls(_graph_pass.CustomGraphPass):
        """sink_dump_calls as an inductor joint-graph custom pass."""

        def __call__(self, graph: torch.fx.Graph) -> None:
            sink_dump_calls(graph)

        def uuid(self) -> Any:
            hash_files = getattr(torch._inductor.custom_graph_pass, "get_hash_for_files", None)
            if hash_files is None:
                return None
            return hash_files((__file__, _graph_pass.__file__))

    PASS: Any = SinkDumpCalls()
else:
    PASS = None
