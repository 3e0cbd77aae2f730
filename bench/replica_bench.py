"""Row 15: what dumpd.torch.check_replicas costs a data-parallel training step.

Two ranks over gloo (this machine has two cores) train an MLP with DDP and SGD; blocks of
steps alternate between unchecked and checked (every gradient and parameter digested and
exchanged every step), and the median step time of each is compared. One JSON line from
rank 0: step times, the ratio, the bytes digested and exchanged per step.

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
    import dumpd
    import dumpd.torch

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

    for _ in range(5):
        step()
    times = {"unchecked": [], "checked": []}
    for b in range(2 * blocks):
        checked = b % 2 == 1
        check = dumpd.torch.check_replicas(model, opt, client) if checked else None
        dist.barrier()
        for _ in range(steps):
            t = time.perf_counter()
            step()
            times["checked" if checked else "unchecked"].append(time.perf_counter() - t)
        if check is not None:
            check.remove()
            assert not check.mismatches, check.mismatches
    client.close()
    if rank == 0:
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        tensors = sum(1 for _ in model.parameters())
        line = {"bench": "replicas", "world": world, "params_bytes": params,
                "step_s_unchecked": statistics.median(times["unchecked"]),
                "step_s_checked": statistics.median(times["checked"]),
                "digested_bytes_per_step": 2 * params,
                "exchanged_bytes_per_step": 8 * (1 + 2 * tensors) * world}
        line["ratio"] = line["step_s_checked"] / line["step_s_unchecked"]
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
