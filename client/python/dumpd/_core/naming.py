"""MindSpore's full scope names for the ops of a module tree (a torch model, a MindSpore Cell).

A leaf at path ``network._backbone.conv1`` whose owners are a WithLossCell, a LeNet5 and a
Conv2d is named ``Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2d-op<N>``:
each path component followed by its owner's class, then the op's own class with the leaf's
index among the model's modules. That is the scope MindSpore gives the kernels a Cell
launches, so a Cell's op and its kernels share everything but the last component."""

from __future__ import annotations

from typing import Callable, Sequence, Tuple


def full_name(path: str, class_of: Callable[[str], str], index: int,
              prefix: str) -> Tuple[str, str]:
    """(op_type, ``prefix/<attr>-<Class>/.../<Class>-op<index>``) of the module at `path`
    ("" for the model itself); `class_of(path)` is the class name of the module at a path."""
    return op_type_and_name(scope(path, class_of, prefix), class_of(path), index)


def scope(path: str, class_of: Callable[[str], str], prefix: str) -> str:
    """``prefix/<attr>-<Class>/...``: the scope of the module at `path`."""
    parts: Sequence[str] = path.split(".") if path else ()
    names = [prefix]
    for i, part in enumerate(parts):
        names.append(f"{part}-{class_of('.'.join(parts[: i + 1]))}")
    return "/".join(names)


def op_type_and_name(scope_name: str, op_type: str, index: int) -> Tuple[str, str]:
    return op_type, f"{scope_name}/{op_type}-op{index}"


def gradient_name(full: str, op_type: str) -> str:
    """The backward op of forward op `full`: ``Gradients/<scope>/grad<T>/<T>Grad-op<N>``."""
    scope_name, _, last = full.rpartition("/")
    number = last.rpartition("-op")[2]
    return f"Gradients/{scope_name}/grad{op_type}/{op_type}Grad-op{number}"
