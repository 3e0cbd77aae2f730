"""The dump point torch.compile sees: a registered custom op, ``dumpd::dump``.

Under ``torch.compile`` the forward hooks of :func:`dumpd.torch.attach` are traced by dynamo
instead of run. A Python call into the client would break the graph at every module, so a
traced hook calls ``torch.ops.dumpd.dump(site, inputs, outputs)`` instead:

* it is a ``torch.library`` custom op with a fake (meta) implementation that does nothing,
  so dynamo and AOTAutograd trace it without running it;
* ``keys`` is filled by inductor's post-grad pass of dumpd.torch._graph_pass (empty until
  then): the graph's own numbers for values several dump points take (dump once);
* it is registered as an *ordered effect*, so AOTAutograd threads an effect token through
  it and inductor keeps it, in program order, although it returns nothing;
* ``site`` is a 0-dim int64 CPU tensor holding the number that names the hook (op type, full
  name, sides, session) in a table here. A tensor, not an int: dynamo lifts it as a graph
  input, where an int would be a constant guarded by value, and every instance of a block
  compiled on its own (``block.compile()``) would recompile for its own numbers. Everything that decides whether to dump (the iteration, the job config's
  filters, ``dumpctl control``, the flight recorder) is asked when the op *runs*, by the
  same ``_Session.dump`` the eager hooks call. Nothing of it is a guard: changing it never
  recompiles.

Gradients (``attach(..., backward=True)``) go through the same op, called from the
``backward`` of :class:`GradientTap`'s autograd function: a forward pre-hook and a forward
hook pass the module's tensors through it (views, no copy), and its backward dumps the
gradients arriving there. AOTAutograd traces that backward into the compiled backward graph,
in order; eagerly it runs as any autograd function. A backward op is written as two records:
the gradients at the module's outputs (its inputs), then those of the module's inputs (its
outputs), as the eager full backward hooks name them.

The compiled graph hands the op its intermediate buffers. Inductor reuses a buffer for a
later result without bumping the tensor's version counter, so the eager dump once (keyed by
tensor object and version) is off for tensors dumped from a compiled graph. Instead, an
inductor post-grad pass (dumpd.torch._graph_pass) numbers the graph values that several dump
points take, in the op's ``keys`` argument, and the repeats go as references by those.

Needs ``torch.library.custom_op`` and ordered effects (torch 2.5 and later); with an older
torch, attach() hooks run eagerly only, as before.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, List, Optional

import torch

from dumpd.torch import _graph_pass, _graph_stats, _sink_pass
from dumpd.torch._items import LINKS
from dumpd.torch._session import _Session

_OP = "dumpd::dump"
_STATS_OP = "dumpd::dump_statistics"


class Site:
    """What one dump point dumps: the session, the op's type and full name, and its sides.
    The hooks that emit it hold it; the table below only refers to it, so a model dropped
    without AttachHandle.remove() takes its sites, its session and its client with it.
    `unit` (a _units.Unit) makes it one of the two points of a unit: with `begins` the start
    of its call, else its end, which dumps it if nothing fired since (dumpd.torch._units)."""

    __slots__ = ("number", "key", "session", "op_type", "name", "want_in", "want_out", "unit",
                 "begins", "__weakref__")

    def __init__(self, number: int, session: _Session, op_type: str, name: str, want_in: bool,
                 want_out: bool, unit: Any = None, begins: bool = False) -> None:
        self.unit = unit
        self.begins = begins
        self.number = number
        # What a graph passes to dumpd::dump: read when the op runs, never guarded on.
        self.key = torch.tensor(number, dtype=torch.int64)
        self.session = session
        self.op_type = op_type
        self.name = name
        self.want_in = want_in
        self.want_out = want_out


_lock = threading.Lock()
# site number -> Site, weakly; numbers are never reused, so a graph compiled for a hook that
# was removed (or whose model is gone) can never dump under another hook's name.
_sites: "weakref.WeakValueDictionary[int, Site]" = weakref.WeakValueDictionary()
_next_site = [0]


def _unavailable_reason() -> Optional[str]:
    library = torch.library
    if not hasattr(library, "custom_op") or not hasattr(library, "_register_effectful_op"):
        return f"torch {torch.__version__} has no torch.library.custom_op with effects"
    return None


UNAVAILABLE = _unavailable_reason()


def is_compiling() -> bool:
    """True while dynamo traces (then the hook emits the custom op); False when running."""
    return False


if UNAVAILABLE is None:
    is_compiling = torch.compiler.is_compiling  # noqa: F811  (dynamo constant-folds it)

    @torch.library.custom_op(_OP, mutates_args=())
    def _dump(site: torch.Tensor, inputs: List[Optional[torch.Tensor]],
              outputs: List[Optional[torch.Tensor]], keys: List[int]) -> None:
        # First, whatever happens to this dump point: a later one may repeat its values.
        linked = LINKS.resolve(keys) if keys else None
        entry = _sites.get(int(site))
        if entry is None:  # the hook was removed (or its model dropped) after compiling
            return
        if entry.unit is not None:
            if entry.begins:
                entry.session.begin_unit(entry.unit)
            else:
                entry.session.end_unit(entry.unit, inputs, outputs, entry.want_in,
                                       entry.want_out, dump_once=False, linked=linked)
            return
        entry.session.dump(entry.op_type, entry.name, inputs, outputs, entry.want_in,
                           entry.want_out, dump_once=False, linked=linked)

    @_dump.register_fake
    def _dump_fake(site: torch.Tensor, inputs: List[Optional[torch.Tensor]],
                   outputs: List[Optional[torch.Tensor]], keys: List[int]) -> None:
        return None

    torch.library._register_effectful_op(_OP, torch.library.EffectType.ORDERED)

    @torch.library.custom_op(_STATS_OP, mutates_args=())
    def _dump_statistics(site: torch.Tensor, inputs: List[Optional[torch.Tensor]],
                         outputs: List[Optional[torch.Tensor]], meta: List[int]) -> None:
        """A dump point of a statistics-only job: `inputs` and `outputs` are the rows the
        graph computed (dumpd.torch._graph_stats), `meta` their dtypes and shapes."""
        entry = _sites.get(int(site))
        if entry is None:
            return
        ins, at = _graph_stats.decode(inputs, meta, 0)
        outs, _ = _graph_stats.decode(outputs, meta, at)
        if entry.unit is not None:
            entry.session.end_unit(entry.unit, ins, outs, entry.want_in, entry.want_out,
                                   dump_once=False)
            return
        entry.session.dump(entry.op_type, entry.name, ins, outs, entry.want_in,
                           entry.want_out, dump_once=False)

    @_dump_statistics.register_fake
    def _dump_statistics_fake(site: torch.Tensor, inputs: List[Optional[torch.Tensor]],
                              outputs: List[Optional[torch.Tensor]], meta: List[int]) -> None:
        return None

    torch.library._register_effectful_op(_STATS_OP, torch.library.EffectType.ORDERED)


def recompile_with_hooks(model: torch.nn.Module) -> None:
    """Makes torch.compile see the hooks attach() adds. By default dynamo does not guard on a
    module's hooks while it has none (skip_nnmodule_hook_guards), so a hooked instance of a
    class compiled earlier without hooks would run that graph and dump nothing. attach()
    turns that shortcut off and drops the graphs compiled for the forward code of the
    model's module classes: they are compiled again, once, with the dump points. Steps and
    selections never recompile. It also installs inductor's pass that numbers the values dump
    points share (dumpd.torch._graph_pass), so those are dumped once."""
    _graph_pass.install()
    _graph_pass.add_custom_pass(_sink_pass.PASS, "joint_custom_pre_pass")
    dynamo = getattr(torch, "_dynamo", None)
    config = getattr(dynamo, "config", None)
    if config is not None and getattr(config, "skip_nnmodule_hook_guards", False):
        config.skip_nnmodule_hook_guards = False
    reset_code = getattr(dynamo, "reset_code", None)
    if reset_code is None:
        return
    for cls in {type(m) for m in model.modules()}:
        code = getattr(getattr(cls, "forward", None), "__code__", None)
        if code is not None:
            reset_code(code)


def add_site(session: _Session, op_type: str, name: str, want_in: bool, want_out: bool,
             unit: Any = None, begins: bool = False) -> Site:
    """A new dump point; it stays in the table for as long as something holds the Site."""
    with _lock:
        number = _next_site[0]
        _next_site[0] += 1
        site = Site(number, session, op_type, name, want_in, want_out, unit, begins)
        _sites[number] = site
    return site


def remove_site(site: int) -> None:
    with _lock:
        _sites.pop(site, None)


def _flatten(value: Any, out: List[Optional[torch.Tensor]]) -> List[Optional[torch.Tensor]]:
    """Tensors of `value` in dump slot order (nested tuple/list/dict), None for other leaves
    (their slot stays reserved, as in eager)."""
    if isinstance(value, (tuple, list)):
        for v in value:
            _flatten(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _flatten(v, out)
    else:
        out.append(value if isinstance(value, torch.Tensor) else None)
    return out


def emit(site: Site, inputs: Any, outputs: Any) -> None:
    """What a hook does while dynamo traces it: one dumpd::dump node in the graph, or for a
    statistics-only job the tensors' statistics and one dumpd::dump_statistics node."""
    ins, outs = _flatten(inputs, []), _flatten(outputs, [])
    if (site.session.statistics_only and (ins or outs) and
            all(_graph_stats.takes(t) for t in ins + outs)):
        meta: List[Any] = []
        in_rows = _graph_stats.rows(ins, meta)
        out_rows = _graph_stats.rows(outs, meta)
        torch.ops.dumpd.dump_statistics(site.key, in_rows, out_rows, meta)
        return
    torch.ops.dumpd.dump(site.key, ins, outs, [])


