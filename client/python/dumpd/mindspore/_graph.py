"""Taps for GRAPH_MODE, where MindSpore calls no Cell hook.

Each tapped leaf Cell gets a subclass of its own class, with the same name (so MindSpore's
scopes do not change), whose ``construct`` passes the Cell's input and its output through an
identity Cell, a *tap*. A tap's forward is an ``ops.Custom(..., func_type="pyfunc")``: inside
the compiled graph MindSpore runs its Python function with the tensor as a numpy array, and
that function dumps it (one record, the input or the output side of the op) before handing it
back. The tap's ``bprop`` is a second pyfunc Custom that dumps the gradient arriving there:
the input tap's gradient is the backward op's output, the output tap's its input.

On the CPU the arrays MindSpore hands a pyfunc are valid during the call, and the client
copies them into the ring before returning: the memory-reuse-safe contract holds.

Tapped: leaf Cells whose ``construct`` takes one argument (Conv2d, BatchNorm2d, ReLU, Dense,
pooling, ...), on each side that is a tensor (the optimizer, handed a tuple of gradients,
runs untapped). Cells taking more (a loss taking logits and labels) are left untapped, and
attach() names them in one warning.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict

import mindspore as ms
from mindspore import Tensor, nn, ops

from dumpd._core.session import Session


def _same(*args: Any) -> Any:
    return args[0]


def _gradient(_x: Any, _out: Any, dout: Any) -> Any:
    return dout


class _Tap(nn.Cell):
    """Identity on one tensor; `forward(array)` and `backward(array)` see it and its
    gradient (dumpd's dump calls)."""

    def __init__(self, forward: Callable[[Any], None], backward: Callable[[Any], None]) -> None:
        super().__init__()

        def forward_fn(x: Any) -> Any:
            forward(x)
            return x

        def backward_fn(x: Any, out: Any, dout: Any) -> Any:
            backward(dout)
            return dout

        self.forward_op = ops.Custom(forward_fn, out_shape=_same, out_dtype=_same,
                                     func_type="pyfunc")
        self.backward_op = ops.Custom(backward_fn, out_shape=_gradient, out_dtype=_gradient,
                                      func_type="pyfunc")

    def construct(self, x: Any) -> Any:
        return self.forward_op(x)

    def bprop(self, x: Any, out: Any, dout: Any) -> Any:
        return (self.backward_op(x, out, dout),)


_TAPPED: Dict[type, type] = {}


def _tapped_class(cls: type) -> type:
    """The subclass of `cls` whose construct passes its input and output through the taps
    (one per class, named as `cls`)."""
    tapped = _TAPPED.get(cls)
    if tapped is None:
        class Tapped(cls):  # type: ignore[misc, valid-type]
            def construct(self, x):  # noqa: ANN001, ANN201 (parsed by MindSpore)
                # isinstance is decided when the graph is compiled: a Cell handed a tuple
                # (the optimizer's gradients) or returning one runs untapped on that side.
                if isinstance(x, Tensor):
                    x = self.dumpd_input(x)
                out = super().construct(x)
                if isinstance(out, Tensor):
                    out = self.dumpd_output(out)
                return out

        Tapped.__name__ = cls.__name__
        Tapped.__qualname__ = cls.__qualname__
        Tapped.__module__ = cls.__module__
        _TAPPED[cls] = tapped = Tapped
    return tapped


def can_tap(cell: nn.Cell) -> bool:
    """A leaf Cell whose construct takes one positional argument and nothing else: the tapped
    construct passes on only that one, so a Cell with more, even optional ones
    (``construct(self, x, mask=None)``), keywords or ``*args``, is left untapped."""
    try:
        params = list(inspect.signature(type(cell).construct).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    return len(params) == 1 and params[0].kind in (params[0].POSITIONAL_ONLY,
                                                   params[0].POSITIONAL_OR_KEYWORD)


def tapped_already(net: nn.Cell) -> bool:
    """Whether `net` holds taps of an attach() not removed yet."""
    return any(isinstance(c, _Tap) for _, c in net.cells_and_names())


class GraphTaps:
    """The taps of one attach() in GRAPH_MODE: `place` swaps each Cell's class and adds its
    two taps, `remove` restores the Cells (a graph compiled with the taps keeps them until it
    is compiled again: their dump calls then do nothing)."""

    def __init__(self) -> None:
        self.cells: list = []
        self.active = True

    def place(self, session: Session, cell: nn.Cell, op_type: str, name: str,
              grad_type: str | None, grad_name: str | None, inputs: bool,
              outputs: bool) -> None:
        def dump(kind: str) -> Callable[[Any], None]:
            def call(array: Any) -> None:
                if not self.active:
                    return
                if kind == "input":
                    session.dump(op_type, name, [array], [], inputs, False)
                elif kind == "output":
                    session.dump(op_type, name, [], [array], False, outputs)
                elif grad_name is not None and kind == "grad_input":
                    # The gradient of the Cell's input: the backward op's output.
                    session.dump(grad_type, grad_name, [], [array], False, outputs)
                elif grad_name is not None:
                    session.dump(grad_type, grad_name, [array], [], inputs, False)
            return call

        original = type(cell)
        cell.dumpd_input = _Tap(dump("input"), dump("grad_input"))
        cell.dumpd_output = _Tap(dump("output"), dump("grad_output"))
        cell.__class__ = _tapped_class(original)
        self.cells.append((cell, original))

    def remove(self) -> None:
        self.active = False
        for cell, original in self.cells:
            cell.__class__ = original
            for attr in ("dumpd_input", "dumpd_output"):
                if attr in cell._cells:
                    del cell._cells[attr]
        self.cells = []


def in_graph_mode() -> bool:
    return ms.get_context("mode") == ms.GRAPH_MODE
