"""dumpd.torch: dump a PyTorch model's per-module inputs and outputs with dumpd.

Every *leaf* module (one without children: Conv2d, ReLU, Linear, ...) is one "op". Each
call of it is one op execution, dumped as one record whose tensors are the call's
positional inputs and its outputs::

    import dumpd, dumpd.torch

    client = dumpd.Client("data_dump.json", socket="/run/dumpd/dumpd.sock")
    handle = dumpd.torch.attach(model, client)          # hooks on every leaf module
    for batch in dumpd.torch.steps(client, loader):     # marks iteration 0, 1, 2, ...
        loss = loss_fn(model(batch.x), batch.y)
        loss.backward()
        optimizer.step()
    handle.remove()
    client.close()                                      # flushes, then ends the session

Names follow MindSpore's full scope names: the path of module attribute names, each
followed by its class, then ``<Class>-op<N>`` where N is the module's index in
``model.named_modules()`` (stable for a given model)::

    features.0 (Conv2d) in a model with `features = nn.Sequential(...)`
        -> op type "Conv2d", name "Default/features-Sequential/0-Conv2d/Conv2d-op2"

so job-config kernel filters such as ``"conv"`` (op type contains), a full name, or
``"name-regex(Default/features.+)"`` select modules. ``handle.names`` maps each module path
to its full name. With ``backward=True`` gradients are dumped too, as a backward op named
``Gradients/<forward scope>/grad<Class>/<Class>Grad-op<N>`` whose inputs are the gradients
arriving at the module's outputs and whose outputs are the gradients of its inputs.

Cost: when the filter rejects an op (iteration, device, kernel or input_output), its
tensors are not touched. CPU tensors are copied once, straight into shared memory
(``tensor.detach().numpy()`` shares memory; bfloat16 goes as its raw bits). CUDA tensors
cost the step one device-to-device snapshot on the current stream and no host
synchronisation: dumpd's own copy stream moves them into the (pinned) ring, and
``client.flush()`` waits for those copies. Where CUDA cannot be used (a build without it, no
driver), a CUDA tensor raises DaemonError unless the client was made with
``cuda_fallback="host"``, which copies with ``tensor.cpu()`` (synchronous) after one warning.
Other device types are copied with ``tensor.cpu()``. Non-tensor inputs and outputs
are skipped (their slot numbers stay reserved); nested tuple/list/dict outputs are
flattened in order, one slot per leaf. Sparse and quantized tensors, and dtypes numpy
cannot represent (complex32, float8, ...), are skipped.

In-place modules (``inplace=True``, e.g. ``nn.ReLU(inplace=True)``) overwrite their input:
for them the inputs are dumped by a forward *pre*-hook (a separate record of the same op,
before the module runs) so the dumped input is the real one. ``backward=True`` uses
``register_full_backward_hook``, which PyTorch does not allow together with in-place
modules that modify a hooked module's output; use ``inplace=False`` modules then.

Dump once: within a step, a tensor dumped again unchanged (a module's output as the next
module's input; same tensor object, same version counter) is sent as a reference to the
first dump, not copied again; the daemon hard-links its file. Writes through ``.data``
bypass the version counter: a model that changes a dumped tensor that way between two of
its dumps in one step should use ``dumpd.Client(..., dump_once=False)``.

Only leaf modules are hooked: work a non-leaf module does in its own ``forward`` (outside
its children) is not dumped.

Errors: by default a DaemonError (daemon gone, session ended) raised in a hook propagates
out of the model's forward or backward. ``attach(..., errors="warn")`` (and the same option
of :func:`step`/:func:`steps`) turns it into one RuntimeWarning and stops dumping, so a
long training run survives a daemon restart. The client notices a dead daemon at its next
step mark (set_step), flush, or when the ring is full.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Dict, Iterable, Iterator, List, Tuple, TypeVar

import torch

import dumpd

__all__ = ["attach", "AttachHandle", "op_names", "step", "steps", "StepScope"]

_T = TypeVar("_T")

# Tensor dtypes .numpy() represents exactly, as dumpd dtypes of the same name.
_NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)


# dumpd dtype names of the tensor dtypes a CUDA tensor can be dumped as (bytes as they are).
_DEVICE_DTYPES = {
    torch.bool: "bool",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
}
for _name in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        _DEVICE_DTYPES[getattr(torch, _name)] = _name


class _Identities:
    """Dump once: one identity per (tensor object, version counter). Within a step, the very
    tensor dumped again (a module's output as the next module's input), unchanged since, gets
    the identity it had, and the client sends a reference instead of its bytes. An entry goes
    away with its tensor (weakref), so a new tensor can never inherit an identity."""

    __slots__ = ("entries", "next")

    def __init__(self) -> None:
        self.entries: Dict[int, Tuple[Any, int, int]] = {}
        self.next = 1

    def of(self, t: torch.Tensor) -> int | None:
        try:
            version = t._version
        except RuntimeError:  # inference tensors have no version counter
            return None
        key = id(t)
        entry = self.entries.get(key)
        if entry is not None and entry[0]() is t and entry[1] == version:
            return entry[2]
        identity = self.next
        self.next += 1
        entries = self.entries

        def gone(ref: Any, key: int = key) -> None:
            current = entries.get(key)
            if current is not None and current[0] is ref:
                del entries[key]

        try:
            self.entries[key] = (weakref.ref(t, gone), version, identity)
        except TypeError:
            return None
        return identity


class _Items:
    """Builds one op's dump items. CUDA tensors become dumpd.DeviceArray (no host copy);
    temporaries made for them (contiguous copies) stay referenced in `keep` until the op is
    enqueued, so the allocator cannot hand their memory to another tensor of the same op."""

    __slots__ = ("session", "keep", "cuda_device")

    def __init__(self, session: "_Session") -> None:
        self.session = session
        self.keep: List[Any] = []
        self.cuda_device: int | None = None

    def item(self, value: Any) -> Any:
        """One dump_op item for `value`: an array, an (array, dtype) pair, or None."""
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            return None
        if value.is_quantized or value.device.type == "meta":
            return None
        item = self.plain_item(value)
        if item is None or not value.is_contiguous():
            return item  # a contiguous copy is new each time: nothing to repeat
        identity = self.session.identities.of(value)
        if isinstance(item, tuple):
            return (item[0], item[1], identity)
        return (item, None, identity)

    def plain_item(self, value: torch.Tensor) -> Any:
        t = value.detach()
        if (t.device.type == "cuda" and t.dtype in _DEVICE_DTYPES and
                self.session.cuda_on_device()):
            return self.device_item(t)
        if t.dtype not in _NUMPY_DTYPES and t.dtype != torch.bfloat16:
            return None
        if t.device.type != "cpu":
            t = t.cpu()  # synchronous host copy (non-CUDA devices, cuda_fallback="host")
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        if t.dtype == torch.bfloat16:
            # Same element size, so this is a view (no copy) of the raw bfloat16 bits.
            return (t.view(torch.int16).numpy(), "bfloat16")
        # Shares memory; a non-contiguous view is made contiguous by the client (one copy).
        return t.numpy()

    def device_item(self, t: torch.Tensor) -> Any:
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        if not t.is_contiguous():
            t = t.contiguous()  # on the current stream, like the snapshot after it
            self.keep.append(t)
        device = t.device.index
        if self.cuda_device is None:
            self.cuda_device = device
        return dumpd.DeviceArray(t.data_ptr(), t.shape, _DEVICE_DTYPES[t.dtype], device)

    def flatten(self, value: Any, out: List[Any]) -> None:
        """Appends the dump items of `value` (tensor, or nested tuple/list/dict of them)."""
        if isinstance(value, (tuple, list)):
            for v in value:
                self.flatten(v, out)
        elif isinstance(value, dict):
            for v in value.values():
                self.flatten(v, out)
        else:
            out.append(self.item(value))

    def of(self, value: Any) -> List[Any]:
        out: List[Any] = []
        self.flatten(value, out)
        return out

    def stream(self) -> int | None:
        """The current stream of the op's CUDA device: the snapshot is enqueued on it."""
        if self.cuda_device is None:
            return None
        return torch.cuda.current_stream(self.cuda_device).cuda_stream


