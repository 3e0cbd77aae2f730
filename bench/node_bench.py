#!/usr/bin/env python3
"""Node-scale write path (issue 25): N producer processes, each a real dumpd client with a
session of its own, against one dumpd, beside N plain processes (bench/raw_writer.cc) that
write the same bytes as files with the same per-file work (create a temporary name, write
header and payload, close, rename), in the same run and to the same file system.

Reports per (file system, tensor size, N): GB/s and files/s of both, their ratio, and the
daemon's CPU seconds per GB and per 1000 files. A run's time is from the start signal shared
by all N processes to the last one done (for dumpd: its flush() returned, every file is in
the page cache). One JSON object per line on stdout; a table on stderr.

    node_bench.py --dumpd build-release/bin/dumpd --ranks 1,2 --sizes 16M,1M,4K \\
        --fs tmpfs=/dev/shm,disk=/var/tmp [--writers 2,16] [--rank-bytes 1G]

Needs the dumpd Python module on PYTHONPATH and a C++ compiler for raw_writer when
--raw-writer is not given.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
HEADER_BYTES = 128  # what raw_writer adds per file, as dumpd's npy header


def parse_size(s):
    s = s.strip().upper().removesuffix("IB").removesuffix("B")
    return int(s[:-1]) * UNITS[s[-1]] if s[-1] in UNITS else int(s)


def size_name(n):
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


# ----------------------------------------------------------------------------- producer

def producer(args):
    """One rank: a dumpd session that dumps `count` tensors of `bytes` bytes after the start
    signal, `per_dir` per iteration, then flushes."""
    import numpy as np
    import dumpd

    config = {"common_dump_settings": {
        "dump_mode": 0, "path": args.root, "net_name": "Net", "iteration": "all",
        "saved_data": "tensor", "input_output": 0, "kernels": [], "support_device": [0]}}
    ring = max(64 << 20, min(1 << 30, 16 * (args.bytes + 4096)))
    arrays = [np.full(args.bytes, i + 1, dtype=np.uint8) for i in range(4)]
    with dumpd.Client(config=config, socket=args.socket, ring_bytes=ring,
                      backpressure="block") as c:
        print("ready", flush=True)
        sys.stdin.readline()
        start = time.monotonic_ns()
        for i in range(args.count):
            if i % args.per_dir == 0:
                c.set_step(i // args.per_dir)
            c.dump("Op", f"Default/Op-op{i % args.per_dir}", "output", 0, arrays[i % 4])
        dumped = time.monotonic_ns()
        counts = c.flush()
        end = time.monotonic_ns()
        stats = c.stats()
    if counts["tensors_written"] != args.count:
        sys.exit(f"rank wrote {counts['tensors_written']} of {args.count} tensors: {counts}")
    print(json.dumps({"dump_s": (dumped - start) / 1e9, "blocked_waits": stats["blocked_waits"]}))
    print(f"{start} {end}", flush=True)


# ----------------------------------------------------------------------------- parent side

def cpu_seconds(pid, tid=None):
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid):
    """{tid: (name, CPU seconds)} of the daemon's live threads."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[task.name] = ((task / "comm").read_text().strip(), cpu_seconds(pid, task.name))
        except OSError:
            pass  # a thread that just ended
    return out


def cpu_by_role(pid, before, after, total):
    """Daemon CPU seconds of a run by thread role: the io thread (the main one), the writer
    pool, and the per-session threads (what is left: they end with their session)."""
    def delta(name):
        return sum(after[t][1] - before.get(t, (name, 0.0))[1] for t in after
                   if after[t][0] == name and t != str(pid))
    io = after[str(pid)][1] - before[str(pid)][1]
    writers = delta("dumpd-writer")
    return {"io": io, "writers": writers, "sessions": total - io - writers}


