"""attach(): forward (and backward) hooks on every leaf Cell of a MindSpore net, named in
MindSpore's scope form."""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Tuple

from mindspore import nn

import dumpd
from dumpd._core import gate as _gate
from dumpd._core import naming
from dumpd._core import steps as _steps
from dumpd._core.checks import FiredCheck
from dumpd._core.handle import AttachHandle
from dumpd._core.session import Session, check_errors
from dumpd.mindspore import _graph
from dumpd.mindspore._items import Items

# Said by the first-step check when no hook ever ran.
_GRAPH_MODE_HELP = (
    "MindSpore runs Cell hooks in PyNative mode only: under jit, or in GRAPH_MODE after an "
    "attach() made in PyNative, it compiles them into the graph, which dumpd's hooks refuse. "
    "Attach in the mode the net runs in: in GRAPH_MODE attach() puts taps in the graph "
    "instead (docs/python.md, \"dumpd.mindspore\")")
_IDLE_HELP = (
    "is the Cell attached the one that is called? Attach the Cell the training loop calls "
    "(a TrainOneStepCell, or the net), in PYNATIVE_MODE. " + _GRAPH_MODE_HELP)


class _Session(Session):
    """A MindSpore attach()'s session."""

    __slots__ = ()

    def make_items(self, dump_once: bool) -> Items:
        return Items(self, dump_once)


def _cells(net: nn.Cell) -> Dict[str, nn.Cell]:
    """Each Cell of `net` once, at its first path, in ``cells_and_names()`` order."""
    result: Dict[str, nn.Cell] = {}
    seen: set = set()
    for path, cell in net.cells_and_names():
        if id(cell) not in seen:
            seen.add(id(cell))
            result[path] = cell
    return result


def op_names(net: nn.Cell, prefix: str = "Default") -> Dict[str, Tuple[str, str]]:
    """Maps each leaf Cell's path in `net` ("network._backbone.conv1") to (op_type,
    full_name): ``prefix/<attr>-<Class>/.../<Class>-op<N>``, N being the Cell's index in
    ``net.cells_and_names()``. That is the scope MindSpore gives the Cell's kernels when
    `net` is the cell it runs (a TrainOneStepCell: ``Default/network-WithLossCell/...``)."""
    cells = _cells(net)
    result: Dict[str, Tuple[str, str]] = {}
    for index, (path, cell) in enumerate(cells.items()):
        if next(iter(cell.cells()), None) is None:
            result[path] = naming.full_name(path, lambda p: type(cells[p]).__name__, index,
                                            prefix)
    return result


class _Hook:
    """One hook of one leaf Cell: each call dumps one op execution. Forward hooks get
    (cell, inputs, output); backward hooks (cell, grad_input, grad_output), and the backward
    op takes the gradients arriving at the outputs and gives those of the inputs."""

    __slots__ = ("session", "op_type", "name", "inputs", "outputs", "backward")

    def __init__(self, session: Session, op_type: str, name: str, inputs: bool, outputs: bool,
                 backward: bool) -> None:
        self.session = session
        self.op_type = op_type
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.backward = backward

    def __call__(self, cell: Any, first: Any, second: Any) -> None:
        if self.backward:
            first, second = second, first
        self.session.dump(self.op_type, self.name, first, second, self.inputs, self.outputs)


