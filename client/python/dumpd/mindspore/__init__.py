"""dumpd.mindspore: dump a MindSpore net's per-Cell inputs and outputs with dumpd.

Every *leaf* Cell (one without child Cells: Conv2d, ReLU, Dense, a loss, the optimizer) is
one op; each call of it is one op execution, dumped as one record::

    import dumpd, dumpd.mindspore

    ms.set_context(mode=ms.PYNATIVE_MODE)
    client = dumpd.Client("data_dump.json", socket="/run/dumpd/dumpd.sock")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer)
    handle = dumpd.mindspore.attach(train, client, backward=True)
    last = None
    for x, y in dumpd.mindspore.steps(client, dataset, loss=lambda: last):
        last = train(x, y)                             # the loss feeds the flight recorder
    handle.remove()
    client.close()

Names are MindSpore's scopes, from the Cell attached to (``Default/network-WithLossCell/
_backbone-LeNet5/conv1-Conv2d/Conv2d-op3``), so a Cell's op shares its scope with the
kernels MindSpore's own dump names for it (``.../conv1-Conv2d/Conv2D-op0``):
``kernel_map(handle.names.values(), "<MindSpore tree>/rank_0/Net/0/0")`` pairs each op with
the last kernel of its scope, and ``write_kernel_map(pairs, "map.csv")`` writes the map
``dumpctl compare --map map.csv`` takes (docs/python.md, "dumpd.mindspore"). Gradients
(backward=True) are ``Gradients/<scope>/grad<Class>/<Class>Grad-op<N>``: inputs are the
gradients arriving at the Cell's outputs, outputs the gradients of its inputs.

Tensors are copied once, from ``Tensor.asnumpy()`` (which shares the tensor's memory on the
CPU) into the ring; a tensor dumped again unchanged within a step (same object, same
``_version``) is sent as a reference. Non-tensor inputs and outputs keep their slot numbers
and are skipped; nested outputs are flattened. Steps, the loss hand-off, the job config, the
flight recorder, ``dumpctl control`` and dump once behave as in dumpd.torch: both are adapters
over dumpd._core.

GRAPH_MODE: MindSpore calls no Cell hook in a compiled graph, so attach() in a GRAPH_MODE
context puts taps in the graph instead (dumpd.mindspore._graph): pyfunc Customs around each
leaf Cell taking one argument, whose bprop taps the gradient. Hooks placed in PyNative are
registered as forbidden in graphs, so ``jit`` (or a later switch to GRAPH_MODE) fails to
compile with MindSpore's own error naming ``hooks_run_in_PYNATIVE_MODE_without_jit``. Never a
silent empty dump: when steps are marked and no hooked Cell ran for three of them, one
RuntimeWarning says so.
"""

from __future__ import annotations

from dumpd._core.kernel_map import kernel_map, write_csv as write_kernel_map
from dumpd._core.steps import StepScope, step, steps
from dumpd.mindspore._attach import AttachHandle, attach, op_names

__all__ = ["attach", "AttachHandle", "op_names", "step", "steps", "StepScope", "kernel_map",
           "write_kernel_map"]
