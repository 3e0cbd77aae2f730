"""Python-side benchmarks: client.dump against a numpy copy, and the PyTorch training step
with no dumping, with dumpd, and with synchronous np.save hooks. One JSON object per line.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py --socket S --dir D
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

import dumpd
import dumpd.torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "client" / "python" / "examples"))
from train_alexnet import AlexNet  # noqa: E402


def job_config(path, net):
    return {"common_dump_settings": {
        "dump_mode": 0, "path": str(path), "net_name": net, "iteration": "all",
        "saved_data": "tensor", "input_output": 0, "kernels": [], "support_device": [0]}}


def critical_path(args):
    ring = 512 << 20
    for size in (4 << 10, 64 << 10, 1 << 20, 16 << 20):
        src = np.full(size, 7, dtype=np.uint8)
        per_burst = max(1, (ring // 2) // (size + 4096))
        dst = np.zeros(per_burst * size, dtype=np.uint8)  # pre-faulted, like the ring
        bursts = 2 if args.quick else 4
        with dumpd.Client(config=job_config(Path(args.dir) / "dump", f"Py{size}"),
                          socket=args.socket, ring_bytes=ring, backpressure="block") as c:
            dump_s = copy_s = 0.0
            for b in range(bursts):
                c.set_step(b)
                t0 = time.perf_counter()
                for i in range(per_burst):
                    c.dump("Copy", "Default/op-op0", "output", i, src)
                dump_s += time.perf_counter() - t0
                c.flush()
                t0 = time.perf_counter()
                for i in range(per_burst):
                    np.copyto(dst[i * size:(i + 1) * size], src)
                copy_s += time.perf_counter() - t0
        total = bursts * per_burst * size
        print(json.dumps({"bench": "critical_path", "lang": "python", "size": size,
                          "dump_bytes_per_s": total / dump_s,
                          "memcpy_bytes_per_s": total / copy_s}), flush=True)


def train_steps(model, steps, batch, size, on_step=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, 10, (batch,))
    times = []
    for i in range(steps + 1):  # step 0 warms up
        if on_step:
            on_step(i)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return sum(times[1:]) / steps


def training(args):
    torch.set_num_threads(2)
    steps = 2 if args.quick else 4
    batch, size, width = 16, 227, 16

    def fresh():
        torch.manual_seed(0)
        return AlexNet(width=width)

    none_s = train_steps(fresh(), steps, batch, size)

    with dumpd.Client(config=job_config(Path(args.dir) / "dump", "AlexNet"),
                      socket=args.socket, ring_bytes=1 << 30, backpressure="block") as c:
        model = fresh()
        handle = dumpd.torch.attach(model, c)
        dumpd_s = train_steps(model, steps, batch, size, on_step=lambda i: dumpd.torch.step(c, i))
        handle.remove()
        bytes_per_step = c.stats()["bytes_committed"] / (steps + 1)
        c.flush()

    save_dir = Path(args.dir) / "npsave"
    save_dir.mkdir(parents=True, exist_ok=True)
    model = fresh()
    counter = [0]

    def save(module, inputs, output):
        for k, t in enumerate(list(inputs) + [output]):
            if isinstance(t, torch.Tensor):
                counter[0] += 1
                np.save(save_dir / f"{counter[0]}.npy", t.detach().numpy())

    hooks = [m.register_forward_hook(save) for m in model.modules()
             if not list(m.children())]
    npsave_s = train_steps(model, steps, batch, size)
    for h in hooks:
        h.remove()
    print(json.dumps({"bench": "training", "batch": batch, "size": size, "width": width,
                      "steps": steps, "step_s_none": none_s, "step_s_dumpd": dumpd_s,
                      "step_s_npsave": npsave_s, "dump_bytes_per_step": bytes_per_step}),
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    critical_path(args)
    training(args)


if __name__ == "__main__":
    main()