def op_names(model: torch.nn.Module, prefix: str = "Default") -> Dict[str, Tuple[str, str]]:
    """Maps each leaf module's path in `model` ("features.0") to (op_type, full_name).

    The full name is ``prefix/<attr>-<Class>/.../<Class>-op<N>``, N being the module's
    index in ``model.named_modules()``. A model that is itself a leaf is
    ``prefix/<Class>-op0``.
    """
    modules = dict(model.named_modules())
    result: Dict[str, Tuple[str, str]] = {}
    for index, (path, module) in enumerate(modules.items()):
        if next(module.children(), None) is not None:
            continue
        scope = [prefix]
        if path:
            parts = path.split(".")
            for i in range(len(parts)):
                owner = modules[".".join(parts[: i + 1])]
                scope.append(f"{parts[i]}-{type(owner).__name__}")
        op_type = type(module).__name__
        result[path] = (op_type, "/".join(scope + [f"{op_type}-op{index}"]))
    return result


def _gradient_name(full_name: str, op_type: str) -> str:
    scope, _, last = full_name.rpartition("/")
    number = last.rpartition("-op")[2]
    return f"Gradients/{scope}/grad{op_type}/{op_type}Grad-op{number}"


def _check_errors(errors: str) -> None:
    if errors not in ("raise", "warn"):
        raise ValueError(f'errors must be "raise" or "warn", got {errors!r}')


