"""attach(): hooks on every leaf module of a model, named as MindSpore names its ops."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Tuple

import torch

import dumpd
from dumpd._core import gate as _gate
from dumpd._core import naming
from dumpd._core import steps as _steps
from dumpd._core.handle import AttachHandle
from dumpd.torch import _compiled
from dumpd.torch._session import _check_errors, _Session
from dumpd.torch._units import FiredCheck, Unit, unit_paths


def _unwrapped(module: torch.nn.Module) -> torch.nn.Module:
    """The module a ``torch.compile(module)`` wrapper (OptimizedModule) runs, else `module`."""
    while True:
        inner = getattr(module, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module) or type(module).__name__ != "OptimizedModule":
            return module
        module = inner


def named_modules(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    """``model.named_modules()`` as the model's own code sees it: a ``torch.compile``
    wrapper anywhere (the model itself, or a submodule replaced by ``torch.compile(block)``)
    stands for the module it wraps, under the same path. So a model is named alike whether
    it was compiled before or after attach(), and alike compiled or eager. Each module once,
    at its first path (as named_modules())."""
    result: Dict[str, torch.nn.Module] = {}
    seen: set = set()
    # Depth first, children in order, without a recursive closure (a reference cycle that
    # would keep the model, its hooks and its client alive until the next collection).
    stack = [("", model)]
    while stack:
        path, module = stack.pop()
        module = _unwrapped(module)
        if id(module) in seen:
            continue
        seen.add(id(module))
        result[path] = module
        children = [(f"{path}.{attr}" if path else attr, child)
                    for attr, child in module.named_children()]
        stack.extend(reversed(children))
    return result


def _is_leaf(module: torch.nn.Module) -> bool:
    """A module that is one op: no children, or only the ``parametrizations`` that
    ``torch.nn.utils.parametrize`` adds (they compute its weight; the module computes)."""
    children = [name for name, _ in module.named_children()]
    return not children or (children == ["parametrizations"] and
                            type(module).__name__.startswith("Parametrized"))


def _full_name(modules: Dict[str, torch.nn.Module], path: str, index: int,
               prefix: str) -> Tuple[str, str]:
    """(op_type, ``prefix/<attr>-<Class>/.../<Class>-op<index>``) of the module at `path`."""
    return naming.full_name(path, lambda p: _class_name(modules[p]), index, prefix)


def _class_name(module: torch.nn.Module) -> str:
    """The module's class name; a parametrized module's (ParametrizedLinear) is its own
    class's (Linear), as before parametrization."""
    cls = type(module)
    if cls.__name__.startswith("Parametrized") and hasattr(module, "parametrizations"):
        cls = cls.__mro__[1]
    return cls.__name__


def op_names(model: torch.nn.Module, prefix: str = "Default") -> Dict[str, Tuple[str, str]]:
    """Maps each leaf module's path in `model` ("features.0") to (op_type, full_name).

    The full name is ``prefix/<attr>-<Class>/.../<Class>-op<N>``, N being the module's
    index in ``model.named_modules()``. A model that is itself a leaf is
    ``prefix/<Class>-op0``. A ``torch.compile`` wrapper is named as the module it wraps. A
    module with parametrized weights (``torch.nn.utils.parametrize``) is a leaf: its
    ``parametrizations`` are part of it.
    """
    modules = named_modules(model)
    result: Dict[str, Tuple[str, str]] = {}
    inside: List[str] = []  # paths of parametrized leaves: what lies below them is theirs
    for index, (path, module) in enumerate(modules.items()):
        if any(path.startswith(p + ".") for p in inside) or not _is_leaf(module):
            continue
        if next(module.children(), None) is not None:
            inside.append(path)
        result[path] = _full_name(modules, path, index, prefix)
    return result


_gradient_name = naming.gradient_name

# Where each kind of hook finds its op's inputs and outputs among the arguments PyTorch passes
# after the module (None: that op has no outputs).
_HOOK_ARGUMENTS = {
    # register_forward_hook: (args, output).
    "forward": (0, 1),
    # register_forward_pre_hook: (args,); an in-place module's inputs, before it overwrites them.
    "pre": (0, None),
    # register_full_backward_hook: (grad_input, grad_output); the backward op takes the
    # gradients arriving at the module's outputs and gives those of its inputs.
    "backward": (1, 0),
}


