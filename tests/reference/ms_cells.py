"""A small MindSpore training run for dumpd.mindspore (issue 53), run by a reference
environment's Python with dumpd's build on PYTHONPATH:

    <venv>/bin/python tests/reference/ms_cells.py graph STEPS
        GRAPH_MODE, dumped by MindSpore itself (MINDSPORE_DUMP_CONFIG names the job config)
    <venv>/bin/python tests/reference/ms_cells.py pynative STEPS SOCKET CONFIG NAMES_JSON
        the same net, weights and data in PyNative, dumped by dumpd.mindspore.attach
        (backward=True); NAMES_JSON receives the handle's names
    <venv>/bin/python tests/reference/ms_cells.py graphtap STEPS SOCKET CONFIG NAMES_JSON
        the same in GRAPH_MODE, dumped by dumpd.mindspore's taps
    <venv>/bin/python tests/reference/ms_cells.py recorder STEPS SOCKET CONFIG NAN_STEP
        a LeNet whose fc3 weight turns NaN at NAN_STEP (so does the loss), losses through steps(loss=)
    <venv>/bin/python tests/reference/ms_cells.py api SOCKET CONFIG
        attach()'s refusals, remove() and errors="warn"; prints one JSON line of findings
    <venv>/bin/python tests/reference/ms_cells.py gate SOCKET CONFIG DUMPCTL
        hooks on the Cells only for steps that dump, dumpctl control; prints one JSON line

Prints "step N loss L" per training step. The net holds a Conv2d, a BatchNorm2d, a ReLU, a
reduction (a leaf Cell over ReduceMean), a Dense and a loss, each called once per step, so
each leaf Cell's output is one kernel's output in MindSpore's tree.
"""

import json
import sys
import warnings

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

STEPS_DEFAULT = 3


class GlobalMean(nn.Cell):
    """A leaf Cell of two reductions: the maximum over the width, then the mean over the
    height."""

    def __init__(self):
        super().__init__()
        self.max = ops.ReduceMax(keep_dims=False)
        self.mean = ops.ReduceMean(keep_dims=False)

    def construct(self, x):
        # Int axes: MindSpore 2.10.0's PyNative autograd fails on a tuple or list axis (and on
        # Reshape's shape) beside numpy 2, which its wheel was not built for, as pinned here.
        return self.mean(self.max(x, 3), 2)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, pad_mode="same")
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = GlobalMean()
        self.fc = nn.Dense(8, 10)

    def construct(self, x):
        return self.fc(self.pool(self.relu(self.bn(self.conv(x)))))


class Masked(nn.Cell):
    def construct(self, x, mask=None):
        return x if mask is None else x * mask


class Holder(nn.Cell):
    def __init__(self):
        super().__init__()
        self.masked = Masked()
        self.fc = nn.Dense(4, 4)

    def construct(self, x):
        return self.fc(self.masked(x))


def train_cell(net):
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
    step.set_train()
    return step


def data(shape):
    rng = np.random.default_rng(1)
    x = Tensor(rng.standard_normal(shape).astype(np.float32))
    y = Tensor(rng.integers(0, 10, size=(shape[0],)).astype(np.int32))
    return x, y


def setup(mode):
    ms.set_seed(1)
    ms.set_context(mode=mode)
    ms.set_device("CPU")


def graph(steps):
    setup(ms.GRAPH_MODE)
    step = train_cell(Net())
    x, y = data((4, 3, 8, 8))
    for i in range(steps):
        print(f"step {i} loss {float(step(x, y).asnumpy())!r}", flush=True)


def pynative(steps, sock, config, names_json, mode=ms.PYNATIVE_MODE):
    import dumpd
    import dumpd.mindspore
    setup(mode)
    step = train_cell(Net())
    x, y = data((4, 3, 8, 8))
    client = dumpd.Client(config, socket=sock)
    handle = dumpd.mindspore.attach(step, client, backward=True)
    with open(names_json, "w") as f:
        json.dump({"names": handle.names, "gradient_names": handle.gradient_names}, f)
    last = None
    for i in dumpd.mindspore.steps(client, range(steps), loss=lambda: last):
        last = step(x, y)
        print(f"step {i} loss {float(last.asnumpy())!r}", flush=True)
    handle.remove()
    client.close()


def recorder(steps, sock, config, nan_step):
    import dumpd
    import dumpd.mindspore
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from lenet_ms import LeNet5
    setup(ms.PYNATIVE_MODE)
    net = LeNet5()
    step = train_cell(net)
    x, y = data((4, 1, 32, 32))
    client = dumpd.Client(config, socket=sock)
    dumpd.mindspore.attach(step, client)
    last = None
    for i in dumpd.mindspore.steps(client, range(steps), loss=lambda: last):
        if i == nan_step:
            w = net.fc3.weight.asnumpy().copy()
            w[1, 3] = np.nan  # conv1 .. fc2 stay finite; the logits and the loss do not
            net.fc3.weight.set_data(Tensor(w))
        last = step(x, y)
        print(f"step {i} loss {float(last.asnumpy())!r}", flush=True)
    client.close()


