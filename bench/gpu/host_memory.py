#!/usr/bin/env python3
"""The host's memory bandwidth, for the physical bound of dumping every iteration (issue 23):
bytes copied per second by one thread (numpy) and by all cores (torch's parallel copy).
One JSON line."""

import json
import os
import time

import numpy as np
import torch

GiB = 1 << 30


def best(f, n=5):
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    a = np.ones(2 * GiB, dtype=np.uint8)
    b = np.ones_like(a)
    one = a.nbytes / best(lambda: np.copyto(b, a))
    del a, b
    threads = os.cpu_count()
    torch.set_num_threads(threads)
    x = torch.ones(4 * GiB, dtype=torch.uint8)
    y = torch.ones_like(x)
    allc = x.numel() / best(lambda: y.copy_(x))
    print(json.dumps({"bench": "host_memory", "copy_one_thread_bytes_per_s": one,
                      "copy_all_cores_bytes_per_s": allc, "threads": threads}))


if __name__ == "__main__":
    main()