def _refuse_in_place_modules(model: torch.nn.Module, prefix: str) -> None:
    """backward=True hands each module views of its tensors (the gradient dump points, or
    torch's full backward hooks), and autograd refuses an in-place op on such a view at the
    first forward, with an error that names neither dumpd nor the module: say so now."""
    modules = named_modules(model)
    in_place = [path or type(model).__name__ for path in op_names(model, prefix)
                if getattr(modules[path], "inplace", False)]
    if in_place:
        shown = ", ".join(in_place[:8]) + (f" and {len(in_place) - 8} more"
                                           if len(in_place) > 8 else "")
        raise ValueError(
            f"attach(backward=True) cannot dump gradients around in-place modules: PyTorch "
            f"refuses an in-place change of a tensor a gradient hook hands on. Set "
            f"inplace=False on {shown} (or attach with backward=False)")


class _Hook:
    """One hook of one leaf module: each call dumps one op execution (one dump_op). Traced
    by torch.compile, it puts a dumpd::dump op in the graph instead (dumpd.torch._compiled);
    `site` (a _compiled.Site, held here) names it there (None: a backward hook, not traced)."""

    __slots__ = ("session", "op_type", "name", "inputs", "outputs", "in_arg", "out_arg",
                 "site")

    def __init__(self, session: _Session, kind: str, op_type: str, name: str, inputs: bool,
                 outputs: bool) -> None:
        self.session = session
        self.op_type = op_type
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.in_arg, self.out_arg = _HOOK_ARGUMENTS[kind]
        self.site = None
        if kind != "backward" and _compiled.UNAVAILABLE is None:
            self.site = _compiled.add_site(session, op_type, name, inputs, outputs)

    def __call__(self, module: torch.nn.Module, *hook_args: Any) -> None:
        outputs = () if self.out_arg is None else hook_args[self.out_arg]
        if self.site is not None and _compiled.is_compiling():
            if self.session.gate.armed:  # dynamo guards on it (dumpd._core.gate)
                _compiled.emit(self.site, hook_args[self.in_arg] if self.inputs else (),
                               outputs if self.outputs else ())
            return
        self.session.dump(self.op_type, self.name, hook_args[self.in_arg], outputs, self.inputs,
                          self.outputs)


class _UnitHook:
    """The forward pre-hook (begins=True) or forward hook of a unit (dumpd.torch._units):
    the first notes where its call starts, the second dumps it if nothing fired since."""

    __slots__ = ("session", "unit", "begins", "inputs", "outputs", "site")

    def __init__(self, session: _Session, unit: Unit, begins: bool, inputs: bool,
                 outputs: bool) -> None:
        self.session = session
        self.unit = unit
        self.begins = begins
        self.inputs = inputs
        self.outputs = outputs
        self.site = None
        if _compiled.UNAVAILABLE is None:
            self.site = _compiled.add_site(session, unit.op_type, unit.name, inputs, outputs,
                                           unit=unit, begins=begins)

    def __call__(self, module: torch.nn.Module, args: Any, *output: Any) -> None:
        if self.site is not None and _compiled.is_compiling():
            if not self.session.gate.armed:  # dynamo guards on it (dumpd._core.gate)
                return
            if self.begins:
                _compiled.emit(self.site, (), ())
            else:
                _compiled.emit(self.site, args if self.inputs else (),
                               output[0] if self.outputs else ())
            return
        if self.begins:
            self.session.begin_unit(self.unit)
        else:
            self.session.end_unit(self.unit, args, output[0], self.inputs, self.outputs)


