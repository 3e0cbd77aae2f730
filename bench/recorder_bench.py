"""Flight recorder benchmarks (issue 22): the AlexNet training step of python_bench.py with
the recorder on every step (nothing selected by `iteration`, no trigger), saved_data "full"
and "statistic", against the undumped step and against dumping every iteration (row 5's
setting) in the same run; the time from a manual trigger to the kept iterations being on
disk; and the daemon's RSS before the job and while it records. Then the busy node (issue
38): a small CNN whose steps come fast (15 MB a step into a 128 MiB ring, the recorder's
default 4 steps kept) run back to back on every core, so that the daemon's reader competes
with training for the CPU. One JSON object per line.

    PYTHONPATH=build-release/python /usr/bin/python3 bench/recorder_bench.py --socket S \
        --dir D --dumpd-pid PID --dumpctl build-release/bin/dumpctl
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

import dumpd
import dumpd.torch
from python_bench import Trainer, job_config

NOTHING = "none"  # no iteration selected: every step recorded
STEPS = 2           # flight_recorder.steps
RING_BYTES = 512 << 20
BUSY_RING_BYTES = 128 << 20


def rss(pid):
    """VmRSS, RssAnon, RssFile, RssShmem of `pid` in KiB."""
    out = {}
    for line in open(f"/proc/{pid}/status"):
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(line.split()[1])
    return out


def recorder_status(dumpctl, sock):
    """{session id: the recorder section of `dumpctl status --json`}."""
    out = subprocess.run([dumpctl, "--socket", sock, "status", "--json"], capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        sys.exit(f"dumpctl status failed: {out.stderr}")
    return {s["id"]: s.get("recorder") for s in json.loads(out.stdout)["sessions"]}


def tree_bytes(root):
    """Bytes of the files under `root` (npy files, statistic.csv, ...), each inode once: dump
    once hard-links a repeated tensor's file."""
    inodes = {}
    for f in Path(root).rglob("*"):
        if f.is_file():
            st = f.stat()
            inodes[(st.st_dev, st.st_ino)] = st.st_size
    return sum(inodes.values())


def recorder_client(args, mode):
    config = job_config(Path(args.dir) / mode, "AlexNet")
    config["common_dump_settings"]["iteration"] = NOTHING
    # The job's saved_data matches the recorder's: with "tensor" here, a trigger writes
    # statistic.csv without the statistic columns (computes none), found by this benchmark
    # (issue 22 review). Nothing is selected, so this changes nothing else.
    config["common_dump_settings"]["saved_data"] = mode
    return dumpd.Client(config=config, socket=args.socket, ring_bytes=RING_BYTES,
                        backpressure="block",
                        flight_recorder={"steps": STEPS, "saved_data": mode})


class SmallCnn(nn.Module):
    """Two convolutions and two linear layers on 32x32 images: 15 MB of module inputs and
    outputs a step at batch 32, in about 15 ms on two cores."""

    def __init__(self):
        super().__init__()
        self.c1, self.r1, self.p1 = nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)
        self.c2, self.r2, self.p2 = nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)
        self.flat, self.l1, self.r3 = nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU()
        self.l2 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.p1(self.r1(self.c1(x)))
        x = self.p2(self.r2(self.c2(x)))
        return self.l2(self.r3(self.l1(self.flat(x))))


class SmallTrainer:
    def __init__(self):
        torch.manual_seed(0)
        self.model = SmallCnn()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.x = torch.randn(32, 3, 32, 32)
        self.y = torch.randint(0, 10, (32,))

    def step(self):
        t0 = time.perf_counter()
        self.opt.zero_grad()
        nn.functional.cross_entropy(self.model(self.x), self.y).backward()
        self.opt.step()
        return time.perf_counter() - t0


