"""One rank of tests/python/test_replicas.py, checked by dumpd.torch.check_replicas with a
fault injected on one rank.

argv: rank world options, options a JSON object:
  init, socket, config, steps: the process group's file, dumpd's socket, the job config,
      the number of optimizer steps;
  fault ("param": one bit of a parameter flipped after the optimizer step; "grad": of a
      gradient after the all-reduce, before the step; "none"), fault_step, fault_rank;
  model: "dp" (a small DDP model trained with SGD, every gradient and parameter checked) or
      "tp" (the BLOOM case: a layer norm both ranks replicate, its gradients all-reduced over
      the tensor-parallel group, before a linear layer each rank holds a different shard of;
      only the layer norm checked, labelled "tp");
  digests: check_replicas' digests option ("auto", "torch");
  pause_step, go_file (optional): rank 0 waits before that step until go_file exists (an
      operator changes the job meanwhile).
Prints one JSON line: the mismatches this rank found, and the period in force at the end.
"""

import faulthandler
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

import dumpd
import dumpd.torch

FLIP_INDEX = (3, 5)  # of fc1.weight
FLIP_BIT = 20        # a mantissa bit: the value stays finite and close


def flip(t: torch.Tensor, index) -> None:
    bits = t.data.view(torch.int32)
    bits[index] ^= 1 << FLIP_BIT


def dp_model(rank: int):
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential()  # fc1, act, fc2: readable parameter names
    model.add_module("fc1", nn.Linear(16, 32))
    model.add_module("act", nn.ReLU())
    model.add_module("fc2", nn.Linear(32, 4))
    return model, nn.parallel.DistributedDataParallel(model), model.fc1.weight, FLIP_INDEX


def tp_model(rank: int):
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("ln", nn.LayerNorm(16))
    model.add_module("shard", nn.Linear(16, 8))
    with torch.no_grad():  # each rank its own shard
        model.shard.weight.copy_(torch.randn(8, 16, generator=torch.Generator().manual_seed(rank)))
    return model, model, model.ln.weight, (5,)


def main() -> None:
    rank, world, o = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    # A rank that hangs says where (every thread's stack on stderr), then exits.
    faulthandler.dump_traceback_later(120, exit=True)
    dist.init_process_group("gloo", init_method="file://" + o["init"], rank=rank,
                            world_size=world)
    tp = o.get("model", "dp") == "tp"
    model, net, target, index = (tp_model if tp else dp_model)(rank)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    client = dumpd.Client(o["config"], socket=o["socket"], rank=rank)
    if tp:
        check = dumpd.torch.check_replicas(model, opt, client, names=["ln.weight", "ln.bias"],
                                           gradients=False, label="tp",
                                           digests=o.get("digests", "auto"))
    else:
        check = dumpd.torch.check_replicas(model, opt, client, digests=o.get("digests", "auto"))
    # Tensor-parallel ranks see the same batch; data-parallel ranks each their own.
    data = torch.Generator().manual_seed(100 + (0 if tp else rank))
    fault, fault_step, fault_rank = o["fault"], o["fault_step"], o["fault_rank"]
    for step in range(o["steps"]):
        if rank == 0 and step == o.get("pause_step"):
            while not os.path.exists(o["go_file"]):
                time.sleep(0.01)
        client.set_step(step)
        x = torch.randn(8, 16, generator=data)
        loss = net(x).square().mean()
        opt.zero_grad()
        loss.backward()
        if tp:  # Megatron's sequence-parallel rule: replicated parameters' gradients summed
            for p in model.ln.parameters():
                dist.all_reduce(p.grad)
        if fault == "grad" and step == fault_step and rank == fault_rank:
            flip(target.grad, index)
        opt.step()
        if fault == "param" and step == fault_step and rank == fault_rank:
            with torch.no_grad():
                flip(target, index)
    check.finish()
    # Every rank leaves together: a rank that destroys its process group while another still
    # finishes the last collective can leave that one hanging in gloo's teardown
    # (pytorch/pytorch#75097).
    dist.barrier()
    client.close()
    print(json.dumps({"mismatches": [{"step": m.step, "tensor": m.tensor, "ranks": m.ranks,
                                      "majority": m.majority} for m in check.mismatches],
                      "every": check.every}))
    dist.destroy_process_group()
    # Leave without destroying main()'s locals (DDP's reducer, gloo's process group): that
    # was seen to hang one rank after every rank had finished, closed its client and printed
    # its result (its stack: in main()'s frame, no deeper Python frame); nothing the test
    # checks happens there.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()  # does not return: it leaves with os._exit