class _Hooks:
    """The hooks of one attach(), on their Cells only while steps dump: at a step mark that
    selects nothing (the session's gate, dumpd._core.gate) they are taken off, so such a step
    runs the net as MindSpore runs it without hooks (backward hooks alone cost a PyNative step
    about a third, docs/performance.md), and put back at the next mark that selects."""

    __slots__ = ("specs", "handles", "removed")

    def __init__(self) -> None:
        self.specs: List[Tuple[Any, bool, Any]] = []  # (cell, backward, hook function)
        self.handles: List[Any] = []
        self.removed = False

    def add(self, cell: Any, backward: bool, function: Any) -> None:
        self.specs.append((cell, backward, function))

    def place(self) -> None:
        try:
            for cell, backward, function in self.specs:
                register = cell.register_backward_hook if backward else cell.register_forward_hook
                self.handles.append(register(function))
        except BaseException:
            self.take_off()
            raise

    def take_off(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def follow(self, armed: bool) -> None:
        """The gate's listener: hooks on for a step that can dump, off for one that cannot."""
        if self.removed:
            return
        if armed and not self.handles:
            self.place()
        elif not armed:
            self.take_off()

    def remove(self) -> None:
        """For good (AttachHandle.remove)."""
        self.removed = True
        self.take_off()


def _function(hook: _Hook) -> Any:
    """`hook` as the plain Python function MindSpore requires of a hook."""
    def dumpd_hook(cell: Any, first: Any, second: Any) -> None:
        hook(cell, first, second)
    # What MindSpore's refusal under jit names (below): the name says what to do.
    dumpd_hook.__qualname__ = "hooks_run_in_PYNATIVE_MODE_without_jit"
    return _forbidden_in_jit(dumpd_hook)


def _forbidden_in_jit(fn: Any) -> Any:
    """Under jit MindSpore compiles a Cell's hooks into its graph, and a hook that writes a
    file cannot be compiled: registered as forbidden there, it is refused with MindSpore's
    own message naming it ("... is not supported in 'construct' or function with @jit
    decorator ... set to PYNATIVE_MODE") instead of a parse error deep in dumpd. That
    registry is private to MindSpore: where it is missing, the parse error remains."""
    try:
        from mindspore._check_jit_forbidden_api import jit_forbidden_register
    except ImportError:
        return fn
    return jit_forbidden_register(fn)


def _attach_graph(session: Session, cells: Dict[str, nn.Cell],
                  leaves: Dict[str, Tuple[str, str]], inputs: bool, outputs: bool,
                  backward: bool) -> AttachHandle:
    """GRAPH_MODE: taps around the leaf Cells that take one tensor (dumpd.mindspore._graph)."""
    taps = _graph.GraphTaps()
    names: Dict[str, str] = {}
    gradient_names: Dict[str, str] = {}
    left = []
    for path, (op_type, name) in leaves.items():
        if not _graph.can_tap(cells[path]):
            left.append(path)
            continue
        names[path] = name
        grad_type = grad_name = None
        if backward:
            grad_type = op_type + "Grad"
            grad_name = naming.gradient_name(name, op_type)
            gradient_names[path] = grad_name
        taps.place(session, cells[path], op_type, name, grad_type, grad_name, inputs, outputs)
    if left:
        shown = ", ".join(left[:8]) + (f" and {len(left) - 8} more" if len(left) > 8 else "")
        warnings.warn(f"dumpd.mindspore.attach (GRAPH_MODE): {len(left)} leaf Cell(s) take "
                      "more than one argument (optional ones too) and are not dumped: "
                      f"{shown}. In PYNATIVE_MODE every leaf Cell is", RuntimeWarning,
                      stacklevel=3)
    session.check = FiredCheck(names, "Cell", idle_hint=_IDLE_HELP)
    _steps.observe(session.client, session)
    return AttachHandle([taps], names, gradient_names, session)


def attach(net: nn.Cell, client: dumpd.Client, *, inputs: bool = True, outputs: bool = True,
           backward: bool = False, prefix: str = "Default",
           errors: str = "raise") -> AttachHandle:
    """Hooks every leaf Cell of `net` so each call dumps its inputs and outputs (PyNative).

    Attach to the Cell you run (a TrainOneStepCell, or the net itself): its leaves are named
    from it, ``Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2d-op3``, which
    is the scope of the Cell's kernels in MindSpore's own dump of the same Cell.
    inputs/outputs: which sides to dump at all (the job config's filters apply on top).
    backward: also dump gradients, as ``Gradients/<scope>/grad<Class>/<Class>Grad-op<N>``.
    errors: "raise" lets a DaemonError out of the net's call; "warn" warns once and stops
    dumping, so training goes on (``handle.error`` keeps it).
    In GRAPH_MODE (the context when attach() is called) the leaf Cells taking one argument
    get taps inside the graph instead of hooks (dumpd.mindspore._graph): one record per side,
    gradients through the taps' bprop; the others are named in a warning. Hooks placed in
    PyNative refuse to be compiled (jit, a later GRAPH_MODE) with MindSpore's own error
    naming ``hooks_run_in_PYNATIVE_MODE_without_jit``.
    """
    if not isinstance(net, nn.Cell):
        raise TypeError(f"net must be a mindspore.nn.Cell, got {type(net).__name__}")
    if not isinstance(client, dumpd.Client):
        raise TypeError(f"client must be a dumpd.Client, got {type(client).__name__}")
    check_errors(errors)
    if _graph.tapped_already(net):
        raise RuntimeError("dumpd.mindspore.attach: this net still has the GRAPH_MODE taps of "
                           "an earlier attach(); call its handle.remove() first")
    session = _Session(client, errors)
    cells = _cells(net)
    leaves = op_names(net, prefix)
    if _graph.in_graph_mode():
        return _attach_graph(session, cells, leaves, inputs, outputs, backward)
    hooks = _Hooks()
    names: Dict[str, str] = {}
    gradient_names: Dict[str, str] = {}
    for path, (op_type, name) in leaves.items():
        cell = cells[path]
        names[path] = name
        hooks.add(cell, False, _function(_Hook(session, op_type, name, inputs, outputs, False)))
        if backward:
            grad_type = op_type + "Grad"
            grad_name = naming.gradient_name(name, op_type)
            gradient_names[path] = grad_name
            hooks.add(cell, True, _function(
                _Hook(session, grad_type, grad_name, inputs, outputs, True)))
    hooks.place()
    session.check = FiredCheck({path: leaves[path][1] for path in leaves}, "Cell",
                               idle_hint=_IDLE_HELP)
    _steps.observe(client, session)
    session.gate.listener = hooks.follow
    _gate.register(client, session)
    return AttachHandle([hooks], names, gradient_names, session)
