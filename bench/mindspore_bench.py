"""The cost of dumpd.mindspore on a PyNative MindSpore training step on the CPU (issue 53,
bench row 17), against the undumped step measured in the same run, and msprobe's MindSpore
dump tried beside it.

One LeNet-5 (tests/reference/lenet_ms.py), batch 32, TrainOneStepCell with Momentum, the same
tensors every step. Configurations, each attached with backward=True:

    none          no dump (the reference step)
    idle          dumpd.mindspore attached, iteration "none": nothing selected
    hooks         every step selected, a kernel filter that matches no Cell: the hooks run
                  and dump nothing (MindSpore's cost of hooked Cells, and dumpd's per call)
    recorder      iteration "none", flight recorder on ("full", 2 steps kept): always on
    recorder_stat the same, the recorder in "statistic" mode
    statistic     saved_data "statistic", every step
    tensor        saved_data "tensor", every step (.npy files)

All run in this one process in alternated rounds (a block of steps per configuration, the
order rotated each round), each block after a flush and a sync of the previous one's files
(untimed), and each block's first step untimed (attach() hooks it whatever it selects); the
figure is the median of the per-block means. msprobe's PrecisionDebugger (L0
and L1, tasks "statistics" and "tensor") runs in its own process (it patches MindSpore
globally) with --msprobe-python, its figure a ratio to the undumped step timed in that
process first; where it cannot run, its line says why.

    PYTHONPATH=build/python <ms venv>/bin/python bench/mindspore_bench.py --socket S --dir D \\
        [--msprobe-python <msprobe venv>/bin/python --mindspore-site <ms site-packages>]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("none", "idle", "hooks", "recorder", "recorder_stat", "statistic", "tensor")
TARGETS = {"idle": "<= 1.02", "hooks": "(figure)", "recorder": "(figure)",
           "recorder_stat": "(figure)",
           "statistic": "(figure)", "tensor": "(figure)"}


def job(path, config):
    common = {"dump_mode": 0, "path": str(path), "net_name": "LeNet", "iteration": "all",
              "saved_data": "tensor", "input_output": 0, "kernels": [], "support_device": [0],
              "statistic_category": ["max", "min", "avg", "l2norm"]}
    extra = {}
    if config in ("idle", "recorder", "recorder_stat"):
        common["iteration"] = "none"
    if config == "recorder":
        extra["flight_recorder"] = {"steps": 2, "saved_data": "full"}
    if config == "recorder_stat":
        extra["flight_recorder"] = {"steps": 2, "saved_data": "statistic"}
    if config == "statistic":
        common["saved_data"] = "statistic"
    if config == "hooks":
        common["dump_mode"] = 1  # kernels apply in dump_mode 1 only
        common["kernels"] = ["name-regex(NoCellIsNamedThis)"]
    return {"common_dump_settings": common, "e2e_dump_settings": {"enable": True}, **extra}


def model(batch):
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor, nn
    sys.path.insert(0, str(ROOT / "tests" / "reference"))
    from lenet_ms import LeNet5
    ms.set_seed(1)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    net = LeNet5()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
    step.set_train()
    rng = np.random.default_rng(1)
    x = Tensor(rng.standard_normal((batch, 1, 32, 32)).astype(np.float16))
    y = Tensor(rng.integers(0, 10, size=(batch,)).astype(np.int32))
    return step, x, y


def dir_bytes(path):
    seen, total = set(), 0
    for root, _, files in os.walk(path):
        for f in files:
            st = os.lstat(os.path.join(root, f))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_size
    return total


def run_dumpd(args):
    import dumpd
    import dumpd.mindspore
    step, x, y = model(args.batch)
    work = Path(args.dir)
    for _ in range(args.warmup):
        step(x, y)
    times = {c: [] for c in CONFIGS}
    counts = {c: 0 for c in CONFIGS}
    written = {c: 0 for c in CONFIGS}
    iteration = {c: 0 for c in CONFIGS}
    clients = {}
    for c in CONFIGS[1:]:
        (work / c).mkdir(parents=True, exist_ok=True)
        (work / f"{c}.json").write_text(json.dumps(job(work / c / "dump", c)))
        clients[c] = dumpd.Client(str(work / f"{c}.json"), socket=args.socket)
    for r in range(args.rounds):
        order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
        for c in order:
            client = clients.get(c)
            handle = dumpd.mindspore.attach(step, client, backward=True) if client else None
            # One step untimed: a fresh attach() runs its first step hooked whatever it
            # selects (dumpd._core.gate), and a long run attaches once.
            if client is not None:
                dumpd.mindspore.step(client, iteration[c])
            step(x, y)
            iteration[c] += 1
            start = time.perf_counter()
            for _ in range(args.steps):
                if client is not None:
                    dumpd.mindspore.step(client, iteration[c])
                step(x, y)
                iteration[c] += 1
            times[c].append((time.perf_counter() - start) / args.steps)
            counts[c] += args.steps
            if handle is not None:
                handle.remove()
                client.flush()
                os.sync()
    for c in CONFIGS[1:]:
        clients[c].close()
        written[c] = dir_bytes(work / c)
    reference = statistics.median(times["none"])
    for c in CONFIGS:
        value = statistics.median(times[c])
        print(json.dumps({"bench": "mindspore_step", "config": c, "step_s": value,
                          "reference_s": reference, "ratio": value / reference,
                          "target": TARGETS.get(c, "(reference)"),
                          "bytes_per_step": written[c] / max(counts[c], 1),
                          "batch": args.batch, "steps": counts[c]}), flush=True)


MSPROBE = {
    "msprobe_L0_statistics": ("L0", "statistics"), "msprobe_L0_tensor": ("L0", "tensor"),
    "msprobe_L1_statistics": ("L1", "statistics"), "msprobe_L1_tensor": ("L1", "tensor")}


def run_msprobe_worker(args):
    """In msprobe's environment: one configuration's steps; prints its figure."""
    from msprobe.mindspore import PrecisionDebugger
    level, task = MSPROBE[args.worker]
    cfg = {"task": task, "dump_path": str(Path(args.dir) / args.worker), "rank": [],
           "step": [], "level": level,
           task: {"scope": [], "list": [], "data_mode": ["all"],
                  **({"summary_mode": "statistics"} if task == "statistics" else {})}}
    path = Path(args.dir) / f"{args.worker}.json"
    path.write_text(json.dumps(cfg))
    step, x, y = model(args.batch)
    plain = []
    for i in range(args.warmup + args.steps * args.rounds):  # the reference, in this process
        start = time.perf_counter()
        step(x, y)
        if i >= args.warmup:
            plain.append(time.perf_counter() - start)
    debugger = PrecisionDebugger(config_path=str(path))
    times = []
    for i in range(args.warmup + args.steps * args.rounds):
        start = time.perf_counter()
        debugger.start(model=step)
        step(x, y)
        debugger.stop()
        debugger.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    print(json.dumps({"step_s": statistics.median(times),
                      "reference_s": statistics.median(plain)}), flush=True)


def run_msprobe(args):
    for name in MSPROBE:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (args.mindspore_site, os.environ.get("PYTHONPATH")) if p), GLOG_v="3")
        out = subprocess.run([args.msprobe_python, __file__, "--worker", name, "--dir",
                              args.dir, "--batch", str(args.batch), "--steps",
                              str(args.steps), "--rounds", "1", "--warmup", str(args.warmup)],
                             capture_output=True, text=True, env=env, timeout=1800)
        line = {"bench": "mindspore_msprobe", "config": name}
        figures = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
        if out.returncode == 0 and figures:
            f = figures[-1]
            line.update(step_s=f["step_s"], reference_s=f["reference_s"],
                        ratio=f["step_s"] / f["reference_s"])
        else:
            errors = [l.strip() for l in (out.stderr + out.stdout).splitlines()
                      if "Error" in l and ":" in l]
            line["refused"] = errors[-1] if errors else f"exit {out.returncode}"
        print(json.dumps(line), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--msprobe-python", help="msprobe's interpreter (its venv's python)")
    ap.add_argument("--mindspore-site", help="a MindSpore site-packages for msprobe's process")
    ap.add_argument("--worker", choices=MSPROBE, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.steps, args.rounds, args.warmup = 8, 3, 4
    if args.worker:
        run_msprobe_worker(args)
        return
    if not args.socket:
        ap.error("--socket is required")
    run_dumpd(args)
    if args.msprobe_python:
        run_msprobe(args)


if __name__ == "__main__":
    main()
