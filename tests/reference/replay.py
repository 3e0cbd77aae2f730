"""The replay producer (issue 39): sends a golden MindSpore run's kernels through dumpd's
Python client as a training process would, so that dumpd's tree can be compared with the one
MindSpore wrote. It passes only what a training process knows: the graph's execution order,
each kernel's op type and full scope name, the iteration, and its inputs and outputs as
arrays, in execution order. File names are dumpd's to build.

The source is a golden tree dumped with `input_output` 0 and no kernel filter (every input
and output of every kernel). Kernels whose file name the execution order does not list
under the same op number get their full name back from it (full_names_of); the rest
(MindSpore's `Parameter.<name>` files) are sent under the name in their file name.
"""

import re

import numpy as np

# MindSpore's file name: op_type.op_name.task.stream.timestamp.io.slot.format.dtype.npy
FILE_NAME = re.compile(r"^(?P<type>[^.]+)\.(?P<name>[^.]+)\.(?P<task>\d+)\.(?P<stream>\d+)\."
                       r"(?P<ts>\d+)\.(?P<io>input|output)\.(?P<slot>\d+)\.(?P<format>[^.]+)\."
                       r"(?P<dtype>[^.]+)\.npy$")


def sanitize(name):
    """The file-name form of a kernel's full name (MindSpore's GetFileKernelName)."""
    return re.sub(r"[/\\. ]", "_", name)


def execution_order(rank_dir, graph=0):
    path = rank_dir / "execution_order" / f"ms_execution_order_graph_{graph}.csv"
    lines = path.read_text().splitlines()
    if not lines or lines[0] != "NodeExecutionOrder-FullNameWithScope":
        raise ValueError(f"{path}: unexpected header {lines[:1]}")
    return lines[1:]


OP_NUMBER = re.compile(r"-op\d+$")


def full_names_of(file_names, full_names):
    """{file-name kernel name: (full name, rank in the execution order)}.

    MindSpore names some kernels in their files with another op number than its execution
    order gives them (2.7.1 and 2.10.0: `Cast-op0` in the file, `Cast-op1` in the order;
    likewise Conv2DBackpropFilter/Input and AddN of the backward pass). Such a kernel's full
    name is its execution-order entry's scope with the file's last component, and it runs
    at that entry's place. Names found nowhere (MindSpore's `Parameter.<name>` files) keep
    their file-name form and run last."""
    exact = {sanitize(n): i for i, n in enumerate(full_names)}
    renumbered = {}
    for i, n in enumerate(full_names):
        renumbered.setdefault(OP_NUMBER.sub("", sanitize(n)), []).append(i)
    out = {}
    for f in file_names:
        if f in exact:
            out[f] = (full_names[exact[f]], exact[f])
            continue
        candidates = renumbered.get(OP_NUMBER.sub("", f), [])
        if len(candidates) == 1 and "/" in full_names[candidates[0]]:
            i = candidates[0]
            scope = full_names[i].rsplit("/", 1)[0]
            out[f] = (scope + "/" + f[len(sanitize(scope)) + 1:], i)
        else:
            out[f] = (f, None)
    return out


def kernels_of(iteration_dir, full_names):
    """[(op_type, full name, task, stream, {io: {slot: array}})] of one iteration directory,
    in the order MindSpore ran them: the execution order, then the rest (parameters) by
    timestamp."""
    ops = {}
    first_ts = {}
    for f in iteration_dir.glob("*.npy"):
        m = FILE_NAME.match(f.name)
        if not m:
            raise ValueError(f"{f}: not a MindSpore tensor file name")
        key = (m["type"], m["name"], int(m["task"]), int(m["stream"]))
        ops.setdefault(key, {"input": {}, "output": {}})[m["io"]][int(m["slot"])] = np.load(f)
        first_ts[key] = min(first_ts.get(key, 1 << 63), int(m["ts"]))
    names = full_names_of({key[1] for key in ops}, full_names)

    def order(key):
        rank = names[key[1]][1]
        return (0, rank, first_ts[key]) if rank is not None else (1, 0, first_ts[key])

    return [(op_type, names[file_name][0], task, stream, ops[(op_type, file_name, task,
                                                                stream)])
            for op_type, file_name, task, stream in sorted(ops, key=order)]


def slots(tensors):
    """Arrays by slot, None where a slot has no file."""
    if not tensors:
        return []
    return [tensors.get(i) for i in range(max(tensors) + 1)]


def perturbed(arrays, seed):
    """Float arrays with noise as large as their own spread added (a divergent run)."""
    rng = np.random.default_rng(seed)
    out = []
    for a in arrays:
        if a is not None and a.dtype.kind == "f" and a.size > 1:
            noise = rng.standard_normal(a.shape) * (float(a.std()) + 1e-3)
            a = (a + noise).astype(a.dtype)
        out.append(a)
    return out


def scaled(arrays, _seed=None):
    """Float arrays four times as large: a divergence every statistic shows (msprobe's
    statistics verdict looks at the maximum only, and fails it above half its size)."""
    return [a * a.dtype.type(4) if a is not None and a.dtype.kind == "f" else a
            for a in arrays]


def as_bfloat16(arrays, _seed=None):
    """float32 arrays rounded to bfloat16 (nearest even) and sent as such: dumpd writes
    their values as float32, with `bfloat16` in the file name."""
    out = []
    for a in arrays:
        if a is not None and a.dtype == np.float32:
            u = a.view(np.uint32).astype(np.uint64)
            one, sixteen = np.uint64(1), np.uint64(16)
            rounded = (u + np.uint64(0x7FFF) + ((u >> sixteen) & one)) >> sixteen
            a = (rounded.astype(np.uint16), "bfloat16")
        out.append(a)
    return out


def replay(client, golden_rank_dir, net, graph=0, perturb=None, change=perturbed):
    """Sends every iteration of golden_rank_dir/net/graph through `client`, after the
    execution order; returns the number of kernels sent. `perturb`: the full name of a
    kernel from which on every float output (and every later kernel's float input) is
    changed by `change` (noise: a run that diverges there; as_bfloat16: a run in bfloat16
    from there)."""
    names = execution_order(golden_rank_dir, graph)
    client.save_execution_order(graph, names)
    sent = 0
    graph_dir = golden_rank_dir / net / str(graph)
    for iteration in sorted(int(p.name) for p in graph_dir.iterdir() if p.name.isdigit()):
        client.set_step(iteration, graph)
        diverged = False
        for op_type, name, task, stream, io in kernels_of(graph_dir / str(iteration), names):
            inputs, outputs = slots(io["input"]), slots(io["output"])
            if perturb is not None and name == perturb:
                diverged = True
                outputs = change(outputs, (iteration, sent))
            elif diverged:
                inputs = change(inputs, (iteration, sent, 0))
                outputs = change(outputs, (iteration, sent, 1))
            client.dump_op(op_type, name, inputs=inputs, outputs=outputs, task_id=task,
                           stream_id=stream)
            sent += 1
    client.flush()
    return sent