def attach(model: torch.nn.Module, client: dumpd.Client, *, inputs: bool = True,
           outputs: bool = True, backward: bool = False, prefix: str = "Default",
           errors: str = "raise", units: Iterable[Any] = (),
           graph_statistics: bool = True) -> AttachHandle:
    """Hooks every leaf module of `model` so each call dumps its inputs and outputs.

    inputs/outputs: which sides to dump at all (the job config's input_output and kernel
    filters apply on top). backward: also dump gradients via full backward hooks.
    prefix: the first component of every full name ("Default", as in MindSpore).
    errors: what a DaemonError in a hook does (the daemon died, the session ended):
    "raise" propagates it out of the model's forward/backward; "warn" issues one
    RuntimeWarning and stops dumping, so training goes on (``handle.error`` keeps it).
    units: module paths ("layers.0.attn") or classes whose modules are dumped as one op
    (their own inputs and outputs) in a call where none of their hooked modules ran, as
    ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` always are: for a module
    that uses its children's weights itself instead of calling them (dumpd.torch._units).
    graph_statistics: under torch.compile, a job that writes only statistics computes them
    inside the graph, fused with the ops that make the tensors, and only the rows leave it
    (dumpd.torch._graph_stats; avg and l2norm are plain float64 sums). False: the graph hands
    the tensors over and the client computes MindSpore's chunked sums, digit for digit.
    The first step mark (step()/steps()) after the model ran warns once, naming hooked
    modules that never ran.
    Returns an :class:`AttachHandle`; call ``.remove()`` to detach.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(client, dumpd.Client):
        raise TypeError(f"client must be a dumpd.Client, got {type(client).__name__}")
    _check_errors(errors)
    units = list(units)
    if backward:
        _refuse_in_place_modules(model, prefix)
    session = _Session(client, errors)
    session.statistics_only = session.statistics_only and bool(graph_statistics)
    # A model on CUDA: pin the ring and set up staging now, not inside the first dumped step.
    devices = {t.device.index for t in list(model.parameters()) + list(model.buffers())
               if t.is_cuda}
    if devices and dumpd.cuda_unavailable_reason() is None:
        for index in sorted(devices):
            client.prepare_cuda(index)
    if _compiled.UNAVAILABLE is None:
        _compiled.recompile_with_hooks(model)
    modules = named_modules(model)
    hooks: List[Any] = []
    sites: List[int] = []

    def hooked(hook: _Hook) -> _Hook:
        if hook.site is not None:
            sites.append(hook.site.number)
        return hook

    names: Dict[str, str] = {}
    gradient_names: Dict[str, str] = {}
    leaves = op_names(model, prefix)
    try:
        for path in unit_paths(modules, leaves, units):
            op_type, name = _full_name(modules, path, list(modules).index(path), prefix)
            names[path] = name
            below = [leaf_name for leaf, (_, leaf_name) in leaves.items()
                     if path == "" or leaf.startswith(path + ".")]
            unit = Unit(op_type, name, below)
            hooks.append(modules[path].register_forward_pre_hook(
                hooked(_UnitHook(session, unit, True, inputs, outputs))))
            hooks.append(modules[path].register_forward_hook(
                hooked(_UnitHook(session, unit, False, inputs, outputs))))
        for path, (op_type, name) in leaves.items():
            module = modules[path]
            names[path] = name
            in_place = bool(getattr(module, "inplace", False))
            if inputs and in_place:
                hooks.append(module.register_forward_pre_hook(
                    hooked(_Hook(session, "pre", op_type, name, True, False))))
            if outputs or (inputs and not in_place):
                hooks.append(module.register_forward_hook(hooked(
                    _Hook(session, "forward", op_type, name, inputs and not in_place, outputs))))
            if backward:
                grad_type = op_type + "Grad"
                grad_name = _gradient_name(name, op_type)
                gradient_names[path] = grad_name
                if _compiled.UNAVAILABLE is None:
                    # Autograd functions whose backward dumps: traced by torch.compile too.
                    site = _compiled.add_site(session, grad_type, grad_name, inputs, outputs)
                    sites.append(site.number)
                    if outputs:  # the backward op's outputs: gradients of the inputs
                        hooks.append(module.register_forward_pre_hook(
                            _compiled.GradientTap(site, "input")))
                    if inputs:  # its inputs: the gradients at the module's outputs
                        hooks.append(module.register_forward_hook(
                            _compiled.GradientTap(site, "output")))
                else:  # torch without custom ops (1.13): full backward hooks
                    hooks.append(module.register_full_backward_hook(
                        _Hook(session, "backward", grad_type, grad_name, inputs, outputs)))
    except BaseException:
        for h in hooks:
            h.remove()
        for site in sites:
            _compiled.remove_site(site)
        raise
    session.check = FiredCheck(
        {path: leaves[path][1] for path in leaves}, "module",
        "If a parent module uses their weights itself instead of calling them, pass its path "
        "or class in attach(..., units=[...]) to dump that parent's inputs and outputs")
    _steps.observe(client, session)
    _gate.register(client, session)
    def remove_sites() -> None:  # a graph compiled with these hooks dumps nothing more
        for site in sites:
            _compiled.remove_site(site)
    return AttachHandle(hooks, names, gradient_names, session, remove_sites)

