"""One rank of tests/python/test_replicas.py: a small DDP model trained with SGD over gloo,
checked by dumpd.torch.check_replicas, with a fault injected on one rank.

argv: rank world init_file socket config steps fault_step fault_rank fault
fault: "param" flips one bit of a parameter after the optimizer step; "grad" flips one bit
of a gradient after the all-reduce (before the step); "none".
Prints one JSON line: the mismatches this rank found.
"""

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

import dumpd
import dumpd.torch

FLIP_INDEX = (3, 5)  # of fc1.weight
FLIP_BIT = 20        # a mantissa bit: the value stays finite and close


def flip(t: torch.Tensor) -> None:
    bits = t.data.view(torch.int32)
    bits[FLIP_INDEX] ^= 1 << FLIP_BIT


def main() -> None:
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    init_file, socket, config = sys.argv[3], sys.argv[4], sys.argv[5]
    steps, fault_step, fault_rank, fault = (int(sys.argv[6]), int(sys.argv[7]),
                                            int(sys.argv[8]), sys.argv[9])
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential()  # fc1, act, fc2: readable parameter names
    model.add_module("fc1", nn.Linear(16, 32))
    model.add_module("act", nn.ReLU())
    model.add_module("fc2", nn.Linear(32, 4))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    client = dumpd.Client(config, socket=socket, rank=rank)
    check = dumpd.torch.check_replicas(model, opt, client)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    for step in range(steps):
        client.set_step(step)
        x = torch.randn(8, 16, generator=data)
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        if fault == "grad" and step == fault_step and rank == fault_rank:
            flip(model.fc1.weight.grad)
        opt.step()
        if fault == "param" and step == fault_step and rank == fault_rank:
            with torch.no_grad():
                flip(model.fc1.weight)
    check.finish()
    client.close()
    print(json.dumps([{"step": m.step, "tensor": m.tensor, "ranks": m.ranks}
                      for m in check.mismatches]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