def _map_tensors(value: Any, fn: Any, counter: List[int]) -> Any:
    """`value` with each tensor leaf t replaced by fn(slot, t), slots counted over every leaf
    in dump slot order (as _flatten counts them)."""
    if isinstance(value, (tuple, list)):
        mapped = [_map_tensors(v, fn, counter) for v in value]
        return tuple(mapped) if isinstance(value, tuple) else mapped
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn, counter) for k, v in value.items()}
    slot = counter[0]
    counter[0] += 1
    return fn(slot, value) if isinstance(value, torch.Tensor) else value


if UNAVAILABLE is None:

    class _GradientPoint(torch.autograd.Function):
        """Identity (views) forward; backward dumps the gradients at those tensors.

        Views, not detach() aliases: autograd refuses an in-place op on a view a custom
        Function returned (attach() turns away in-place modules for that reason), but an
        alias it does not know as one would let an in-place op change the caller's tensor
        without its history, and the gradients would be silently wrong."""

        @staticmethod
        def forward(ctx: Any, site: torch.Tensor, side: str, slots: tuple, count: int,
                    *tensors: torch.Tensor) -> tuple:
            ctx.save_for_backward(site)  # Site.key: a graph input, not a guarded constant
            ctx.side, ctx.slots, ctx.count = side, slots, count
            return tuple(t.view_as(t) for t in tensors)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> tuple:
            full: List[Optional[torch.Tensor]] = [None] * ctx.count
            for slot, g in zip(ctx.slots, grads):
                full[slot] = g
            site, = ctx.saved_tensors
            if ctx.side == "output":  # gradients at the module's outputs: the op's inputs
                torch.ops.dumpd.dump(site, full, [], [])
            else:
                torch.ops.dumpd.dump(site, [], full, [])
            return (None, None, None, None) + grads


