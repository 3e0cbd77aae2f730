"""dumpd.torch.attach under torch.compile: the cost of the dumpd::dump custom op in a
training step, on the CPU. One JSON object per line.

A small CNN (recorder_bench.py's SmallCnn: two convolutions, two linear layers, 32x32 images,
batch 32, about 15 MB of module inputs and outputs a step) is trained with SGD, torch on two
threads as in python_bench.py. Its forward is compiled with ``torch.compile(model)``
(inductor; the backward is AOTAutograd's), or run eagerly. Per mode (compiled, eager), four
configurations (five compiled), each its own model instance (compiled once) and, when
attached, its own dumpd.Client:

  none       not attached: the reference of its mode
  idle       attached, the job config's `iteration` selects none of this run's steps: each
             dump point only asks should_dump and returns (target <= 1.03)
  statistic  attached, saved_data "statistic", every step (target <= 1.10); compiled, the
             graph computes the statistics (dumpd.torch._graph_stats)
  statistic_tensors  (compiled only) the same with attach(graph_statistics=False): the graph
             hands the tensors over and the client computes the statistics
  full       attached, saved_data "tensor", one iteration selected per round: the last step
             of the config's block; step_s is the median of those selected steps (each one's
             ratio to its round's reference block in `selected_ratios`), `unselected_step_s`
             the median of its other steps

Every model is warmed up first (the first calls compile), then the nine configurations run
in blocks of steps, their order rotated each round, over several rounds. step_s is the
median of a configuration's steps and `ratio` its ratio to the median undumped step of the
same mode measured in the same run; `ratio_paired` is the median over rounds of the block's
median against the reference's block of that round (drift between rounds cancels; the
better figure on a shared machine). Between blocks (untimed) every client is flushed and
dirty pages synced, so no configuration pays for another's writes. dynamo's unique_graphs
counter is read after the warm-up and at the end: the timed steps must not recompile
(`recompiled`: false).
bytes_written/tensors_written are what the daemon wrote for the timed steps (flush counts,
warm-up excluded; statistic rows count as tensors, 0 bytes), bytes_committed what the client
copied into its ring for them, dump_call_s_per_step the client's stats dump_ns per timed step
(the copy into the ring, blocked waits included; a non-contiguous array, e.g. inductor's
channels-last buffers, is copied through its strides in that one copy); with --dumpd-pid,
daemon_cpu_s_per_step the daemon's CPU time during the configuration's blocks and their
flushes, per step (on two cores it competes with torch's two threads).

--model convbn-cl trains ConvBnCnn instead (issue 49): three Conv2d + BatchNorm2d + ReLU
stages in channels-last memory format, as vision models are trained, batch 32, 32x32.

    PYTHONPATH=build/python /var/cache/dumpd-reference/torch2/bin/python \
        bench/compile_bench.py --socket S --dir D [--dumpd-pid PID] [--quick] \
        [--model small|convbn-cl]
"""

import argparse
import json
import os
import statistics
import sys
import time
import types
from pathlib import Path

import torch
import torch.nn as nn

import dumpd
import dumpd.torch
from dumpd.torch import _compiled
from python_bench import job_config
from recorder_bench import SmallCnn

RING_BYTES = 128 << 20
TARGETS = {"none": "(reference)", "idle": "<= 1.03", "statistic": "<= 1.10",
           "statistic_tensors": "(figure)", "full": "(figure: the selected step)"}
BATCH = 32


