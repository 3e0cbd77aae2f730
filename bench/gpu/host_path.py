#!/usr/bin/env python3
"""What one dumped CUDA tensor costs the producer thread (issue 23, step 2): microseconds per
`dump_op` call, the call returning as soon as the work is enqueued, for statistics (one
96-byte record crosses) and full tensors, small and large, with and without staging; beside
the same call with a 4-byte host array and `should_dump` alone (the binding's floor).
One JSON line per case.  DUMPD_BIN=.../dumpd python3 host_path.py"""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import dumpd
from dumpd.torch._session import _Session

CALLS = 2000


def busy_device(work, sock):
    """The same statistics dump_op while the stream is busy (a 0.5 s sleep kernel queued
    first), as in a training step where the host runs ahead of the device: does enqueueing
    get slower with the queue's depth? One JSON line per depth."""
    root = work / "busy"
    cfg = {"common_dump_settings": {
        "dump_mode": 0, "path": str(root), "net_name": "Net", "iteration": "all",
        "saved_data": "statistic", "input_output": 0, "kernels": [], "support_device": [0]}}
    t = torch.randn(1 << 20, device="cuda")
    with dumpd.Client(config=cfg, socket=sock, ring_bytes=1 << 30,
                      device_staging_bytes=1 << 30) as c:
        c.prepare_cuda(0)
        arr = dumpd.DeviceArray(t.data_ptr(), t.shape, "float32", 0)
        stream = torch._C._cuda_getCurrentRawStream(0)
        for depth in (50, 300, 1000):
            for busy in (False, True):
                c.set_step(depth * 2 + busy)
                torch.cuda.synchronize()
                if busy:
                    torch.cuda._sleep(int(1e9))  # ~0.5 s of device time on this stream
                before = c.stats()
                t0 = time.perf_counter()
                for i in range(depth):
                    c.dump_op("Op", f"Default/Op-op{i}", outputs=[arr], stream=stream)
                us = (time.perf_counter() - t0) / depth * 1e6
                after = c.stats()
                torch.cuda.synchronize()
                per = {k: (after[k] - before[k]) / depth / 1e3 for k in (
                    "dump_ns", "device_submit_ns", "device_enqueue_ns", "device_wait_ns")}
                print(json.dumps({"case": "busy_stream" if busy else "idle_stream",
                                  "records": depth, "dump_op_us": us, "inside_us": per}),
                      flush=True)
        c.flush()
    shutil.rmtree(root, ignore_errors=True)


def main():
    work = Path(tempfile.mkdtemp(prefix="hostpath", dir="/dev/shm"))
    sock = str(work / "d.sock")
    (work / "d.json").write_text(json.dumps({"min_free_bytes": 0, "log_level": "warn",
                                             "writer_threads": 8, "max_ring_bytes": 4 << 30}))
    d = subprocess.Popen([os.environ.get("DUMPD_BIN", "dumpd"), "--socket", sock, "--config",
                          str(work / "d.json")])
    while not os.path.exists(sock):
        time.sleep(0.02)
    try:
        busy_device(work, sock)
        for saved in ("statistic", "tensor"):
            for elems in (256, 1 << 20):
                for staging in (0, 1 << 30):
                    root = work / f"{saved}{elems}{staging}"
                    cfg = {"common_dump_settings": {
                        "dump_mode": 0, "path": str(root), "net_name": "Net",
                        "iteration": "all", "saved_data": saved, "input_output": 0,
                        "kernels": [], "support_device": [0]}}
                    t = torch.randn(elems, device="cuda")
                    h = np.ones(1, dtype=np.float32)
                    with dumpd.Client(config=cfg, socket=sock, ring_bytes=2 << 30,
                                      device_staging_bytes=staging) as c:
                        c.prepare_cuda(0)
                        res = {"saved_data": saved, "elements": elems, "staging": staging}
                        arr = dumpd.DeviceArray(t.data_ptr(), t.shape, "float32", 0)
                        stream = torch._C._cuda_getCurrentRawStream(0)
                        session = _Session(c, "raise")
                        for what, call in (
                                ("should_dump", lambda i: c.should_dump(f"Default/Op-op{i}")),
                                ("host_4_bytes", lambda i: c.dump_op("Op", f"Default/Op-op{i}",
                                                                     outputs=[h])),
                                ("cuda", lambda i: c.dump_op("Op", f"Default/Op-op{i}",
                                                             outputs=[t])),
                                # What dumpd.torch passes: a DeviceArray and the raw stream.
                                ("cuda_device_array", lambda i: c.dump_op(
                                    "Op", f"Default/Op-op{i}", outputs=[arr], stream=stream)),
                                # The whole hook path of one op with one output tensor;
                                # the session forgets the tensor each call, so it gets a
                                # new identity and dump once never makes it a reference.
                                ("torch_hook", lambda i: (
                                    session.identities.entries.clear(),
                                    session.dump("Op", f"Default/Op-op{i}", (), t, False,
                                                 True)))):
                            c.set_step(len(res))
                            for i in range(50):
                                call(i)
                            torch.cuda.synchronize()
                            c.flush()
                            c.set_step(len(res) + 100)
                            t0 = time.perf_counter()
                            for i in range(CALLS):
                                call(i)
                            res[f"{what}_us"] = (time.perf_counter() - t0) / CALLS * 1e6
                            c.flush()
                        res["stats"] = {k: v for k, v in c.stats().items()
                                        if k.startswith("device")}
                    print(json.dumps(res), flush=True)
                    shutil.rmtree(root, ignore_errors=True)
    finally:
        d.terminate()
        d.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
