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
before the module runs) so the dumped input is the real one. ``backward=True`` passes each
module's tensors through an autograd function whose backward dumps their gradients (torch
2.5 and later: it works under torch.compile too) or uses ``register_full_backward_hook``
(older torch). Either way PyTorch does not allow an in-place change of a hooked module's
output ("... is a view and is being modified inplace"): attach(backward=True) refuses
in-place modules with a ValueError naming them (use ``inplace=False``), and an in-place
change in a parent's forward (``out += identity``) must be written out of place.

Under ``torch.compile`` the hooks are traced: each puts a ``dumpd::dump`` custom op in the
graph (dumpd/torch/_compiled.py), so nothing breaks the graph, and what is selected is
decided when the op runs, never by a guard; blocks compiled one by one share their graphs.

Dump once: within a step, a tensor dumped again unchanged (a module's output as the next
module's input; same tensor object, same version counter) is sent as a reference to the
first dump, not copied again; the daemon hard-links its file. Writes through ``.data``
bypass the version counter: a model that changes a dumped tensor that way between two of
its dumps in one step should use ``dumpd.Client(..., dump_once=False)``.

Only leaf modules are hooked: work a non-leaf module does in its own ``forward`` (outside
its children) is not dumped. A module that never calls its leaves (``nn.MultiheadAttention``
uses ``out_proj``'s weight itself) is dumped as a *unit* in a call where none of its hooked
modules ran: its own inputs and outputs (dumpd/torch/_units.py; ``attach(units=...)`` names
more). At the first step mark after the model ran, one RuntimeWarning names the hooked
modules that did not run. A ``torch.compile`` wrapper is named as the module it wraps, so
names do not depend on whether the model was compiled before or after attach().

Replicas: ``check_replicas(model, optimizer, client)`` compares the gradients and parameters
of a data-parallel model across the ranks of its process group on every optimizer step and
reports tensors whose replicas differ, the mark of silent data corruption (docs/replicas.md).
``digest(tensor)`` is the replica digest in torch operations: on the tensor's device, with no
host synchronisation, and traceable by ``torch.compile``.

Errors: by default a DaemonError (daemon gone, session ended) raised in a hook propagates
out of the model's forward or backward. ``attach(..., errors="warn")`` (and the same option
of :func:`step`/:func:`steps`) turns it into one RuntimeWarning and stops dumping, so a
long training run survives a daemon restart; a record the client refuses (a ValueError: larger
than the ring) does the same under "warn". A step mark that timed out (the ring full for the
daemon's block_timeout_ms) warns and :func:`steps` marks the next step again, so no step is
filed under the one before. The client notices a dead daemon at its next step mark
(set_step), flush, or when the ring is full.
"""

from __future__ import annotations

from dumpd.torch._attach import AttachHandle, attach, op_names
from dumpd.torch._digest import digest
from dumpd.torch._items import _DEVICE_DTYPES  # noqa: F401  (tests/gpu builds DeviceArrays with it)
from dumpd.torch._replicas import Mismatch, ReplicaCheck, check_replicas
from dumpd.torch._steps import StepScope, step, steps

__all__ = ["attach", "AttachHandle", "op_names", "step", "steps", "StepScope",
           "check_replicas", "ReplicaCheck", "Mismatch", "digest"]

# The public names are documented (help(), repr) where users import them from.
for _public in (attach, op_names, check_replicas,
                ReplicaCheck, Mismatch, digest):
    _public.__module__ = __name__
del _public
