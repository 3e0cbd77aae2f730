"""dumpd._core, what dumpd.torch and dumpd.mindspore share (issue 53): it imports neither
framework, the package has no import circle, and its naming, kernel map and loss hand-off
work on their own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest

import dumpd
from dumpd._core import naming, steps
from dumpd._core.kernel_map import kernel_map, sanitize, write_csv

PACKAGE = Path(dumpd.__file__).resolve().parent


def test_the_core_imports_neither_framework() -> None:
    code = ("import sys, dumpd\n"
            "import dumpd._core.session, dumpd._core.steps, dumpd._core.checks, "
            "dumpd._core.naming, dumpd._core.kernel_map, dumpd._core.identities, "
            "dumpd._core.gate\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'mindspore', 'numpy')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: Set[str]) -> Set[str]:
    """The dumpd modules `path` imports, anywhere in the file (TYPE_CHECKING blocks too):
    ``from dumpd.torch import _compiled`` counts as dumpd.torch._compiled."""
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {m for m in found if m in modules}


def test_the_package_has_no_import_circle() -> None:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: Dict[str, Set[str]] = {m: _imports(p, set(files)) - {m} for m, p in files.items()}
    # A package's __init__ importing its own submodules is how packages are built; a circle
    # is a module that reaches itself through other modules' imports.
    for m in graph:
        graph[m] = {d for d in graph[m] if not (m and d.startswith(m + "."))}
    assert "dumpd._core.session" in graph and "dumpd.mindspore._attach" in graph
    state: Dict[str, int] = {}
    path: List[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                pytest.fail("import circle: " + " -> ".join(path[path.index(d):] + [d]))
            if d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    core = [m for m in graph if m.startswith("dumpd._core")]
    for m in core:
        assert not {d for d in graph[m] if d.startswith(("dumpd.torch", "dumpd.mindspore"))}, m


def test_scope_names_as_mindspore_writes_them() -> None:
    classes = {"network": "WithLossCell", "network._backbone": "LeNet5",
               "network._backbone.conv1": "Conv2d"}
    op_type, name = naming.full_name("network._backbone.conv1", classes.__getitem__, 3,
                                     "Default")
    assert (op_type, name) == (
        "Conv2d", "Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2d-op3")
    assert naming.gradient_name(name, op_type) == (
        "Gradients/Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/gradConv2d/"
        "Conv2dGrad-op3")
    assert naming.full_name("", {"": "Net"}.__getitem__, 0, "Default") == (
        "Net", "Default/Net-op0")


def _touch(directory: Path, op_type: str, name: str, ts: int, io: str = "output",
           slot: int = 0) -> None:
    (directory / f"{op_type}.{sanitize(name)}.0.0.{ts}.{io}.{slot}.DefaultFormat.Float32.npy"
     ).write_bytes(b"")


def test_the_kernel_map_pairs_each_cell_with_its_scopes_last_kernel(tmp_path: Path) -> None:
    scope = "Default/network-WithLossCell/_backbone-Net"
    _touch(tmp_path, "MatMul", f"{scope}/fc-Dense/MatMul-op0", 10)
    _touch(tmp_path, "BiasAdd", f"{scope}/fc-Dense/BiasAdd-op0", 11)
    _touch(tmp_path, "BiasAdd", f"{scope}/fc-Dense/BiasAdd-op0", 9, io="input")
    # A gradient kernel written later under the same forward scope is never the partner.
    _touch(tmp_path, "BiasAddGrad", f"Gradients/{scope}/fc-Dense/gradBiasAdd/BiasAddGrad-op0",
           20)
    # fc2's scope is not fc's, though its text starts alike.
    _touch(tmp_path, "MatMul", f"{scope}/fc2-Dense/MatMul-op0", 30)
    # A Cell called twice: two ReLU kernels, no single partner.
    _touch(tmp_path, "ReLU", f"{scope}/relu-ReLU/ReLU-op0", 5)
    _touch(tmp_path, "ReLU", f"{scope}/relu-ReLU/ReLU-op1", 7)
    cells = [f"{scope}/fc-Dense/Dense-op7", f"{scope}/relu-ReLU/ReLU-op3",
             f"{scope}/conv-Conv2d/Conv2d-op2"]
    pairs = kernel_map(cells, tmp_path)
    assert pairs == {cells[0]: sanitize(f"{scope}/fc-Dense/BiasAdd-op0")}
    write_csv(pairs, tmp_path / "map.csv")
    assert (tmp_path / "map.csv").read_text() == (
        f"left,right\n{sanitize(cells[0])},{sanitize(scope)}_fc-Dense_BiasAdd-op0\n")


class _Client:
    def __init__(self) -> None:
        self.log: list = []

    def set_step(self, iteration: int, graph_id: int = 0) -> None:
        self.log.append(("mark", iteration))

    def report_loss(self, value: float) -> None:
        self.log.append(("loss", value))

    def flush(self) -> None:
        self.log.append(("flush",))

    @property
    def step_selected(self) -> bool:
        return True


class _OneElement:
    """A framework tensor float() refuses but .item() reads (as some do for 1-element)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


def test_losses_of_any_framework_reach_the_recorder() -> None:
    client = _Client()
    values = iter([1.5, _OneElement(2.5), None])
    for i in steps.steps(client, range(3), loss=lambda: next(values)):
        client.log.append(("body", i))
    assert client.log == [("mark", 0), ("body", 0), ("loss", 1.5),
                          ("mark", 1), ("body", 1), ("loss", 2.5),
                          ("mark", 2), ("body", 2)]
    with pytest.raises(TypeError, match="one-element tensor"):
        steps.step(client, 3, loss=object())


def test_a_gate_listener_that_raised_is_told_again_at_the_next_mark() -> None:
    """dumpd.mindspore puts its hooks back from the gate's listener: if that fails once (an
    exception, a KeyboardInterrupt), the next mark must try again, not take it as done."""
    from dumpd._core.gate import Gate
    told: List[bool] = []

    def listener(armed: bool) -> None:
        told.append(armed)
        if len(told) == 2:
            raise RuntimeError("placing the hooks failed")

    gate = Gate()
    gate.listener = listener
    gate.armed = False
    gate.changed()  # told: off
    gate.armed = True
    with pytest.raises(RuntimeError):
        gate.changed()  # told: on, and it raised
    gate.changed()  # the next mark, still armed: told again
    gate.changed()  # applied now: nothing more
    assert told == [False, True, True]
