"""msprobe's PyTorch dump (mindstudio-probe's PrecisionDebugger, levels L0 and L1, tasks
"statistics" and "tensor") against dumpd on the same CPU training step (issue 40, section 3).

The same small CNN and batch, every step dumped by every tool, measured in one invocation:

    none                   no dump (the reference step)
    msprobe_L0_statistics  PrecisionDebugger, level L0 (modules), task statistics
    msprobe_L0_tensor      PrecisionDebugger, level L0, task tensor (.pt files)
    msprobe_L1_statistics  PrecisionDebugger, level L1 (torch APIs), task statistics
    msprobe_L1_tensor      PrecisionDebugger, level L1, task tensor
    dumpd_statistic        dumpd.torch.attach (leaf modules, like L0), saved_data "statistic"
    dumpd_tensor           dumpd.torch.attach, saved_data "tensor" (.npy files)

Selection: every step, all ranks; msprobe's data_mode ["all"] (forward and backward, inputs
and outputs; it adds each module's parameters and parameter gradients) against
dumpd.torch.attach(backward=True) (every leaf module's forward inputs and outputs and its
gradients). --forward-only: msprobe data_mode ["forward"], dumpd backward=False.
Statistics: msprobe's "statistics" summary (Max, Min, Mean, Norm) against dumpd's
statistic_category ["max", "min", "avg", "l2norm"].

msprobe patches torch globally (L1 wraps every torch API) and its PrecisionDebugger is a
singleton, so each configuration runs in its own worker process (this script with
--worker), each holding its model. The parent drives them in alternated rounds (a block of
steps per configuration, the order rotated each round) so drift of a shared machine hits
all alike; between blocks (untimed) the dumpd workers flush and dirty pages are synced.
Only one worker computes at a time. A timed step runs the tool's per-step calls and the
training step: msprobe start(model), forward, backward, optimizer, stop(), step() (msprobe
computes statistics and writes its files inside the step); dumpd.torch.step() and the
training step (the daemon writes while the next steps run). Bytes and files are counted
under each configuration's output directory, each finished step's directory after its block
(dumpd: after client.flush()), then removed; the rest after the run (dumpd: after
client.close()); hard-linked files (dumpd's dump once) count once. Per step = total / steps dumped (the
warm-up steps included: 10, --quick 4; the undumped step only settles after a dozen or so
steps: the 8 MB activations are mmap-allocated and page-faulted afresh until glibc's
thresholds adapt). One JSON line per configuration.
Disk: at most about 1.5 GB at a time (a block of steps of each configuration).

Environment: torch and numpy from the reference venv "torch2", msprobe's site-packages
appended to sys.path (--msprobe-site; appended, so torch2's own packages win; both venvs
hold numpy 2.4.6), dumpd's module on PYTHONPATH. bench/run.py would call it as

    PYTHONPATH=build-release/python $(scripts/install-reference --path torch2)/bin/python \\
        bench/msprobe_torch_bench.py --socket S --dir D \\
        --msprobe-site $(scripts/install-reference --path msprobe) [--quick]

(--msprobe-site: a site-packages directory or a venv, whose lib/python*/site-packages is
taken; the workers run with this interpreter and environment; --python overrides it).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = {
    "none": ("none", None, None),
    "msprobe_L0_statistics": ("msprobe", "L0", "statistics"),
    "msprobe_L0_tensor": ("msprobe", "L0", "tensor"),
    "msprobe_L1_statistics": ("msprobe", "L1", "statistics"),
    "msprobe_L1_tensor": ("msprobe", "L1", "tensor"),
    "dumpd_statistic": ("dumpd", "leaf modules", "statistic"),
    "dumpd_tensor": ("dumpd", "leaf modules", "tensor"),
}
BATCH, SIZE, THREADS = 64, 32, 2


# ---------------------------------------------------------------- worker (one configuration)

def small_cnn():
    from torch import nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * (SIZE // 4) ** 2, 256), nn.ReLU(), nn.Linear(256, 10))


def dumpd_config(path, saved_data):
    return {"common_dump_settings": {
        "dump_mode": 0, "path": str(path), "net_name": "SmallCNN", "iteration": "all",
        "saved_data": saved_data, "statistic_category": ["max", "min", "avg", "l2norm"],
        "input_output": 0, "kernels": [], "support_device": [0]}}


def msprobe_config(path, level, task, forward_only):
    cfg = {"task": task, "dump_path": str(path), "rank": [], "step": [], "level": level,
           "async_dump": False,
           task: {"scope": [], "list": [], "data_mode": ["forward" if forward_only else "all"]}}
    if task == "statistics":
        cfg[task]["summary_mode"] = "statistics"
    return cfg


def worker(args):
    # The protocol goes over the original stdout; anything the tools print goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    tool, level, task = CONFIGS[args.worker]
    import torch
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, 3, SIZE, SIZE)
    y = torch.randint(0, 10, (BATCH,))
    out = Path(args.dir) / args.worker

    def train():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    client = None
    if tool == "msprobe":
        for site in args.msprobe_site or []:
            venv = sorted(Path(site).glob("lib/python*/site-packages"))
            sys.path.append(str(venv[-1] if venv else site))
        from msprobe.pytorch import PrecisionDebugger
        out.mkdir(parents=True)
        config = Path(args.dir) / f"{args.worker}.json"
        config.write_text(json.dumps(msprobe_config(out, level, task, args.forward_only)))
        debugger = PrecisionDebugger(config_path=str(config))

        def step(_):
            debugger.start(model)
            train()
            debugger.stop()
            debugger.step()
    elif tool == "dumpd":
        import dumpd
        import dumpd.torch
        client = dumpd.Client(config=dumpd_config(out, task), socket=args.socket,
                              ring_bytes=1 << 30, backpressure="block")
        dumpd.torch.attach(model, client, backward=not args.forward_only)

        def step(it):
            dumpd.torch.step(client, it)
            train()
    else:
        def step(_):
            train()

    it = 0
    proto.write("ready\n")
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "run":
            times = []
            for _ in range(int(cmd[1])):
                t0 = time.perf_counter()
                step(it)
                times.append(time.perf_counter() - t0)
                it += 1
            proto.write(json.dumps(times) + "\n")
        elif cmd[0] == "settle":
            if client is not None:
                client.flush()
            proto.write("settled\n")
        elif cmd[0] == "quit":
            if client is not None:
                client.close()
            proto.write(json.dumps({"steps": it}) + "\n")
            return


# ---------------------------------------------------------------- parent

class Worker:
    def __init__(self, name, args):
        cmd = [args.python or sys.executable, os.path.abspath(__file__), "--worker", name,
               "--dir", args.dir]
        if args.socket:
            cmd += ["--socket", args.socket]
        for site in args.msprobe_site or []:
            cmd += ["--msprobe-site", site]
        if args.forward_only:
            cmd.append("--forward-only")
        self.name = name
        self.log = Path(args.dir) / f"{name}.log"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(self.log, "wb"), text=True, bufsize=1)

    def ask(self, line):
        if line:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            self.proc.wait()
            tail = self.log.read_text(errors="replace")[-3000:]
            sys.exit(f"worker {self.name} failed ({self.proc.returncode}):\n{tail}")
        return reply.strip()


def tree_size(path):
    """[apparent bytes, allocated bytes, files]; a hard-linked inode counts once."""
    seen, size, blocks, files = set(), 0, 0, 0
    for root, _, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(root, n))
            files += 1
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                size += st.st_size
                blocks += st.st_blocks * 512
    return [size, blocks, files]


def harvest(out, totals):
    """Adds the finished steps' directories under `out` to `totals` and removes them (msprobe:
    step<N>; dumpd: rank_<r>/<net>/<graph>/<N>), so the page cache and the disk hold at most
    a block's files; what stays (dumpd's metadata) is counted at the end."""
    steps = [*out.glob("step[0-9]*"), *out.glob("rank_*/*/*/[0-9]*")]
    for d in steps:
        for i, v in enumerate(tree_size(d)):
            totals[i] += v
        shutil.rmtree(d)


def parent(args):
    rounds, per_block, warmup = (2, 2, 4) if args.quick else (6, 4, 10)
    names = [n for n in CONFIGS if not (CONFIGS[n][0] == "dumpd" and not args.socket)]
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    workers = {n: Worker(n, args) for n in names}  # they import torch side by side
    for w in workers.values():
        if w.ask(None) != "ready":
            sys.exit(f"worker {w.name}: unexpected reply")
    times = {n: [] for n in names}

    totals = {n: [0, 0, 0] for n in names}

    def settle():
        for w in workers.values():
            w.ask("settle")
        os.sync()
        for n in names:
            harvest(Path(args.dir) / n, totals[n])

    for w in workers.values():  # warm-up steps (dumped, not timed): allocator, first touch
        w.ask(f"run {warmup}")
    settle()
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            times[n] += json.loads(workers[n].ask(f"run {per_block}"))
            settle()
    steps = {n: json.loads(w.ask("quit"))["steps"] for n, w in workers.items()}
    for w in workers.values():
        w.proc.wait(timeout=120)
    base = statistics.median(times["none"])
    for n in names:
        tool, level, task = CONFIGS[n]
        med = statistics.median(times[n])
        size, blocks, files = (a + b for a, b in zip(totals[n], tree_size(Path(args.dir) / n)))
        print(json.dumps({
            "bench": "msprobe_torch", "config": n, "tool": tool, "level": level, "task": task,
            "model": f"small CNN, batch {BATCH}, {SIZE}x{SIZE}, {THREADS} threads",
            "forward_only": args.forward_only, "steps_timed": len(times[n]),
            "steps_dumped": steps[n] if tool != "none" else 0,
            "step_s": med, "step_s_none": base, "ratio": med / base,
            "step_s_min": min(times[n]), "step_s_max": max(times[n]),
            "bytes_per_step": size / steps[n], "disk_bytes_per_step": blocks / steps[n],
            "files_per_step": files / steps[n], "files": files}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", help="dumpd's socket (without it, no dumpd rows)")
    ap.add_argument("--dir", required=True, help="output directories and worker logs")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--msprobe-site", action="append",
                    help="a directory appended to sys.path in the msprobe workers (repeatable)")
    ap.add_argument("--python", help="the workers' interpreter (default: this one)")
    ap.add_argument("--forward-only", action="store_true",
                    help="forward only: msprobe data_mode forward, dumpd without backward")
    ap.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