def api(sock, config):
    import dumpd
    import dumpd.mindspore
    found = {}
    setup(ms.GRAPH_MODE)
    client = dumpd.Client(config, socket=sock)
    graph_net = Net()
    handle = dumpd.mindspore.attach(graph_net, client)
    found["graph_mode_names"] = handle.names
    found["graph_mode_class"] = [type(graph_net.conv).__name__,
                                 type(graph_net.conv) is nn.Conv2d]
    handle.remove()  # the Cells get their own classes back
    found["graph_mode_removed"] = [type(graph_net.conv) is nn.Conv2d,
                                   "dumpd_input" in graph_net.conv._cells]
    # A Cell with an optional second argument is not tapped (the tap passes one on), and a
    # net still holding taps is refused a second attach().
    holder = Holder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = dumpd.mindspore.attach(holder, client)
    found["optional_arg_warnings"] = [str(w.message) for w in caught if "dumpd" in str(w.message)]
    found["optional_arg_names"] = sorted(first.names)
    try:
        dumpd.mindspore.attach(holder, client)
        found["second_attach"] = "attached"
    except RuntimeError as e:
        found["second_attach"] = str(e)
    first.remove()
    again = dumpd.mindspore.attach(holder, client)
    found["attach_after_remove"] = sorted(again.names)
    again.remove()
    try:
        dumpd.mindspore.attach(object(), client)
    except TypeError as e:
        found["not_a_cell"] = str(e)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = Net()
    x, _ = data((2, 3, 8, 8))
    handle = dumpd.mindspore.attach(net, client)
    found["names"] = handle.names
    dumpd.mindspore.step(client, 0)
    net(x)
    stats = client.flush()
    found["after_one_call"] = stats["tensors_received"]
    found["linked_one_call"] = stats["tensors_linked"]
    handle.remove()
    dumpd.mindspore.step(client, 1)
    net(x)
    found["after_remove"] = client.flush()["tensors_received"]
    # Under jit MindSpore compiles the hooks into the graph: refused, naming what to do.
    jitted = Net()
    jitted.construct = ms.jit(jitted.construct)
    handle = dumpd.mindspore.attach(jitted, client)
    try:
        jitted(x)
        found["jit"] = "ran"
    except RuntimeError as e:
        found["jit"] = str(e).splitlines()[0]
    handle.remove()
    # GRAPH_MODE set after attach(): the hooks are compiled too, and refused the same way.
    late = Net()
    handle = dumpd.mindspore.attach(late, client)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        late(x)
        found["graph_after_attach"] = "ran"
    except RuntimeError as e:
        found["graph_after_attach"] = str(e).splitlines()[0]
    handle.remove()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    # Steps marked and no hook ever ran (the net attached is not the one that runs): after
    # three marks one warning says so.
    idle = Net()
    handle = dumpd.mindspore.attach(idle, client)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in dumpd.mindspore.steps(client, range(2, 7)):
            net(x)
    found["idle_warnings"] = [str(w.message) for w in caught if "dumpd" in str(w.message)]
    handle.remove()
    # errors="warn": the session ends under the hooks; training goes on, one warning.
    handle = dumpd.mindspore.attach(net, client, errors="warn")
    client.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net(x)
        net(x)
    found["warn_warnings"] = [str(w.message) for w in caught if "dumpd" in str(w.message)]
    found["warn_error"] = str(handle.error)
    print(json.dumps(found), flush=True)


def gate(sock, config, dumpctl):
    """Iterations "2|4" selected, then `dumpctl control` selects 8-9 during step 5: the hooks
    on the Cells per step (0 is armed until something fired), and what was dumped. Prints
    one JSON line."""
    import os
    import subprocess
    import dumpd
    import dumpd.mindspore
    setup(ms.PYNATIVE_MODE)
    net = Net()
    x, _ = data((2, 3, 8, 8))
    client = dumpd.Client(config, socket=sock)
    handle = dumpd.mindspore.attach(net, client, backward=True)
    placed = []
    for i in dumpd.mindspore.steps(client, range(11)):
        placed.append(len(handle._hooks[0].handles))
        if i == 5:
            subprocess.run([dumpctl, "--socket", sock, "control", "--pid", str(os.getpid()),
                            "--iteration", "8-9"], check=True, capture_output=True)
        ms.grad(lambda v: net(v).sum())(x)
    client.flush()
    handle.remove()
    print(json.dumps({"placed": placed}), flush=True)
    client.close()


def main():
    mode = sys.argv[1]
    if mode == "graph":
        graph(int(sys.argv[2]))
    elif mode == "pynative":
        pynative(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
    elif mode == "graphtap":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pynative(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], ms.GRAPH_MODE)
        for w in caught:
            print(f"warning: {w.message}", flush=True)
    elif mode == "recorder":
        recorder(int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif mode == "api":
        api(sys.argv[2], sys.argv[3])
    elif mode == "gate":
        gate(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
