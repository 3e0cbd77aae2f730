#!/usr/bin/python3
"""Writes the golden dump trees both MindSpore generations would write for cases.json.

An implementation of MindSpore's writer rules separate from dumpd's C++ (read from MindSpore's
npy_header.cc, tensor_summary.cc, tensor_stat_dump.cc and csv_writer.cc; see
docs/compatibility.md): numpy only packs bytes, the statistics are computed here in plain
Python, element by element. Run it after changing the cases; tests/storage/golden_test.cc
writes the same cases through dumpd and compares byte for byte.

  make_golden.py            rewrite cases.json, 2.6/ and 2.7/
"""

import csv as csvlib
import hashlib
import json
import math
import os
import shutil
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TS = 1700000000000000  # every tensor gets TS + its index: per-tensor timestamps

# MindSpore's own system-test vectors (mindspore/tests/st/dump): the spec example (Add of two 2x3
# float32 tensors) and test_e2e_statistic's second step; the expected rows are checked below.
SPEC_X = [[1, 2, 3], [4, 5, 6]]
SPEC_Y = [[7, 8, 9], [10, 11, 12]]


def ramp(n):
    """The values of a {"ramp": n} float32 tensor (golden_test.cc computes the same)."""
    return [((i * 7) % 1000) * 0.125 - 50.0 for i in range(n)]


def special(v):
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "-0": -0.0}.get(v, v)


NP_TYPES = {"bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32,
            "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
            "uint64": np.uint64, "float16": np.float16, "float32": np.float32,
            "float64": np.float64, "complex64": np.complex64}


def source_bytes(dtype, values):
    """The tensor as a producer holds it."""
    if dtype == "bfloat16":
        f32 = np.array(values, dtype=np.float32).view(np.uint32)
        assert all((b & 0xFFFF) == 0 for b in f32.tolist()), "bf16 values must be exact"
        return (f32 >> 16).astype("<u2").tobytes()
    if dtype == "int4":
        nib = [v & 0xF for v in values] + ([0] if len(values) % 2 else [])
        return bytes(nib[i] | (nib[i + 1] << 4) for i in range(0, len(nib), 2))
    return np.array(values, dtype=NP_TYPES[dtype]).tobytes()


def stored_array(dtype, values, shape):
    """What the .npy holds: bf16 as float32, int4 as int8."""
    np_type = {"bfloat16": np.float32, "int4": np.int8}.get(dtype) or NP_TYPES[dtype]
    return np.array(values, dtype=np_type).reshape(shape)


def npy_file(array):
    """npy_header.cc: a comma after every dimension, spaces to a multiple of 64, '\\n'."""
    dims = "".join("%d," % d for d in array.shape)
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (array.dtype.str, dims)
    pad = 64 - (10 + len(text) + 1) % 64
    header = (text + " " * pad + "\n").encode()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + array.tobytes()


def g(v):
    """ostream << double with default precision; NaN without a sign (docs/compatibility.md)."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return "%g" % v


def running_mean(xs):
    """2.6's MeanCalculator: mean += (x - mean) / count."""
    mean = 0.0
    for k, x in enumerate(xs, 1):
        mean += (x - mean) / k
    return mean


def squares_of(xs):
    total = 0.0
    for x in xs:
        total += x * x
    return total