def run_together(cmds, on_start=None):
    """Starts every command, waits for each "ready", sends the start signal to all, and
    returns (start_ns, end_ns) across them and the JSON lines they printed."""
    extras = []
    procs = [subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for c in cmds]
    try:
        for p, c in zip(procs, cmds):
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"{' '.join(map(str, c))} did not start: {line!r}")
        if on_start:
            on_start()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        spans = []
        for p, c in zip(procs, cmds):
            out, _ = p.communicate(timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(map(str, c))} failed ({p.returncode}): {out}")
            spans.append(tuple(int(x) for x in out.split()[-2:]))
            extras.extend(json.loads(l) for l in out.splitlines() if l.startswith("{"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return min(s for s, _ in spans), max(e for _, e in spans), extras


class Daemon:
    def __init__(self, binary, workdir, writers, extra):
        self.socket = str(Path(workdir) / "d.sock")
        settings = {"min_free_bytes": 0, "log_level": "warn", "max_ring_bytes": 1 << 30}
        settings.update(extra)
        if writers:
            settings["writer_threads"] = writers
        conf = Path(workdir) / "dumpd.json"
        conf.write_text(json.dumps(settings))
        self.log = Path(workdir) / "dumpd.log"
        self.proc = subprocess.Popen([binary, "--socket", self.socket, "--config", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"))
        deadline = time.monotonic() + 20
        while not os.path.exists(self.socket):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"dumpd did not start: {self.log.read_text()}")
            time.sleep(0.02)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=300)


def one(args, daemon, raw_writer, fs, fs_dir, size, n):
    per_rank = max(1, args.rank_bytes // size)
    if size <= 64 << 10:
        per_rank = min(per_rank, args.max_small_files)
    per_dir = 256 if size <= 64 << 10 else 16
    files = per_rank * n
    total = files * (size + HEADER_BYTES)
    work = Path(tempfile.mkdtemp(prefix="node-bench-", dir=fs_dir))
    try:
        os.sync()
        raw_cmds = []
        for r in range(n):
            (work / "raw" / str(r)).mkdir(parents=True)
            raw_cmds.append([raw_writer, str(work / "raw" / str(r)), str(size), str(per_rank),
                             str(per_dir)])
        s, e, _ = run_together(raw_cmds)
        raw_s = (e - s) / 1e9
        shutil.rmtree(work / "raw")
        os.sync()

        cpu = {}
        dumpd_cmds = [[sys.executable, __file__, "producer", "--socket", daemon.socket,
                       "--root", str(work / "dumpd" / str(r)), "--bytes", str(size),
                       "--count", str(per_rank), "--per-dir", str(per_dir)] for r in range(n)]
        pid = daemon.proc.pid

        def started():
            cpu["threads"] = thread_cpu(pid)
            cpu["before"] = cpu_seconds(pid)
        s, e, producers = run_together(dumpd_cmds, on_start=started)
        dumpd_cpu = cpu_seconds(pid) - cpu["before"]
        roles = cpu_by_role(pid, cpu["threads"], thread_cpu(pid), dumpd_cpu)
        dumpd_s = (e - s) / 1e9
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "bench": "node", "fs": fs, "tensor_bytes": size, "ranks": n, "files": files,
        "bytes": total, "writers": args.writers_now or "default",
        "daemon_settings": json.loads(args.daemon_settings),
        "dumpd_s": dumpd_s, "raw_s": raw_s,
        "dumpd_gbps": total / dumpd_s / 1e9, "raw_gbps": total / raw_s / 1e9,
        "dumpd_files_per_s": files / dumpd_s, "raw_files_per_s": files / raw_s,
        "ratio": raw_s / dumpd_s,
        "daemon_cpu_s": dumpd_cpu, "daemon_cpu_s_by_role": roles,
        "producer_dump_s_max": max(p["dump_s"] for p in producers),
        "producer_blocked_waits": sum(p["blocked_waits"] for p in producers),
        "daemon_cpu_s_per_gb": dumpd_cpu / (total / 1e9),
        "daemon_cpu_s_per_1000_files": dumpd_cpu / (files / 1000),
    }


def build_raw_writer(out_dir):
    exe = Path(out_dir) / "raw_writer"
    cxx = os.environ.get("CXX", "c++")
    subprocess.run([cxx, "-O2", "-std=c++17", "-o", str(exe), str(HERE / "raw_writer.cc")],
                   check=True)
    return str(exe)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "producer":
        ap = argparse.ArgumentParser(prog="node_bench.py producer")
        for a in ("--socket", "--root"):
            ap.add_argument(a, required=True)
        for a in ("--bytes", "--count", "--per-dir"):
            ap.add_argument(a, type=int, required=True)
        return producer(ap.parse_args(sys.argv[2:]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dumpd", required=True, help="the dumpd binary")
    ap.add_argument("--raw-writer",
                    help="a raw_writer binary built from bench/raw_writer.cc (default: compile it)")
    ap.add_argument("--ranks", default="1,2", help="comma-separated process counts")
    ap.add_argument("--sizes", default="16M,1M,4K", help="tensor sizes")
    ap.add_argument("--fs", default="tmpfs=/dev/shm,disk=/var/tmp",
                    help="name=directory pairs to write into")
    ap.add_argument("--writers", default="",
                    help="comma-separated writer_threads settings (default: the daemon's)")
    ap.add_argument("--daemon-settings", default="{}",
                    help="more daemon settings, as JSON (e.g. '{\"write_queue_bytes\": 1e9}')")
    ap.add_argument("--rank-bytes", default="512M", help="bytes each rank writes per run")
    ap.add_argument("--max-small-files", type=int, default=20000,
                    help="files per rank at most, for tensors of 64 KiB and less")
    args = ap.parse_args()
    args.rank_bytes = parse_size(args.rank_bytes)
    ranks = [int(x) for x in args.ranks.split(",")]
    sizes = [parse_size(x) for x in args.sizes.split(",")]
    targets = [kv.split("=", 1) for kv in args.fs.split(",")]
    writers = [int(x) for x in args.writers.split(",")] if args.writers else [0]
    with tempfile.TemporaryDirectory(prefix="node-bench-") as tmp:
        raw_writer = args.raw_writer or build_raw_writer(tmp)
        for w in writers:
            args.writers_now = w
            daemon = Daemon(args.dumpd, tmp, w, json.loads(args.daemon_settings))
            try:
                for fs, fs_dir in targets:
                    for size in sizes:
                        for n in ranks:
                            r = one(args, daemon, raw_writer, fs, fs_dir, size, n)
                            print(json.dumps(r), flush=True)
                            print(f"{fs:6} {size_name(size):>4} x{n:<2} writers {r['writers']}: "
                                  f"dumpd {r['dumpd_gbps']:6.2f} GB/s "
                                  f"{r['dumpd_files_per_s'] / 1e3:7.1f} kfiles/s | raw "
                                  f"{r['raw_gbps']:6.2f} GB/s "
                                  f"{r['raw_files_per_s'] / 1e3:7.1f} kfiles/s | "
                                  f"{r['ratio']:.2f}x | daemon {r['daemon_cpu_s_per_gb']:.2f} "
                                  f"cpu-s/GB, {r['daemon_cpu_s_per_1000_files'] * 1e3:.1f} "
                                  f"cpu-ms/1000 files (io/writers/sessions "
                                  f"{'/'.join(f'{v:.2f}' for v in r['daemon_cpu_s_by_role'].values())}"
                                  f" s) | producers dumping {r['producer_dump_s_max']:.2f} s, "
                                  f"{r['producer_blocked_waits']} waits", file=sys.stderr,
                                  flush=True)
            finally:
                daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