class GradientTap:
    """A forward pre-hook (side "input") or forward hook (side "output") that passes the
    module's tensors that require a gradient through _GradientPoint. It holds its Site."""

    __slots__ = ("site", "side")

    def __init__(self, site: Site, side: str) -> None:
        self.site = site
        self.side = side

    def __call__(self, module: torch.nn.Module, *hook_args: Any) -> Any:
        if is_compiling() and not self.site.session.gate.armed:
            return None  # a step that dumps nothing: no gradient point (dumpd._core.gate)
        value = hook_args[0] if self.side == "input" else hook_args[1]
        slots: List[int] = []
        tensors: List[torch.Tensor] = []

        def note(slot: int, t: torch.Tensor) -> torch.Tensor:
            if t.requires_grad:
                slots.append(slot)
                # One tensor in two slots ((y, y)): the second goes as a view of it, so each
                # slot keeps its own gradient, and dynamo, which refuses one tensor twice
                # among an autograd function's inputs, traces it.
                tensors.append(t.view_as(t) if any(t is u for u in tensors) else t)
            return t

        count = [0]
        _map_tensors(value, note, count)
        if not tensors:
            return None  # nothing here gets a gradient: the hook changes nothing
        views = dict(zip(slots, _GradientPoint.apply(self.site.key, self.side, tuple(slots),
                                                     count[0], *tensors)))
        return _map_tensors(value, lambda slot, t: views.get(slot, t), [0])