def _warn(error: dumpd.DaemonError, what: str) -> None:
    warnings.warn(f"dumpd: {what}: {error}", RuntimeWarning, stacklevel=3)


class _Session:
    """What the hooks of one attach() share: the client and the error policy."""

    __slots__ = ("client", "errors", "error", "cuda_mode", "identities")

    def __init__(self, client: dumpd.Client, errors: str) -> None:
        self.client = client
        self.identities = _Identities()
        self.errors = errors
        self.error: dumpd.DaemonError | None = None
        self.cuda_mode: str | None = None  # "device" or "host", decided at the first one

    def cuda_on_device(self) -> bool:
        """True when CUDA tensors go device-to-ring; False for the host fallback. Raises
        DaemonError when CUDA cannot be used and the client did not ask for the fallback."""
        if self.cuda_mode is None:
            reason = dumpd.cuda_unavailable_reason()
            if reason is None:
                self.cuda_mode = "device"
            elif self.client.cuda_fallback == "host":
                warnings.warn(f"dumpd: {reason}; CUDA tensors are copied with tensor.cpu() "
                              "(cuda_fallback=\"host\"), which synchronises with the device",
                              RuntimeWarning, stacklevel=4)
                self.cuda_mode = "host"
            else:
                raise dumpd.DaemonError(f"{reason}. Pass cuda_fallback=\"host\" to dumpd.Client "
                                        "to copy CUDA tensors through host memory instead")
        return self.cuda_mode == "device"

    def dump(self, op_type: str, name: str, inputs: Any, outputs: Any, want_in: bool,
             want_out: bool) -> None:
        """Dumps the selected sides of one op execution (nothing is touched otherwise)."""
        if self.error is not None:
            return
        client = self.client
        try:
            want_in = want_in and client.should_dump(name, "input")
            want_out = want_out and client.should_dump(name, "output")
            if want_in or want_out:
                items = _Items(self)
                ins = items.of(inputs) if want_in else ()
                outs = items.of(outputs) if want_out else ()
                client.dump_op(op_type, name, inputs=ins, outputs=outs, stream=items.stream())
        except dumpd.DaemonError as e:
            if self.errors == "raise":
                raise
            self.error = e
            _warn(e, "dumping stopped, training goes on")


class _ForwardHook:
    """Forward hook of one leaf module: one dump_op per call."""

    __slots__ = ("session", "op_type", "name", "inputs", "outputs")

    def __init__(self, session: _Session, op_type: str, name: str, inputs: bool,
                 outputs: bool) -> None:
        self.session = session
        self.op_type = op_type
        self.name = name
        self.inputs = inputs
        self.outputs = outputs

    def __call__(self, module: torch.nn.Module, args: Tuple[Any, ...], output: Any) -> None:
        self.session.dump(self.op_type, self.name, args, output, self.inputs, self.outputs)


class _InputPreHook:
    """Forward pre-hook of an in-place module: dumps its inputs before they are overwritten."""

    __slots__ = ("session", "op_type", "name")

    def __init__(self, session: _Session, op_type: str, name: str) -> None:
        self.session = session
        self.op_type = op_type
        self.name = name

    def __call__(self, module: torch.nn.Module, args: Tuple[Any, ...]) -> None:
        self.session.dump(self.op_type, self.name, args, (), True, False)


class _BackwardHook:
    """Full backward hook: one backward-op record (grad_output in, grad_input out)."""

    __slots__ = ("session", "op_type", "name", "inputs", "outputs")

    def __init__(self, session: _Session, op_type: str, name: str, inputs: bool,
                 outputs: bool) -> None:
        self.session = session
        self.op_type = op_type
        self.name = name
        self.inputs = inputs
        self.outputs = outputs

    def __call__(self, module: torch.nn.Module, grad_input: Tuple[Any, ...],
                 grad_output: Tuple[Any, ...]) -> None:
        self.session.dump(self.op_type, self.name, grad_output, grad_input, self.inputs,
                          self.outputs)


