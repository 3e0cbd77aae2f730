#!/usr/bin/python3
"""Reads dumpd output with numpy for the storage conformance tests.

Commands (each prints JSON, one object per line):
  load DIR    every .npy beneath DIR: path, dtype, shape, values, numpy_identical (the file
              is byte for byte what numpy.save writes for the loaded array), version
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


def describe(path, name):
    with open(path, "rb") as f:
        raw = f.read()
    array = np.load(io.BytesIO(raw), allow_pickle=False)
    again = io.BytesIO()
    np.save(again, array)
    return {
        "path": name,
        "dtype": str(array.dtype),
        "shape": list(array.shape),
        "values": plain(array.tolist()),
        "numpy_identical": again.getvalue() == raw,
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
