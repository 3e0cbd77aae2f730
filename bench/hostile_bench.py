"""Latency of a well-behaved job's flush and of `dumpctl status` while a hostile client
attacks, against the same measurement without the attack, taken in the same run (row 8).

The hostile-client tests (tests/integration/test_hostile_*.py) assert that the benign job and
status keep answering under attack; how fast they answer is this figure. The agents are the
tests' own (tests/integration/rawclient.py through rawagent.Agent): `benign` (a dumpd.Client
dumping one 1 KiB tensor per iteration, flushing after each, 20 ms apart, reporting each
flush's latency) and `tightloop` (a dumpd.Client calling dump() as fast as it can on a 64 KiB
ring, so it always has records queued in the daemon's shared writer pool). A thread runs
`dumpctl status --json` back to back (rawagent.StatusLoop). Windows alternate: quiet (the
benign job alone), then the attack, `--rounds` times; the tight loop is stopped and its
session gone before the next quiet window. Starts its own dumpd (default settings) and
prints one JSON line:

    PYTHONPATH=build-release/python /usr/bin/python3 bench/hostile_bench.py \\
        --dumpd build-release/bin/dumpd --dumpctl build-release/bin/dumpctl --dir /tmp/hb
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from rawagent import Agent, StatusLoop  # noqa: E402
from run import Daemon  # noqa: E402  (bench/run.py: starts dumpd, waits for its socket)


def job_config(path):
    return {"common_dump_settings": {
        "dump_mode": 0, "path": str(path), "net_name": "Net", "iteration": "all",
        "saved_data": "tensor", "input_output": 0, "kernels": [], "support_device": [0]}}


def sessions(dumpctl, socket):
    out = subprocess.run([dumpctl, "--socket", socket, "status", "--json"], capture_output=True,
                         text=True, timeout=60, check=True)
    return len(json.loads(out.stdout)["sessions"])


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling a condition with a deadline


def summary(latencies):
    """p50, p99 and max in seconds (nearest rank) and the number of samples."""
    s = sorted(latencies)
    if not s:
        sys.exit("no samples in a window: make it longer")

    def rank(q):
        return s[min(len(s) - 1, round(q * (len(s) - 1)))]

    return {"p50": rank(0.50), "p99": rank(0.99), "max": s[-1], "n": len(s)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dumpd", required=True)
    ap.add_argument("--dumpctl", required=True)
    ap.add_argument("--dir", required=True, help="scratch directory (dump trees, socket)")
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each window")
    ap.add_argument("--rounds", type=int, default=2, help="quiet + attack windows")
    ap.add_argument("--quick", action="store_true", help="one round of 2 s windows")
    args = ap.parse_args()
    # The agents run in tests/integration: a relative PYTHONPATH (build-release/python) must
    # still find the dumpd package there.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    seconds, rounds = (2.0, 1) if args.quick else (args.seconds, args.rounds)
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    for name in ("benign", "tight"):
        (work / f"{name}.json").write_text(json.dumps(job_config(work / name)))

    d = Daemon(args.dumpd, str(work))
    benign = probe = None
    windows = {"quiet": [], "attack": []}  # (start, end) of each window
    try:
        benign = Agent("benign", "--socket", d.socket, "--config", work / "benign.json",
                       "--rank", 7, "--elements", 256)
        benign.wait(lambda e: e["event"] == "flush", 60, "the benign job's first flush")
        probe = StatusLoop(args.dumpctl, d.socket, period=0, timeout=60)
        for _ in range(rounds):
            t0 = time.monotonic()
            time.sleep(seconds)  # the measurement window itself, not a wait for an event
            windows["quiet"].append((t0, time.monotonic()))
            tight = Agent("tightloop", "--socket", d.socket, "--config", work / "tight.json",
                          "--rank", 1, "--ring-bytes", 64 << 10, "--elements", 64,
                          "--announce-after", 2000)
            tight.wait(lambda e: e["event"] == "running", 60, "the tight loop to run")
            t0 = time.monotonic()
            time.sleep(seconds)
            windows["attack"].append((t0, time.monotonic()))
            tight.proc.send_signal(signal.SIGUSR1)  # the agent's os._exit(0)
            tight.proc.wait(timeout=60)
            wait_until(lambda: sessions(args.dumpctl, d.socket) == 1, 60,
                       "the tight loop's session to end")
    finally:
        if probe is not None:
            probe.stop()
        if benign is not None:
            benign.finish()
        d.stop()

    def within(t, kind):
        return any(a <= t <= b for a, b in windows[kind])

    failed = [p for _, _, p in probe.samples if p is not None]
    if failed:
        sys.exit(f"{len(failed)} dumpctl status calls failed: {failed[0]}")
    flushes = benign.of("flush")
    result = {"bench": "hostile", "attack": "tightloop", "seconds": seconds, "rounds": rounds}
    for kind in ("quiet", "attack"):
        # A flush belongs to the window it started in (`at` is when its line arrived).
        result[f"flush_s_{kind}"] = summary(
            [e["latency"] for e in flushes if within(e["at"] - e["latency"], kind)])
        result[f"status_s_{kind}"] = summary([lat for t0, lat, _ in probe.samples
                                              if within(t0, kind)])
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
