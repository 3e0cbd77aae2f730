"""Row 16: where a statistics-only job's statistics are computed, measured by the step.

A "training step" of numpy matrix products on every core (a busy node) produces 16 float32
activations of 1 MiB each; a job with saved_data "statistic" dumps them every step. Blocks
of steps cycle between: undumped; host_statistics=True (the client computes the statistics
with dumpd's library, 96 bytes cross the ring); host_statistics=False (the bytes cross and
dumpd computes them). Each block ends with flush(), so the daemon's work is inside the
measured time. One JSON line: seconds per step of each mode and the ratios.

    python3 bench/stats_bench.py --socket S --dir D [--quick]
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import dumpd

EVERY_VALUE = ["max", "min", "avg", "count", "negative zero count", "positive zero count",
               "nan count", "negative inf count", "positive inf count", "zero count", "l2norm"]


def job_config(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "data_dump.json"
    config.write_text(json.dumps({
        "common_dump_settings": {
            "dump_mode": 0, "path": str(directory / "dump"), "net_name": "Net",
            "iteration": "all", "saved_data": "statistic", "input_output": 2, "kernels": [],
            "support_device": [0], "statistic_category": EVERY_VALUE},
        "e2e_dump_settings": {"enable": True, "trans_flag": True}}))
    return config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(16)
    weights = rng.standard_normal((512, 512)).astype(np.float32)
    x = rng.standard_normal((512, 512)).astype(np.float32)
    outs = [np.empty((512, 512), dtype=np.float32) for _ in range(16)]  # 1 MiB each

    def step(client, iteration):
        h = x
        for i, out in enumerate(outs):
            np.matmul(h, weights, out=out)
            np.tanh(out, out=out)
            h = out
            if client is not None:
                client.dump("MatMul", f"Default/net/layer{i}/MatMul-op{i}", "output", 0, out)

    clients = {"client": dumpd.Client(job_config(Path(args.dir) / "client"), socket=args.socket,
                                      host_statistics=True),
               "daemon": dumpd.Client(job_config(Path(args.dir) / "daemon"), socket=args.socket,
                                      host_statistics=False)}
    times = {"undumped": [], "client": [], "daemon": []}
    blocks, steps = (3, 10) if args.quick else (8, 20)
    iteration = 0
    for _ in range(blocks):
        for mode in times:
            client = clients.get(mode)
            start = time.perf_counter()
            for _ in range(steps):
                if client is not None:
                    client.set_step(iteration)
                step(client, iteration)
                iteration += 1
            if client is not None:
                client.flush(timeout=120)
            times[mode].append((time.perf_counter() - start) / steps)
    stats = {mode: c.stats() for mode, c in clients.items()}
    for c in clients.values():
        c.close()
    med = {mode: statistics.median(v) for mode, v in times.items()}
    print(json.dumps({
        "bench": "host_statistics", "step_s": med,
        "ratio_client": med["client"] / med["undumped"],
        "ratio_daemon": med["daemon"] / med["undumped"],
        "bytes_committed_per_step": {m: s["bytes_committed"] / (blocks * steps)
                                     for m, s in stats.items()},
        "host_statistics": {m: s["host_statistics"] for m, s in stats.items()}}))


if __name__ == "__main__":
    main()