def busy_node(args):
    """The small CNN undumped and with the recorder ("full", "statistic"), each in blocks of
    steps back to back (no flush inside a block: the daemon must keep up as it goes), torch
    on every core. Step times are per step; block times include the flush that ends the block
    (the daemon's reading left over, if it fell behind)."""
    torch.set_num_threads(os.cpu_count() or 1)
    rounds, per_block = (3, 10) if args.quick else (8, 20)
    trainers = {m: SmallTrainer() for m in ("none", "full", "statistic")}
    clients = {}
    for mode in ("full", "statistic"):
        config = job_config(Path(args.dir) / "busy" / mode, "SmallCnn")
        config["common_dump_settings"]["iteration"] = NOTHING
        config["common_dump_settings"]["saved_data"] = mode
        clients[mode] = dumpd.Client(config=config, socket=args.socket,
                                     ring_bytes=BUSY_RING_BYTES, backpressure="block",
                                     flight_recorder={"saved_data": mode})
    handles = [dumpd.torch.attach(trainers[m].model, c) for m, c in clients.items()]
    it = 0
    for mode, trainer in trainers.items():  # warm-up: the recorder fills (4 steps kept)
        for _ in range(6):
            if mode in clients:
                it += 1
                dumpd.torch.step(clients[mode], it)
            trainer.step()
    for c in clients.values():
        c.flush()
    before = {m: c.stats() for m, c in clients.items()}
    steps = {m: [] for m in trainers}
    blocks = {m: [] for m in trainers}
    for _ in range(rounds):
        for mode, trainer in trainers.items():
            t0 = time.perf_counter()
            for _ in range(per_block):
                if mode in clients:
                    it += 1
                    dumpd.torch.step(clients[mode], it)
                steps[mode].append(trainer.step())
            if mode in clients:
                clients[mode].flush()
            blocks[mode].append(time.perf_counter() - t0)
    after = {m: c.stats() for m, c in clients.items()}
    ids = {m: c.stats()["session_id"] for m, c in clients.items()}
    status = recorder_status(args.dumpctl, args.socket)
    for h in handles:
        h.remove()
    for c in clients.values():
        c.close()
    timed = rounds * per_block

    def delta(m, key):
        return after[m][key] - before[m][key]

    return {
        "bench": "recorder_busy", "threads": torch.get_num_threads(), "steps_timed": timed,
        "ring_bytes": BUSY_RING_BYTES,
        "step_s": {m: statistics.median(v) for m, v in steps.items()},
        "block_s": {m: sum(v) for m, v in blocks.items()},
        "ring_bytes_per_step": {m: delta(m, "bytes_committed") / timed for m in clients},
        "dump_call_s_per_step": {m: delta(m, "dump_ns") / 1e9 / timed for m in clients},
        "blocked_waits": {m: delta(m, "blocked_waits") for m in clients},
        "tensors_dropped": {m: delta(m, "tensors_dropped") for m in clients},
        "status": {m: status.get(ids[m]) for m in clients},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--dumpd-pid", type=int, required=True)
    ap.add_argument("--dumpctl", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(2)
    rounds, per_block = (2, 2) if args.quick else (4, 3)
    batch, size = 16, 227

    rss_before = rss(args.dumpd_pid)  # no job connected yet
    modes = {m: Trainer(batch, size) for m in ("none", "every", "full", "statistic")}
    recorders = {m: recorder_client(args, m) for m in ("full", "statistic")}
    handles = [dumpd.torch.attach(modes[m].model, c) for m, c in recorders.items()]
    rss_connected = rss(args.dumpd_pid)

    # Warm-up, untimed: the allocator and weights, then STEPS + 1 recorded steps, so that the
    # timed steps run with the recorder full (each new iteration discards the oldest).
    it = 0
    modes["none"].step()
    for mode, c in recorders.items():
        for _ in range(STEPS + 1):
            it += 1
            dumpd.torch.step(c, it)
            modes[mode].step()
        c.flush()
    rss_warm = rss(args.dumpd_pid)  # the recorders' sessions only
    # The reference that writes: every iteration selected, saved_data "tensor" (row 5).
    clients = dict(recorders, every=dumpd.Client(
        config=job_config(Path(args.dir) / "every", "AlexNet"), socket=args.socket,
        ring_bytes=RING_BYTES, backpressure="block"))
    handles.append(dumpd.torch.attach(modes["every"].model, clients["every"]))
    dumpd.torch.step(clients["every"], it)
    modes["every"].step()
    clients["every"].flush()
    ids = {m: c.stats()["session_id"] for m, c in recorders.items()}
    status = recorder_status(args.dumpctl, args.socket)
    warm_status = {m: status.get(ids[m]) for m in recorders}

    # Timed: blocks of steps per mode, interleaved (as python_bench.training).
    before = {m: c.stats() for m, c in clients.items()}
    times = {m: [] for m in modes}
    for _ in range(rounds):
        for mode, trainer in modes.items():
            for _ in range(per_block):
                if mode in clients:
                    it += 1
                    dumpd.torch.step(clients[mode], it)
                times[mode].append(trainer.step())
            for c in clients.values():
                c.flush()
            os.sync()  # the "every" mode's files: no mode pays for another's writes
    rss_recording = rss(args.dumpd_pid)
    after = {m: c.stats() for m, c in clients.items()}
    status = recorder_status(args.dumpctl, args.socket)
    end_status = {m: status.get(ids[m]) for m in recorders}

    def delta(m, key):
        return after[m][key] - before[m][key]

    # A manual trigger: time from trigger() until flush() returns (the kept iterations are on
    # disk, in the page cache), and the bytes of the files it wrote (bytes_written of flush()
    # counts tensor payloads only, not statistic.csv).
    trig = {}
    for m, c in recorders.items():
        c.flush()
        t0 = time.perf_counter()
        c.trigger("bench")
        counts = c.flush()
        trig[m] = {"s": time.perf_counter() - t0, "bytes": tree_bytes(Path(args.dir) / m),
                   "tensors": counts["tensors_written"]}
    rss_after_trigger = rss(args.dumpd_pid)
    status = recorder_status(args.dumpctl, args.socket)
    trig_status = {m: status.get(ids[m]) for m in recorders}
    for h in handles:
        h.remove()
    for c in clients.values():
        c.close()

    timed = rounds * per_block
    med = {m: statistics.median(v) for m, v in times.items()}
    print(json.dumps({
        "bench": "recorder", "batch": batch, "size": size, "steps_timed": timed,
        "recorder_steps": STEPS, "ring_bytes": RING_BYTES,
        "step_s_none": med["none"], "step_s_every": med["every"], "step_s_full": med["full"],
        "step_s_statistic": med["statistic"],
        "step_times": times,
        "ring_bytes_per_step": {m: delta(m, "bytes_committed") / timed for m in clients},
        "blocked_waits": {m: delta(m, "blocked_waits") for m in clients},
        "tensors_dropped": {m: delta(m, "tensors_dropped") for m in clients},
        "trigger_s": {m: trig[m]["s"] for m in recorders},
        "trigger_bytes": {m: trig[m]["bytes"] for m in recorders},
        "trigger_tensors": {m: trig[m]["tensors"] for m in recorders},
        "rss_kib": {"before_job": rss_before, "connected": rss_connected, "warm": rss_warm,
                    "recording": rss_recording, "after_trigger": rss_after_trigger},
        "status_warm": warm_status, "status_end": end_status, "status_trigger": trig_status,
    }), flush=True)
    print(json.dumps(busy_node(args)), flush=True)


if __name__ == "__main__":
    main()
