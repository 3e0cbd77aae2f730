"""Dump once inside a compiled graph: an inductor post-grad pass that numbers the values the
graph's dump points share.

In eager mode dump once keys a tensor by its object and version counter. In a compiled
graph that is wrong: inductor hands a later value the buffer (the very tensor object) of one
whose last use has passed, and writes it without bumping the version. So the runtime cannot
tell "the same value again" from "a new value in the same buffer". The graph can: in the
post-grad graph (functional, values in SSA form) a module's output and the next module's
input are one FX node, passed to two ``dumpd::dump`` calls.

This pass gives every value that two or more dump points of one graph take a number, and
puts it in each call's ``keys`` argument, one entry per tensor slot (inputs, then outputs):
``k > 0`` at its first dump point in graph order, ``-k`` at the later ones, 0 for a slot
with no repeat. At run time the first one takes a new dump-once identity and the later ones
reuse it (``_Session.dump``), so the client sends them as references, as in eager mode. A
value that any op of the graph mutates in place gets no number. Reinplacing, which runs
after this pass, never writes a buffer whose value a later node still reads, and every
numbered value is read by a later dump point; the client also checks that a repeat has the
first one's address, shape, strides and dtype before it sends a reference.

The numbers are per graph (the forward and the backward graph each start at 1), so the pass
depends on nothing but the graph and inductor may cache its result.
"""

from __future__ import annotations

from typing import Any, Dict, List, Set

import torch

try:
    from torch._inductor.custom_graph_pass import CustomGraphPass
except ImportError:  # torch without custom post-grad passes: nothing to install
    CustomGraphPass = None  # type: ignore[assignment,misc]


def _nodes(value: Any, out: List[torch.fx.Node]) -> List[torch.fx.Node]:
    if isinstance(value, torch.fx.Node):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _nodes(v, out)
    return out


def _mutated(graph: torch.fx.Graph) -> Set[torch.fx.Node]:
    """Nodes some op of the graph writes in place (its schema marks the argument written)."""
    written: Set[torch.fx.Node] = set()
    for node in graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None or not schema.is_mutable:
            continue
        for i, argument in enumerate(schema.arguments):
            alias = argument.alias_info
            if alias is None or not alias.is_write:
                continue
            value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
            written.update(_nodes(value, []))
    return written


def _dump_calls(graph: torch.fx.Graph) -> List[torch.fx.Node]:
    """The graph's dumpd::dump calls: with_effects(token, dumpd.dump, site, inputs, outputs,
    keys) after AOTAutograd, or dumpd.dump(site, inputs, outputs, keys) without effects."""
    dump = torch.ops.dumpd.dump.default
    with_effects = getattr(torch.ops.higher_order, "with_effects", None)
    calls = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is dump and len(node.args) == 4:
            calls.append(node)
        elif (with_effects is not None and node.target is with_effects and len(node.args) == 6
              and node.args[1] is dump):
            calls.append(node)
    return calls


def number_repeats(graph: torch.fx.Graph) -> int:
    """Fills the keys argument of every dump call in `graph`; returns how many values got a
    number."""
    calls = _dump_calls(graph)
    mutated = _mutated(graph)
    slots: List[List[Any]] = []
    uses: Dict[torch.fx.Node, int] = {}
    for call in calls:
        inputs, outputs = call.args[-3], call.args[-2]
        values = list(inputs) + list(outputs)
        slots.append(values)
        for v in set(v for v in values if isinstance(v, torch.fx.Node)):
            uses[v] = uses.get(v, 0) + 1
    numbers: Dict[torch.fx.Node, int] = {}
    for call, values in zip(calls, slots):
        keys: List[int] = []
        for v in values:
            if not isinstance(v, torch.fx.Node) or uses.get(v, 0) < 2 or v in mutated:
                keys.append(0)
            elif v in numbers:
                keys.append(-numbers[v])
            else:
                numbers[v] = len(numbers) + 1
                keys.append(numbers[v])
        if any(keys):
            call.args = call.args[:-1] + (keys,)
    return len(numbers)


if CustomGraphPass is not None:

    class NumberRepeats(CustomGraphPass):
        """number_repeats as an inductor post-grad custom pass."""

        def __call__(self, graph: torch.fx.Graph) -> None:
            number_repeats(graph)

        def uuid(self) -> Any:
            hash_files = getattr(torch._inductor.custom_graph_pass, "get_hash_for_files", None)
            if hash_files is None:
                return None  # no way to name this implementation: inductor will not cache
            return hash_files((__file__,))

    PASS: Any = NumberRepeats()
else:
    PASS = None


def install() -> bool:
    """Adds the pass to inductor's post-grad custom passes (keeping any the program set).
    False where this torch cannot take it beside another pass, or has no such hook."""
    return add_custom_pass(PASS, "post_grad_custom_post_pass")


def add_custom_pass(graph_pass: Any, attribute: str) -> bool:
    """Adds `graph_pass` to inductor's custom passes named `attribute` (a config entry such
    as "post_grad_custom_post_pass"), after any the program set. False where this torch has
    no such entry, or takes one pass there and the program's own is set."""
    if graph_pass is None:
        return False
    from torch._inductor import config
    from torch._inductor import custom_graph_pass

    if not hasattr(config, attribute):
        return False
    current = getattr(config, attribute)
    if current is graph_pass or (isinstance(current, (list, tuple)) and
                                 any(p is graph_pass for p in current)):
        return True
    if current is None:
        setattr(config, attribute, graph_pass)
        return True
    if not hasattr(custom_graph_pass, "get_custom_graph_passes"):
        return False  # an older torch takes one pass: the program's own stays
    passes = list(current) if isinstance(current, (list, tuple)) else [current]
    setattr(config, attribute, passes + [graph_pass])
    return True
