"""Row 15: what dumpd.torch.check_replicas costs a data-parallel training step.

Two ranks over gloo (this machine has two cores) train an MLP with DDP and SGD; blocks of
steps cycle between unchecked, checked (every gradient and parameter digested and exchanged
every step) and digested only (the same digests, no exchange, no comparison), and the median
step time of each is compared. Then, after single steps, the time to digest the step's
gradients and parameters against the time of a plain read of the same bytes in the same
cache state (numpy's sum of their 64-bit words): the digest's rate against the read floor.
One JSON line from rank 0: step times, ratios, bytes digested and exchanged per step.

    python3 bench/replica_bench.py --socket S --dir D [--quick]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

WIDTH = 1024
LAYERS = 4
BATCH = 64


def rank_main(rank, world, init, socket, workdir, blocks, steps, out):
    import numpy as np

    import dumpd
    import dumpd.torch
    from dumpd.torch._replicas import tensor_fingerprint

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    model = nn.Sequential(*layers)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    config = Path(workdir) / "job.json"
    client = dumpd.Client(str(config), socket=socket, rank=rank)
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(rank))

    def step():
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def digest_all():
        return [tensor_fingerprint(t) for p in model.parameters() for t in (p.grad, p)]

    def read_all():
        return [t.detach().numpy().view(np.uint64).sum() for p in model.parameters()
                for t in (p.grad, p)]

    for _ in range(5):
        step()
    modes = ("unchecked", "checked", "digested")
    times = {m: [] for m in modes}
    for b in range(3 * blocks):
        mode = modes[b % 3]
        check = dumpd.torch.check_replicas(model, opt, client) if mode == "checked" else None
        dist.barrier()
        for _ in range(steps):
            t = time.perf_counter()
            step()
            if mode == "digested":
                digest_all()
            times[mode].append(time.perf_counter() - t)
        if check is not None:
            check.remove()
            assert not check.mismatches, check.mismatches
    floor = {"digest": [], "read": []}
    for i in range(2 * steps):
        step()
        t = time.perf_counter()
        digest_all() if i % 2 == 0 else read_all()
        floor["digest" if i % 2 == 0 else "read"].append(time.perf_counter() - t)
    dist.barrier()  # every rank leaves together (see tests/python/replica_worker.py)
    client.close()
    if rank == 0:
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        tensors = sum(1 for _ in model.parameters())
        line = {"bench": "replicas", "world": world, "params_bytes": params,
                "step_s_unchecked": statistics.median(times["unchecked"]),
                "step_s_checked": statistics.median(times["checked"]),
                "step_s_digested": statistics.median(times["digested"]),
                "digest_s": statistics.median(floor["digest"]),
                "read_s": statistics.median(floor["read"]),
                "digested_bytes_per_step": 2 * params,
                "exchanged_bytes_per_step": 8 * (2 + 2 * tensors) * world}
        line["ratio"] = line["step_s_checked"] / line["step_s_unchecked"]
        line["ratio_digested"] = line["step_s_digested"] / line["step_s_unchecked"]
        line["digest_vs_read"] = line["read_s"] / line["digest_s"]
        Path(out).write_text(json.dumps(line))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    config = {"common_dump_settings": {"dump_mode": 0, "path": str(Path(args.dir) / "dump"),
                                       "net_name": "Net", "iteration": "none",
                                       "input_output": 0, "kernels": [],
                                       "support_device": [0, 1, 2, 3, 4, 5, 6, 7]},
              "e2e_dump_settings": {"enable": True, "trans_flag": True}}
    (Path(args.dir) / "job.json").write_text(json.dumps(config))
    blocks, steps = (2, 10) if args.quick else (4, 25)
    with tempfile.TemporaryDirectory() as tmp:
        init, out = os.path.join(tmp, "init"), os.path.join(tmp, "out.json")
        mp.spawn(rank_main, args=(2, init, args.socket, args.dir, blocks, steps, out), nprocs=2)
        print(Path(out).read_text())


if __name__ == "__main__":
    sys.exit(main())