def cpu_s(pid):
    """User + system CPU seconds of process `pid` so far (None without one)."""
    if pid is None:
        return None
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ConvBnCnn(nn.Module):
    """Conv2d -> BatchNorm2d -> ReLU three times (the third after a max pool), global
    average pooling and a linear layer; run channels-last (model and input)."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1, self.r1 = nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU()
        self.c2, self.b2, self.r2 = nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.c3, self.b3, self.r3 = nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()
        self.gap, self.flat, self.fc = nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)

    def forward(self, x):
        x = self.r2(self.b2(self.c2(self.r1(self.b1(self.c1(x))))))
        x = self.r3(self.b3(self.c3(self.pool(x))))
        return self.fc(self.flat(self.gap(x)))


MODELS = {"small": SmallCnn, "convbn-cl": ConvBnCnn}


def own_class(label, base):
    """SmallCnn with a forward of its own code object: dynamo keeps compiled graphs per code
    object, so each configuration gets its own cache entries, as a model alone in its process
    would. With one shared forward, dynamo's hook guards (skip_nnmodule_hook_guards, on by
    default) do not tell a module without hooks from an attached one: an attached instance
    ran the graph compiled for an unattached instance, without its dump points, and wrote
    nothing (torch 2.15)."""
    f = base.forward
    code = f.__code__.replace(co_name=f"forward_{label}")
    forward = types.FunctionType(code, f.__globals__, code.co_name, f.__defaults__, f.__closure__)
    return type(f"{base.__name__}_{label}", (base,), {"forward": forward})


class Config:
    """One model (compiled or not), its optimizer and, when attached, its client."""

    def __init__(self, args, mode, kind, selected):
        self.mode, self.kind = mode, kind
        torch.manual_seed(0)
        self.model = own_class(f"{mode}_{kind}", MODELS[args.model])()
        self.x = torch.randn(BATCH, 3, 32, 32)
        if args.model == "convbn-cl":
            self.model = self.model.to(memory_format=torch.channels_last)
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.y = torch.randint(0, 10, (BATCH,))
        self.client = self.handle = None
        if kind != "none":
            config = job_config(Path(args.dir) / f"{mode}_{kind}", MODELS[args.model].__name__)
            common = config["common_dump_settings"]
            common["iteration"] = {"idle": "1000000", "statistic": "all",
                                   "statistic_tensors": "all",
                                   "full": "|".join(map(str, selected))}[kind]
            common["saved_data"] = "statistic" if kind.startswith("statistic") else "tensor"
            self.client = dumpd.Client(config=config, socket=args.socket, ring_bytes=RING_BYTES,
                                       backpressure="block")
            self.handle = dumpd.torch.attach(self.model, self.client,
                                             graph_statistics=kind != "statistic_tensors")
        self.run = torch.compile(self.model) if mode == "compiled" else self.model
        self.iteration = 0
        self.blocks, self.selected_times = [], []  # unselected steps per round; selected
        self.daemon_cpu_s = 0.0
        self.selected = set(selected)

    def step(self):
        """One training step; returns its time (the step mark excluded)."""
        if self.client is not None:
            dumpd.torch.step(self.client, self.iteration)
        t0 = time.perf_counter()
        self.opt.zero_grad()
        nn.functional.cross_entropy(self.run(self.x), self.y).backward()
        self.opt.step()
        dt = time.perf_counter() - t0
        self.iteration += 1
        return dt

    def flush(self):
        return self.client.flush() if self.client is not None else None

    def counts(self):
        """Daemon-side (written) and client-side (committed to the ring) totals so far."""
        if self.client is None:
            return None
        flushed, stats = self.client.flush(), self.client.stats()
        return {"bytes_written": flushed["bytes_written"],
                "tensors_written": flushed["tensors_written"],
                "bytes_committed": stats["bytes_committed"],
                "tensors_deduplicated": stats["tensors_deduplicated"],
                "blocked_waits": stats["blocked_waits"], "dump_ns": stats["dump_ns"]}


def training(args):
    torch.set_num_threads(2)
    rounds, per_block = (6, 4) if args.quick else (20, 6)
    warmup = 3
    # The full configuration's selected iterations: the last step of its block, each round.
    selected = [warmup + r * per_block + per_block - 1 for r in range(rounds)]
    from torch._dynamo.utils import counters
    configs = [Config(args, mode, kind, selected)
               for mode in ("compiled", "eager")
               for kind in ("none", "idle", "statistic", "full")]
    configs.insert(3, Config(args, "compiled", "statistic_tensors", selected))
    t_compile = time.perf_counter()
    for c in configs:
        for _ in range(warmup):
            c.step()
    t_compile = time.perf_counter() - t_compile
    before = {c: c.counts() for c in configs}
    graphs_before = counters["stats"]["unique_graphs"]
    breaks_before = sum(counters["graph_break"].values())
    for r in range(rounds):
        shift = r % len(configs)
        for c in configs[shift:] + configs[:shift]:
            daemon_cpu = cpu_s(args.dumpd_pid)
            block = []
            for _ in range(per_block):
                selected_step = c.kind == "full" and c.iteration in c.selected
                dt = c.step()
                (c.selected_times if selected_step else block).append(dt)
            c.blocks.append(block)
            for o in configs:
                o.flush()
            if daemon_cpu is not None:
                c.daemon_cpu_s += cpu_s(args.dumpd_pid) - daemon_cpu
            os.sync()
    graphs_after = counters["stats"]["unique_graphs"]
    breaks_after = sum(counters["graph_break"].values())
    after = {c: c.counts() for c in configs}
    for c in configs:
        if c.handle is not None:
            c.handle.remove()
            c.client.close()
    recompiled = graphs_after != graphs_before
    if recompiled:
        print(f"warning: {graphs_after - graphs_before} graphs compiled during the timed steps",
              file=sys.stderr)
    reference = {c.mode: c for c in configs if c.kind == "none"}
    for c in configs:
        ref = reference[c.mode]
        ref_s = statistics.median(t for b in ref.blocks for t in b)
        # Each round's figure against the reference's block of the same round: drift of the
        # machine between rounds cancels.
        ref_rounds = [statistics.median(b) for b in ref.blocks]
        line = {"bench": "compile_step", "model": args.model, "mode": c.mode, "config": c.kind, "batch": BATCH,
                "torch": torch.__version__, "threads": torch.get_num_threads(),
                "rounds": rounds, "steps": rounds * per_block}
        if c.kind == "full":
            step_s = statistics.median(c.selected_times)
            paired = [t / q for t, q in zip(c.selected_times, ref_rounds)]
            line["selected_ratios"] = [round(x, 3) for x in paired]
            unselected = [t for b in c.blocks for t in b]
            line["unselected_step_s"] = statistics.median(unselected)
            line["unselected_ratio"] = line["unselected_step_s"] / ref_s
        else:
            step_s = statistics.median(t for b in c.blocks for t in b)
            paired = [statistics.median(b) / q for b, q in zip(c.blocks, ref_rounds)]
        line.update({"step_s": step_s, "reference_s": ref_s, "ratio": step_s / ref_s,
                     "ratio_paired": statistics.median(paired), "target": TARGETS[c.kind]})
        if c.client is not None:
            # statistic: tensors_written counts statistic.csv rows, bytes_written stays 0.
            delta = {k: after[c][k] - before[c][k] for k in after[c]}
            line["dump_call_s_per_step"] = delta.pop("dump_ns") / 1e9 / line["steps"]
            line.update(delta)
            if c.kind != "idle" and not delta["tensors_written"]:
                print(f"warning: {c.mode} {c.kind} wrote nothing", file=sys.stderr)
        if args.dumpd_pid is not None:
            line["daemon_cpu_s_per_step"] = c.daemon_cpu_s / line["steps"]
        if c.mode == "compiled":
            line.update({"unique_graphs": {"timed_start": graphs_before, "end": graphs_after},
                         "graph_breaks_timed": breaks_after - breaks_before,
                         "recompiled": recompiled, "warmup_s_all": t_compile})
        print(json.dumps(line), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--model", choices=sorted(MODELS), default="small",
                    help="small: SmallCnn (row 11); convbn-cl: ConvBnCnn, channels-last")
    ap.add_argument("--dumpd-pid", type=int,
                    help="the daemon's pid: report its CPU time per step of each configuration")
    args = ap.parse_args()
    if _compiled.UNAVAILABLE is not None or not hasattr(torch, "compile"):
        sys.exit(f"no torch.compile dump point: {_compiled.UNAVAILABLE or 'no torch.compile'} "
                 "(run under the torch 2 environment)")
    training(args)


if __name__ == "__main__":
    main()