class AttachHandle:
    """What :func:`attach` returns: ``remove()`` takes every hook off the model.

    ``names`` maps each hooked module's path ("features.0") to its full op name;
    ``gradient_names`` likewise for the backward ops (empty unless backward=True).
    ``error`` is the DaemonError that stopped dumping under ``errors="warn"`` (else None).
    Also a context manager: hooks are removed when the ``with`` block ends.
    """

    def __init__(self, hooks: List[Any], names: Dict[str, str],
                 gradient_names: Dict[str, str], session: _Session) -> None:
        self._hooks = hooks
        self._session = session
        self.names = names
        self.gradient_names = gradient_names

    @property
    def error(self) -> dumpd.DaemonError | None:
        return self._session.error

    def remove(self) -> None:
        """Removes all hooks (idempotent)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def __enter__(self) -> "AttachHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def attach(model: torch.nn.Module, client: dumpd.Client, *, inputs: bool = True,
           outputs: bool = True, backward: bool = False, prefix: str = "Default",
           errors: str = "raise") -> AttachHandle:
    """Hooks every leaf module of `model` so each call dumps its inputs and outputs.

    inputs/outputs: which sides to dump at all (the job config's input_output and kernel
    filters apply on top). backward: also dump gradients via full backward hooks.
    prefix: the first component of every full name ("Default", as in MindSpore).
    errors: what a DaemonError in a hook does (the daemon died, the session ended):
    "raise" propagates it out of the model's forward/backward; "warn" issues one
    RuntimeWarning and stops dumping, so training goes on (``handle.error`` keeps it).
    Returns an :class:`AttachHandle`; call ``.remove()`` to detach.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(client, dumpd.Client):
        raise TypeError(f"client must be a dumpd.Client, got {type(client).__name__}")
    _check_errors(errors)
    session = _Session(client, errors)
    # A model on CUDA: pin the ring and set up staging now, not inside the first dumped step.
    devices = {t.device.index for t in list(model.parameters()) + list(model.buffers())
               if t.is_cuda}
    if devices and dumpd.cuda_unavailable_reason() is None:
        for index in sorted(devices):
            client.prepare_cuda(index)
    modules = dict(model.named_modules())
    hooks: List[Any] = []
    names: Dict[str, str] = {}
    gradient_names: Dict[str, str] = {}
    try:
        for path, (op_type, name) in op_names(model, prefix).items():
            module = modules[path]
            names[path] = name
            in_place = bool(getattr(module, "inplace", False))
            if inputs and in_place:
                hooks.append(module.register_forward_pre_hook(
                    _InputPreHook(session, op_type, name)))
            if outputs or (inputs and not in_place):
                hooks.append(module.register_forward_hook(
                    _ForwardHook(session, op_type, name, inputs and not in_place, outputs)))
            if backward:
                grad_type = op_type + "Grad"
                grad_name = _gradient_name(name, op_type)
                gradient_names[path] = grad_name
                hooks.append(module.register_full_backward_hook(
                    _BackwardHook(session, grad_type, grad_name, inputs, outputs)))
    except BaseException:
        for h in hooks:
            h.remove()
        raise
    return AttachHandle(hooks, names, gradient_names, session)


def _guarded(errors: str, what: str, call: Any, *args: Any) -> None:
    try:
        call(*args)
    except dumpd.DaemonError as e:
        if errors == "raise":
            raise
        _warn(e, what)


class StepScope:
    """Returned by :func:`step`. The iteration is already marked when it is created; used
    in a ``with`` block it can also flush when the block ends (``flush=True``)."""

    def __init__(self, client: dumpd.Client, iteration: int, flush: bool, errors: str) -> None:
        self.client = client
        self.iteration = iteration
        self._flush = flush
        self._errors = errors

    def __enter__(self) -> int:
        return self.iteration

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._flush and exc_type is None:
            _guarded(self._errors, "flush failed", self.client.flush)


def step(client: dumpd.Client, iteration: int, graph_id: int = 0, *, flush: bool = False,
         errors: str = "raise") -> StepScope:
    """Marks iteration `iteration` (of graph `graph_id`) for `client`.

    Works as a plain call (``dumpd.torch.step(client, i)``) or as a block::

        with dumpd.torch.step(client, i, flush=True):
            train_one_step()          # dumped under iteration i; flushed when the block ends

    errors="warn" turns a DaemonError (session gone) into a RuntimeWarning.
    """
    _check_errors(errors)
    _guarded(errors, "cannot mark the step", client.set_step, iteration, graph_id)
    return StepScope(client, iteration, flush, errors)


def steps(client: dumpd.Client, iterable: Iterable[_T], *, start: int = 0, graph_id: int = 0,
          flush: bool = False, errors: str = "raise") -> Iterator[_T]:
    """Yields the items of `iterable`, marking iteration start, start+1, ... before each.

    ``for batch in dumpd.torch.steps(client, loader): ...`` dumps batch k's step as
    iteration k (so ``for i in steps(client, range(n))`` has i == iteration). With
    flush=True, each step is flushed before the next item is taken. errors="warn" turns a
    DaemonError (session gone) into a RuntimeWarning and stops marking steps.
    """
    _check_errors(errors)
    failed = False
    for iteration, item in enumerate(iterable, start):
        if not failed:
            try:
                client.set_step(iteration, graph_id)
            except dumpd.DaemonError as e:
                if errors == "raise":
                    raise
                failed = True
                _warn(e, "cannot mark steps any more")
        yield item
        if flush and not failed:
            try:
                client.flush()
            except dumpd.DaemonError as e:
                if errors == "raise":
                    raise
                failed = True
                _warn(e, "flush failed")

