"""Which of MindSpore's kernels stands for a hooked module's op, for ``dumpctl compare --map``.

A Cell's op (``Default/network-WithLossCell/_backbone-Net/fc-Dense/Dense-op7``) and the
kernels MindSpore's own graph-mode dump writes for that Cell share its scope
(``.../fc-Dense/MatMul-op0``, ``.../fc-Dense/BiasAdd-op0``). The Cell's output is its last
kernel's output, so the map pairs each op with the kernel under its scope whose output file
was written last (the largest timestamp in the iteration directory). That holds for a Cell
called once per step; a Cell called several times (one ReLU for every activation) has one
kernel per call and no single partner, and is left out of the map.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterable

# MindSpore's and dumpd's file name: op_type.op_name.task.stream.timestamp.io.slot...
_FILE = re.compile(r"^[^.]+\.(?P<name>[^.]+)\.\d+\.\d+\.(?P<ts>\d+)\.(?P<io>input|output)\.")
_OP_NUMBER = re.compile(r"-op\d+$")


def sanitize(name: str) -> str:
    """The file-name form of an op's full name."""
    return re.sub(r"[/\\. ]", "_", name)


def kernel_map(op_names: Iterable[str], iteration_dir: str | Path) -> Dict[str, str]:
    """{op full name: kernel name (file-name form)} for the ops of `op_names` whose scope holds
    kernels in `iteration_dir` (one iteration of MindSpore's tree: ``rank_0/Net/0/0``), each
    paired with the scope's last kernel. Gradient kernels (``Gradients/...``) are never
    partners; ops whose scope holds two kernels of one type but different numbers (a Cell
    called more than once) are left out."""
    last: Dict[str, int] = {}
    for f in Path(iteration_dir).iterdir():
        m = _FILE.match(f.name)
        if m and m["io"] == "output" and not m["name"].startswith("Gradients"):
            ts = int(m["ts"])
            if ts > last.get(m["name"], -1):
                last[m["name"]] = ts
    result: Dict[str, str] = {}
    for op in op_names:
        scope = sanitize(op.rpartition("/")[0]) + "_"
        inside = {k: ts for k, ts in last.items() if k.startswith(scope)}
        kinds = {}
        for k in inside:
            kind = _OP_NUMBER.sub("", k)
            kinds[kind] = kinds.get(kind, 0) + 1
        if not inside or max(kinds.values()) > 1:
            continue
        result[op] = max(inside, key=inside.__getitem__)
    return result


def write_csv(pairs: Dict[str, str], path: str | Path) -> None:
    """The map as ``dumpctl compare --map`` reads it: ``left,right`` lines."""
    lines = ["left,right"] + [f"{sanitize(a)},{b}" for a, b in sorted(pairs.items())]
    Path(path).write_text("\n".join(lines) + "\n")
