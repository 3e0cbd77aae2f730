#!/usr/bin/python3
"""Reads dumpd output with numpy for the storage conformance tests.

Commands (each prints JSON, one object per line):
  load DIR    every .npy beneath DIR: path, dtype, shape, values, mindspore_identical (the
              file is byte for byte what MindSpore's npy_header.cc and numpy's data layout
              give for the loaded array), version
  file FILE   the same for one file (any name, e.g. a decompressed .npy.lz4)
  hash FILE   md5 and sha1 of the array's bytes
  csv FILE    statistic.csv read with the csv module: header, rows
"""
import csv
import hashlib
import io
import json
import math
import os
import sys

import numpy as np


def plain(value):
    """JSON-safe values: NaN/inf as strings, complex as [re, im]."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, complex):
        return [plain(value.real), plain(value.imag)]
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


def mindspore_npy(array):
    """The file MindSpore writes for `array`, built from the rule in its npy_header.cc: the
    shape with a comma after every dimension, spaces up to a multiple of 64, a newline."""
    shape = "".join("%d," % d for d in array.shape)
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (array.dtype.str, shape)
    version, length_bytes = (1, 2) if 10 + len(text) + 1 <= 65535 else (2, 4)
    preamble = 8 + length_bytes
    pad = 64 - (preamble + len(text) + 1) % 64
    header = (text + " " * pad + "\n").encode("latin1")
    return (b"\x93NUMPY" + bytes([version, 0]) + len(header).to_bytes(length_bytes, "little") +
            header + array.tobytes())


def describe(path, name):
    with open(path, "rb") as f:
        raw = f.read()
    array = np.load(io.BytesIO(raw), allow_pickle=False)
    return {
        "path": name,
        "dtype": str(array.dtype),
        "shape": list(array.shape),
        "values": plain(array.tolist()),
        "mindspore_identical": mindspore_npy(array) == raw,
        "version": raw[6],
    }


def main():
    command, target = sys.argv[1], sys.argv[2]
    if command == "load":
        for root, _, files in sorted(os.walk(target)):
            for name in sorted(files):
                if name.endswith(".npy"):
                    path = os.path.join(root, name)
                    print(json.dumps(describe(path, os.path.relpath(path, target))))
    elif command == "file":
        print(json.dumps(describe(target, target)))
    elif command == "hash":
        data = np.load(target, allow_pickle=False).tobytes()
        print(json.dumps({"md5": hashlib.md5(data).hexdigest(),
                          "sha1": hashlib.sha1(data).hexdigest()}))
    elif command == "csv":
        with open(target, newline="") as f:
            rows = list(csv.reader(f))
        print(json.dumps({"header": rows[0], "rows": rows[1:]}))
    else:
        sys.exit("unknown command " + command)


if __name__ == "__main__":
    main()
