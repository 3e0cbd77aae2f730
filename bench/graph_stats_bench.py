"""What a statistics row costs inside a compiled graph (dumpd/torch/_graph_stats.py), on the
CPU: a training-mode BatchNorm and a ReLU over a channels-last 32x64x32x32 float32 tensor
(8 MiB), compiled alone (the reference) and with the rows of the BatchNorm's input, its
output and the ReLU's output, as three dump points of a statistics-only job compute them.
Torch on two threads. One JSON object per line: median milliseconds per call, and the rows'
cost as GB/s of the 24 MiB they cover.

    PYTHONPATH=build/python /var/cache/dumpd-reference/torch2/bin/python \\
        bench/graph_stats_bench.py
"""

import json
import statistics
import time

import torch

from dumpd.torch import _graph_stats


def batch_norm_relu(x, weight, bias):
    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    var = x.var(dim=(0, 2, 3), keepdim=True)
    y = (x - mean) / torch.sqrt(var + 1e-5) * weight.view(1, -1, 1, 1) + bias.view(1, -1, 1, 1)
    return y, torch.relu(y)


def plain(x, weight, bias):
    return batch_norm_relu(x, weight, bias)[1]


def with_rows(x, weight, bias):
    y, z = batch_norm_relu(x, weight, bias)
    return z, _graph_stats.row(x), _graph_stats.row(y), _graph_stats.row(z)


def timed(fn, args, calls=30):
    for _ in range(3):
        fn(*args)  # compiles
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    torch.set_num_threads(2)
    x = torch.randn(32, 64, 32, 32).contiguous(memory_format=torch.channels_last)
    weight, bias = torch.randn(64), torch.randn(64)
    reference = timed(torch.compile(plain), (x, weight, bias))
    rows = timed(torch.compile(with_rows), (x, weight, bias))
    covered = 3 * x.numel() * x.element_size()
    print(json.dumps({"bench": "graph_stats", "torch": torch.__version__,
                      "reference_ms": reference * 1e3, "with_rows_ms": rows * 1e3,
                      "rows_gb_s": covered / (rows - reference) / 1e9}), flush=True)


if __name__ == "__main__":
    main()