def chunked_sums(xs, gen):
    """avg and the sum of squares as each generation's TensorStatistics splits the tensor.

    2.6: up to 10000 elements one running mean; above, min(n // 10000, 32) chunks whose later
    ones weigh len // total == 0 (an integer quotient). 2.7: up to 20480 elements sum / n;
    above, 20480-element slices, sum of (slice sum / len) * len, over n.
    """
    n = len(xs)
    if gen == "2.6":
        if n <= 10000:
            return running_mean(xs), squares_of(xs)
        threads = min(n // 10000, 32)
        per = n // threads
        avg, squares, total, offset = 0.0, 0.0, 0, 0
        for i in range(threads):
            size = n - offset if i == threads - 1 else per
            total += size
            avg += (running_mean(xs[offset:offset + size]) - avg) * float(size // total)
            squares += squares_of(xs[offset:offset + size])
            offset += size
        return avg, squares
    if n <= 20480:
        total = 0.0
        for x in xs:
            total += x
        return total / n, squares_of(xs)
    total, squares = 0.0, 0.0
    for offset in range(0, n, 20480):
        part = xs[offset:offset + 20480]
        s = 0.0
        for x in part:
            s += x
        total += (s / len(part)) * len(part)
        squares += squares_of(part)
    return total / n, squares


def statistics(values, gen):
    """tensor_summary.cc: the first extreme kept in element order, avg and l2norm chunked."""
    xs = [float(v) for v in values]
    mx, mn = -math.inf, math.inf
    for x in xs:
        if x > mx:
            mx = x
        if x < mn:
            mn = x
    nans = sum(1 for x in xs if math.isnan(x))
    if nans:
        mx = mn = avg = l2 = math.nan
    else:
        avg, squares = chunked_sums(xs, gen)
        l2 = math.sqrt(squares)
    return {"max": g(mx), "min": g(mn), "avg": g(avg), "count": str(len(xs)),
            "negative zero count": str(sum(1 for x in xs if x < 0)),
            "positive zero count": str(sum(1 for x in xs if x > 0)),
            "nan count": str(nans),
            "negative inf count": str(sum(1 for x in xs if x == -math.inf)),
            "positive inf count": str(sum(1 for x in xs if x == math.inf)),
            "zero count": str(sum(1 for x in xs if x == 0)), "l2norm": g(l2)}


def sliced_sha1(data, elements):
    """The newer writer's SHA1: per 20480-element slice above 20480 elements."""
    if elements <= 20480:
        return hashlib.sha1(data).hexdigest()
    step = len(data) // elements * 20480
    hexes = "".join(hashlib.sha1(data[i:i + step]).hexdigest() for i in range(0, len(data), step))
    return hashlib.sha1(hexes.encode()).hexdigest()


HEADERS = {"max": "Max Value", "min": "Min Value", "avg": "Avg Value", "count": "Count",
           "negative zero count": "Negative Zero Count",
           "positive zero count": "Positive Zero Count", "nan count": "NaN Count",
           "negative inf count": "Negative Inf Count",
           "positive inf count": "Positive Inf Count", "zero count": "Zero Count",
           "l2norm": "L2Norm Value", "md5": "MD5", "hash:sha1": "SHA1"}
VALUES = ["max", "min", "avg", "count", "negative zero count", "positive zero count",
          "nan count", "negative inf count", "positive inf count", "zero count", "l2norm"]
CATEGORIES = {"2.6": VALUES + ["md5"], "2.7": VALUES + ["md5", "hash:sha1"]}


def sanitized(name):
    return "".join("_" if c in "/\\. " or ord(c) < 32 else c for c in name)


def cases():
    """The ops, in the order the producer dumps them."""
    t = lambda io, slot, dtype, shape, values: {"io": io, "slot": slot, "dtype": dtype,
                                                "shape": shape, "values": values}
    flat = lambda rows: [v for r in rows for v in r]
    ops = [
        {"op_type": "Add", "op_name": "Default/Add-op0", "tensors": [
            t("input", 0, "float32", [2, 3], flat(SPEC_X)),
            t("input", 1, "float32", [2, 3], flat(SPEC_Y)),
            t("output", 0, "float32", [2, 3], [a + b for a, b in zip(flat(SPEC_X), flat(SPEC_Y))])]},
        # test_e2e_statistic.py, step 2.
        {"op_type": "Add", "op_name": "Default/network/Add-op3", "tensors": [
            t("input", 0, "float32", [3], [1, 2, 3]), t("input", 1, "float32", [3], [2, 2, -10]),
            t("output", 0, "float32", [3], [3, 4, -7])]},
        # Outputs listed first: the rows still come inputs first.
        {"op_type": "Sub", "op_name": "Default/cancel.block 1/Sub-op4", "tensors": [
            t("output", 0, "float64", [9], [1e16, 1, 1, 1, 1, 1, 1, 1, -1e16]),
            t("input", 0, "float32", [], [3.5]),
            t("input", 1, "int16", [1, 2, 1, 3], [1, -2, 3, -4, 5, 0])]},
        {"op_type": "Relu", "op_name": "Default/Relu-op5", "tensors": [
            t("input", 0, "float32", [3], ["-0", 0.0, -1]),
            t("input", 1, "float32", [2], [0.0, "-0"]),
            t("input", 2, "float16", [4], [-1.5, "-0", 0.0, 65504]),
            t("input", 3, "float64", [3], [2, "-0", 0.0]),
            t("output", 0, "bfloat16", [2, 2], ["-0", 0.0, 1.5, -2])]},
        {"op_type": "Div", "op_name": "Default/Div-op6", "tensors": [
            t("input", 0, "float32", [3], [1, "nan", "inf"]),
            t("input", 1, "float32", [3], ["-inf", 2, "inf"]),
            t("output", 0, "float32", [2], ["inf", "-inf"])]},
        {"op_type": "Cast", "op_name": "Default/Cast-op7", "tensors": [
            t("output", 0, "bool", [4], [True, False, True, True]),
            t("output", 1, "int8", [3], [-128, 0, 127]),
            t("output", 2, "int32", [2], [-2147483648, 2147483647]),
            t("output", 3, "int64", [2], [-(2 ** 40), 2 ** 40 + 1]),
            t("output", 4, "uint8", [2], [0, 255]),
            t("output", 5, "uint16", [2], [1, 65535]),
            t("output", 6, "uint32", [1], [4294967295]),
            t("output", 7, "uint64", [2], [0, 12345678901234]),
            t("output", 8, "int4", [5], [-8, 7, 0, -1, 3]),
            t("output", 9, "complex64", [2], [1 + 2j, -3j])]},
        {"op_type": "MatMul", "op_name": "Default/MatMul-op8", "tensors": [
            t("output", 0, "float32", [20481], {"ramp": 20481}),
            t("output", 1, "float32", [4, 5120], {"ramp": 20480})]},
    ]
    # File names of 255 and 256 bytes: the second goes through mapping.csv.
    for length in (255, 256):
        base = "Op.Default/%s-op9.0.0.%d.output.0.DefaultFormat.float32.npy"
        fill = length - len(base % ("", TS))
        ops.append({"op_type": "Op", "op_name": "Default/%s-op9" % ("n" * fill),
                    "tensors": [t("output", 0, "float32", [2], [1, 2])]})
    n = 0
    for op in ops:
        op["task_id"], op["stream_id"] = 0, 0
        for tensor in op["tensors"]:
            tensor["timestamp_us"] = TS + n
            n += 1
    ops[-1]["tensors"][0]["timestamp_us"] = ops[-2]["tensors"][0]["timestamp_us"] = TS
    return ops


def values_of(tensor):
    v = tensor["values"]
    return ramp(v["ramp"]) if isinstance(v, dict) else [special(x) for x in v]


def write_trees(ops):
    """2.6/statistic.csv, 2.7/statistic.csv and npy/ (the same files in both generations;
    the one whose name is over 255 bytes as long.npy)."""
    npy_dir = os.path.join(HERE, "npy")
    shutil.rmtree(npy_dir, ignore_errors=True)
    os.makedirs(npy_dir)
    for gen in ("2.6", "2.7"):
        out = os.path.join(HERE, gen)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        cats = CATEGORIES[gen]
        csv = ["Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape," +
               ",".join(HEADERS[c] for c in cats) + "\n"]
        for op in ops:
            for io in ("input", "output"):
                for tensor in (x for x in op["tensors"] if x["io"] == io):
                    values = values_of(tensor)
                    raw = source_bytes(tensor["dtype"], values)
                    array = stored_array(tensor["dtype"], values, tensor["shape"])
                    name = "%s.%s.0.0.%d.%s.%d.DefaultFormat.%s.npy" % (
                        op["op_type"], sanitized(op["op_name"]), tensor["timestamp_us"], io,
                        tensor["slot"], tensor["dtype"])
                    with open(os.path.join(npy_dir, name if len(name) <= 255 else "long.npy"),
                              "wb") as f:
                        f.write(npy_file(array))
                    if tensor["dtype"] == "complex64":
                        continue  # npy only, no row
                    dims = ",".join(str(d) for d in tensor["shape"])
                    shape = "(%s)" % dims if gen == "2.6" else "[%s]" % dims
                    row = [op["op_type"], sanitized(op["op_name"]) if gen == "2.6" else
                           op["op_name"], "0", "0", str(tensor["timestamp_us"]), io,
                           str(tensor["slot"]), str(len(raw)), tensor["dtype"], '"%s"' % shape]
                    stats = statistics(values, gen)
                    hashed = array.tobytes() if tensor["dtype"] == "int4" else raw
                    for c in cats:
                        row.append(stats[c] if c in stats else hashlib.md5(hashed).hexdigest()
                                   if c == "md5" else sliced_sha1(hashed, len(values)))
                    csv.append(",".join(row) + ",\n")
        with open(os.path.join(out, "statistic.csv"), "w") as f:
            f.writelines(csv)


def check_mindspore_vectors():
    """The rows MindSpore's system tests expect, read from our golden csv."""
    with open(os.path.join(HERE, "2.6", "statistic.csv")) as f:
        rows = list(csvlib.reader(f))[1:]
    # Max, Min, Avg, L2Norm (columns 10, 11, 12, 20).
    picked = [(r[10], r[11], r[20]) for r in rows[:3]]
    assert picked == [("6", "1", "9.53939"), ("12", "7", "23.6432"), ("18", "8", "32.9242")]
    picked = [(r[10], r[11], r[12], r[20]) for r in rows[3:6]]
    assert picked == [("3", "1", "2", "3.74166"), ("2", "-10", "-2", "10.3923"),
                      ("4", "-7", "0", "8.60233")], picked
    assert rows[0][9] == "(2,3)" and rows[3][9] == "(3)"


def main():
    ops = cases()
    # What golden_test.cc reads: each tensor's bytes as the producer holds them (hex), or a
    # ramp it computes itself.
    listed = json.loads(json.dumps(ops, default=str))
    for op, out in zip(ops, listed):
        for tensor, t in zip(op["tensors"], out["tensors"]):
            if not isinstance(tensor["values"], dict):
                t["hex"] = source_bytes(tensor["dtype"], values_of(tensor)).hex()
                del t["values"]
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump({"categories": CATEGORIES, "ops": listed}, f, indent=1)
        f.write("\n")
    write_trees(ops)
    check_mindspore_vectors()


if __name__ == "__main__":
    main()
