#!/usr/bin/env python3
"""bench/gpu: what dumping costs a GPU training step (needs a CUDA GPU, torch and a dumpd
binary). Every ratio is against references measured in the same run:

  undumped      the same step with no hooks
  sync_cpu      hooks doing tensor.cpu() + np.save (what in-process tools do)
  snapshot      undumped + dumped bytes / measured device-to-device copy bandwidth
                (the device-side floor of a snapshot)
  d2h           dumped bytes / measured pinned device-to-host bandwidth

A step is timed as a training loop experiences it: from the producer's stream being idle to
its being done again (torch.cuda.current_stream().synchronize(), what loss.item() waits for),
not a device-wide synchronize, which would also wait for dumpd's own copy stream.

Usage: DUMPD_BIN=.../dumpd python3 gpu_bench.py [--out results.json] [--workloads gpt,resnet]
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import dumpd
import dumpd.torch
from dumpd.torch._session import _Session
from workloads import make_workload  # bench/gpu/workloads.py, next to this file

GiB = 1 << 30


# ----------------------------------------------------------------------------- timing

def timed(step, host=None):
    """Seconds until the step's work is done on the device; `host` (a list) gets the seconds
    until step() returned, the host's part (below the step time: the host ran ahead)."""
    s = torch.cuda.current_stream()
    s.synchronize()
    t0 = time.perf_counter()
    step()
    if host is not None:
        host.append(time.perf_counter() - t0)
    s.synchronize()
    return time.perf_counter() - t0


def fmt(breakdown):
    return ", ".join(f"{k.replace('_ns', '')} {v:.2f}" for k, v in breakdown.items())


def kernel_rates(daemon, root):
    """Device time of dumpd's kernels on one tensor, as bytes read per second, beside torch's
    own one-pass reduction (aminmax) and copy of the same tensor: the statistics pass
    (saved_data "statistic": both kernels) and the snapshot (saved_data "tensor", staged).
    Each repetition is a new step, so dump once never turns the tensor into a reference."""
    out = {}
    for dtype, mib in ((torch.bfloat16, 256), (torch.float32, 256), (torch.bfloat16, 16),
                       (torch.float32, 98)):
        x = torch.randn((mib << 20) // (2 if dtype == torch.bfloat16 else 4), device="cuda",
                        dtype=dtype)
        y = torch.empty_like(x)
        name = f"{str(dtype).split('.')[1]}_{mib}MiB"

        def device_s(fn, before=lambda rep: None):
            best = float("inf")
            for rep in range(6):
                before(rep)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                best = min(best, a.elapsed_time(b) / 1e3)
            return best
        rates = {"torch_aminmax": x.nbytes / device_s(lambda: torch.aminmax(x)),
                 "torch_copy": x.nbytes / device_s(lambda: y.copy_(x))}
        for saved, key in (("statistic", "dumpd_statistics"), ("tensor", "dumpd_snapshot")):
            cfg = job_config(root, saved, "all")
            with dumpd.Client(str(cfg), socket=daemon.socket, ring_bytes=2 * GiB,
                              device_staging_bytes=GiB) as c:
                session = _Session(c, "raise")  # what the hooks call, per op
                rates[key] = x.nbytes / device_s(
                    lambda: session.dump("Op", "Default/Op-op0", (), x, False, True),
                    before=c.set_step)
                c.flush()
                assert c.stats()["tensors_deduplicated"] == 0
            shutil.rmtree(root, ignore_errors=True)
        out[name] = rates
        print(f"[kernels] {name}, GB/s read: " +
              ", ".join(f"{k} {v/1e9:.0f}" for k, v in rates.items()), flush=True)
        x = y = None  # freed before the next one
    torch.cuda.empty_cache()
    return out


def bandwidths():
    n = 1 * GiB
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    for _ in range(2):
        b.copy_(a)
        h.copy_(a, non_blocking=True)
    torch.cuda.synchronize()
    t = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        b.copy_(a)
        torch.cuda.synchronize()
        t.append(time.perf_counter() - t0)
    d2d = n / min(t)  # bytes copied per second (each read once and written once)
    t = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        h.copy_(a, non_blocking=True)
        torch.cuda.synchronize()
        t.append(time.perf_counter() - t0)
    d2h = n / min(t)
    del a, b, h
    torch.cuda.empty_cache()
    return d2d, d2h


# ----------------------------------------------------------------------------- daemon

class Daemon:
    def __init__(self, binary, root):
        self.dir = Path(tempfile.mkdtemp(prefix="dgb", dir="/tmp"))
        self.socket = str(self.dir / "d.sock")
        conf = {"min_free_bytes": 0, "writer_threads": 12, "write_queue_bytes": 4 * GiB,
                "max_ring_bytes": 16 * GiB, "log_level": "warn"}
        (self.dir / "d.json").write_text(json.dumps(conf))
        self.log = open(self.dir / "d.log", "wb")
        self.proc = subprocess.Popen([binary, "--socket", self.socket, "--config",
                                      str(self.dir / "d.json")], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not os.path.exists(self.socket):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError((self.dir / "d.log").read_text())
            time.sleep(0.05)
        self.root = root

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=300)


NOTHING = "none"  # no iteration selected: the recorder keeps every step


def job_config(root, saved_data, iteration, recorder=None):
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    path = root.parent / f"{root.name}.json"
    extra = {"flight_recorder": recorder} if recorder else {}
    path.write_text(json.dumps({**extra,
        "common_dump_settings": {"dump_mode": 0, "path": str(root), "net_name": "Net",
                                 "iteration": iteration, "saved_data": saved_data,
                                 "input_output": 0, "kernels": [],
                                 "support_device": [0, 1, 2, 3, 4, 5, 6, 7]},
        "e2e_dump_settings": {"enable": True, "trans_flag": True}}))
    return path


def dumped_run(daemon, model, step, root, *, saved_data, iteration, steps, ring, staging,
               recorder=None):
    """Times `steps` steps with dumpd hooks; returns (step times, bytes per dumped step).
    With a recorder, then triggers once and times it: dumped_run.trigger."""
    cfg = job_config(root, saved_data, iteration, recorder)
    times, dumped, host = [], [], []
    with dumpd.Client(str(cfg), socket=daemon.socket, ring_bytes=ring,
                      device_staging_bytes=staging) as c:
        h = dumpd.torch.attach(model, c)
        first = None
        for i in range(steps):
            if i == min(2, steps - 1):
                first = c.stats()
            before = c.stats()["bytes_committed"]
            c.set_step(i)
            times.append(timed(step, host))
            dumped.append(c.stats()["bytes_committed"] - before)
        last = c.stats()
        h.remove()
        t0 = time.perf_counter()
        counts = c.flush()
        drain = time.perf_counter() - t0
        if recorder:
            dumped_run.trigger = trigger_to_disk(daemon, c, root)
    shutil.rmtree(root, ignore_errors=True)
    assert counts["tensors_failed"] == 0, counts
    dumped_run.host_s = statistics.median(host[2:]) if len(host) > 2 else host[-1]
    # The producer thread's time per measured step, taken apart (the client's counters).
    n = steps - min(2, steps - 1)
    dumped_run.breakdown = client_ms(first, last, TIME_KEYS, n)
    dumped_run.breakdown["records"] = (last["records_committed"] - first["records_committed"]) / n
    dumped_run.breakdown["blocked_waits"] = (last["blocked_waits"] - first["blocked_waits"]) / n
    return times, dumped, drain, counts


def rss_kib(pid):
    """VmRSS and RssAnon of `pid` in KiB (kept records stay in the ring and on the device,
    not in the daemon's heap)."""
    out = {}
    for line in open(f"/proc/{pid}/status"):
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "RssAnon"):
            out[key] = int(line.split()[1])
    return out


def trigger_to_disk(daemon, c, root):
    """A manual trigger after the timed steps: seconds from trigger() until flush() returns
    (the kept iterations fetched from the device and written, in the page cache), the bytes
    and tensors written, the device records kept and fetched, and the daemon's RSS while
    recording and after writing."""
    before = c.stats()
    rss_recording = rss_kib(daemon.proc.pid)
    t0 = time.perf_counter()
    c.trigger("bench")
    counts = c.flush()
    seconds = time.perf_counter() - t0
    after = c.stats()
    files = [f for f in Path(root).rglob("*") if f.is_file()]
    return {"s": seconds, "tensors_written": counts["tensors_written"],
            "bytes_on_disk": sum(f.stat().st_size for f in files),
            "iterations": sorted({p.name for f in files for p in f.parents
                                  if p.name.isdigit() and p.parent.parent.name == "Net"}),
            "device_records_deferred": before["device_records_deferred"],
            "device_records_fetched": after["device_records_fetched"] -
            before["device_records_fetched"],
            "daemon_rss_kib": {"recording": rss_recording,
                               "after_trigger": rss_kib(daemon.proc.pid)}}


def sync_cpu_run(model, step, root):
    """One step with in-process synchronous hooks: tensor.cpu() + np.save per tensor."""
    root.mkdir(parents=True, exist_ok=True)
    n = [0]

    def save(t):
        if isinstance(t, torch.Tensor) and t.is_cuda:
            a = t.detach().float().cpu().numpy() if t.dtype == torch.bfloat16 else \
                t.detach().cpu().numpy()
            np.save(root / f"{n[0]}.npy", a)
            n[0] += 1

    def hook(mod, args, out):
        for a in args:
            save(a)
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            save(o)
    hooks = [m.register_forward_hook(hook) for m in model.modules()
             if next(m.children(), None) is None]
    t = timed(step)
    for hk in hooks:
        hk.remove()
    shutil.rmtree(root, ignore_errors=True)
    return t


TIME_KEYS = ("dump_ns", "device_submit_ns", "device_enqueue_ns", "device_wait_ns")


def client_ms(first, last, keys, steps=1):
    """The client's counters `keys` between two stats() snapshots, in ms per step."""
    return {k: (last[k] - first[k]) / steps / 1e6 for k in keys}


@contextlib.contextmanager
def statistics_client(daemon, model, step, root):
    """A client dumping every op's statistics through hooks on `model`, after three warm-up
    steps, marked at step 3; hooks removed and the client flushed afterwards."""
    cfg = job_config(root, "statistic", "all")
    with dumpd.Client(str(cfg), socket=daemon.socket, ring_bytes=GiB,
                      device_staging_bytes=GiB) as c:
        h = dumpd.torch.attach(model, c)
        for i in range(3):
            c.set_step(i)
            timed(step)
        c.set_step(3)
        try:
            yield c
        finally:
            h.remove()
            c.flush()
    shutil.rmtree(root, ignore_errors=True)


def profile_step(daemon, model, step, root):
    """The host cost of one step dumping every op's statistics (no bytes cross), under
    cProfile: where the producer thread's time goes per tensor (issue 23)."""
    import cProfile
    import io
    import pstats
    with statistics_client(daemon, model, step, root) as c:
        first = c.stats()
        prof = cProfile.Profile()
        prof.enable()
        t = timed(step)
        prof.disable()
        last = c.stats()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(18)
    print(text.getvalue(), flush=True)
    tensors = last["tensors_committed"] - first["tensors_committed"]
    inside = client_ms(first, last, TIME_KEYS)
    inside["blocked_waits"] = last["blocked_waits"] - first["blocked_waits"]  # a count
    print(f"profiled step: {t*1e3:.1f} ms under cProfile, {tensors} tensors; inside the client, "
          f"ms: {fmt(inside)}", flush=True)
    return {"step_s_under_cprofile": t, "tensors": tensors, "top": text.getvalue(),
            "client_ms": inside}


def host_split(daemon, model, step, root, steps):
    """Where the host part of a statistics step goes (issue 23): the undumped step, hooks that
    select nothing, and statistics of every op with the time inside the hooks measured and the
    client's own time beside it; then the same with the garbage collector's objects frozen."""
    import gc
    from dumpd.torch import _attach
    inside = [0.0]
    original = _attach._Hook.__call__

    def timed_hook(self, module, *args):
        t0 = time.perf_counter()
        try:
            return original(self, module, *args)
        finally:
            inside[0] += time.perf_counter() - t0
    out = {}
    host = []
    for _ in range(steps):
        timed(step, host)
    out["undumped_host_ms"] = statistics.median(host[2:]) * 1e3
    _attach._Hook.__call__ = timed_hook
    try:
        for label, iteration, freeze in (("nothing_selected", NOTHING, False),
                                         ("statistics", "all", False),
                                         ("statistics_gc_frozen", "all", True)):
            if freeze:
                gc.collect()
                gc.freeze()
            inside[0] = 0.0
            times, _, _, _ = dumped_run(daemon, model, step, root, saved_data="statistic",
                                        iteration=iteration, steps=steps, ring=GiB, staging=GiB)
            if freeze:
                gc.unfreeze()
            row = {"step_ms": statistics.median(times[2:]) * 1e3,
                   "host_ms": dumped_run.host_s * 1e3,
                   "in_hooks_ms": inside[0] / steps * 1e3,
                   "client_dump_ms": dumped_run.breakdown["dump_ns"]}
            out[label] = row
            print(f"  host split, {label}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()),
                  flush=True)
    finally:
        _attach._Hook.__call__ = original
    print(f"  host split, undumped host {out['undumped_host_ms']:.2f} ms", flush=True)
    return out


def device_trace(daemon, model, step, root):
    """One step dumping every op's statistics under torch.profiler: the device time of
    dumpd's kernels against the step's, and the kernels that took the most (issue 23)."""
    from torch.profiler import ProfilerActivity, profile
    with statistics_client(daemon, model, step, root):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            timed(step)
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0)
        if t > 0:
            rows.append((t / 1e3, e.count, e.key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    ours = sum(r[0] for r in rows if "Statistics" in r[2] or "copyVec16" in r[2]
               or "copyBytes" in r[2])
    print(f"device time in the traced step: {total:.2f} ms, dumpd's kernels {ours:.2f} ms",
          flush=True)
    for ms, count, key in rows[:10]:
        print(f"  {ms:8.3f} ms {count:5d}x  {key[:90]}", flush=True)
    return {"device_ms": total, "dumpd_kernels_ms": ours,
            "top": [{"ms": ms, "count": n, "kernel": k} for ms, n, k in rows[:15]]}


def bench(name, daemon, d2d, d2h, root, steps, skip, compiled=False):
    model, step, title = make_workload(name, compiled)
    name = f"{name} compiled" if compiled else name
    for _ in range(5):  # compiled: the first call compiles (dumped runs recompile once too)
        timed(step)
    host = []
    undumped = statistics.median(timed(step, host) for _ in range(15))
    out = {"workload": title, "undumped_s": undumped, "undumped_host_s": statistics.median(host)}
    print(f"[{name}] undumped {undumped*1e3:.1f} ms (host {out['undumped_host_s']*1e3:.1f} ms)",
          flush=True)

    # One selected iteration in full (iteration 3 of 0..7): staging and ring hold a step.
    if "one" not in skip:
        times, dumped, drain, counts = dumped_run(
            daemon, model, step, root, saved_data="tensor", iteration="3", steps=8, ring=8 * GiB,
            staging=10 * GiB)
        b = dumped[3]
        out["one_iteration"] = {"step_s": times[3], "bytes": b, "drain_after_s": drain,
                                "host_s": dumped_run.host_s,
                                "next_steps_s": times[4:], "ratio": times[3] / undumped,
                                "tensors_written": counts["tensors_written"]}
        snapshot_floor = undumped + b / d2d
        out["one_iteration"]["snapshot_floor_ratio"] = snapshot_floor / undumped
        print(f"[{name}] one iteration: {times[3]*1e3:.1f} ms ({times[3]/undumped:.2f}x), "
              f"{b/1e9:.2f} GB, snapshot floor {snapshot_floor/undumped:.2f}x", flush=True)

    # Every iteration, statistics only (computed on the device: 96 bytes cross per tensor).
    if "statistics" not in skip:
        times, dumped, drain, _ = dumped_run(
            daemon, model, step, root, saved_data="statistic", iteration="all", steps=steps,
            ring=8 * GiB, staging=GiB)
        med = statistics.median(times[2:])
        out["statistics_every_iteration"] = {"step_s": med, "ratio": med / undumped,
                                             "host_s": dumped_run.host_s,
                                             "bytes_per_step": dumped[-1]}
        out["statistics_every_iteration"]["breakdown_ms"] = dumped_run.breakdown
        print(f"[{name}] statistics every iteration: {med*1e3:.1f} ms ({med/undumped:.2f}x), host "
              f"{dumped_run.host_s*1e3:.1f} ms; per step, ms: {fmt(dumped_run.breakdown)}",
              flush=True)

    # Every iteration in full: against the device-to-host floor of the bytes.
    if "every" not in skip:
        times, dumped, drain, _ = dumped_run(
            daemon, model, step, root, saved_data="tensor", iteration="all", steps=steps,
            ring=8 * GiB, staging=GiB)
        med = statistics.median(times[2:])
        floor = dumped[-1] / d2h
        out["every_iteration"] = {"step_s": med, "d2h_floor_s": floor, "ratio_to_d2h": med / floor,
                                  "ratio": med / undumped, "bytes_per_step": dumped[-1]}
        print(f"[{name}] every iteration: {med*1e3:.1f} ms = {med/floor:.2f}x the D2H floor "
              f"({floor*1e3:.1f} ms)", flush=True)

    # The flight recorder always on (issue 22): nothing selected, every step kept, steps 2.
    # "full" keeps the snapshots in device staging: it holds two steps (~4.7 GB each here).
    recorder_rows = [] if "recorder" in skip else [("statistic", GiB, GiB),
                                                   ("full", 16 * GiB, 10 * GiB)]
    for mode, ring, staging in recorder_rows:
        times, dumped, drain, counts = dumped_run(
            daemon, model, step, root, saved_data=mode, iteration=NOTHING, steps=steps,
            ring=ring, staging=staging, recorder={"steps": 2, "saved_data": mode})
        med = statistics.median(times[2:])
        out[f"recorder_{mode}"] = {"step_s": med, "ratio": med / undumped,
                                   "host_s": dumped_run.host_s,
                                   "breakdown_ms": dumped_run.breakdown,
                                   "ring_bytes_per_step": dumped[-1],
                                   "tensors_written": counts["tensors_written"],
                                   "trigger": dumped_run.trigger}
        t = dumped_run.trigger
        print(f"[{name}] recorder {mode}, steps 2: {med*1e3:.1f} ms ({med/undumped:.2f}x), "
              f"{dumped[-1]/1e9:.3f} GB/step to the ring, host {dumped_run.host_s*1e3:.1f} ms; "
              f"per step, ms: {fmt(dumped_run.breakdown)}", flush=True)
        print(f"[{name}] recorder {mode}: trigger to disk {t['s']*1e3:.0f} ms, "
              f"{t['tensors_written']} tensors, {t['bytes_on_disk']/1e9:.3f} GB, iterations "
              f"{t['iterations']}; device records kept {t['device_records_deferred']}, fetched "
              f"{t['device_records_fetched']}; daemon RSS {t['daemon_rss_kib']}", flush=True)

    return finish(out, model, step, root, daemon, name, undumped, skip)


def finish(out, model, step, root, daemon, name, undumped, skip):
    """The profile and the synchronous reference (each skippable), then frees the model."""
    if "profile" not in skip:
        out["profile"] = profile_step(daemon, model, step, root)
    if "trace" not in skip:
        out["trace"] = device_trace(daemon, model, step, root)
    if "split" not in skip:
        out["host_split"] = host_split(daemon, model, step, root, 6)
    if "sync" not in skip:
        t = sync_cpu_run(model, step, root)
        out["sync_cpu_np_save"] = {"step_s": t, "ratio": t / undumped}
        print(f"[{name}] sync .cpu()+np.save: {t*1e3:.0f} ms ({t/undumped:.1f}x)", flush=True)
    del model
    torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu_bench.json")
    ap.add_argument("--workloads", default="gpt,resnet")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--root", default="/dev/shm/dumpd-gpu-bench")
    ap.add_argument("--compile", action="store_true",
                    help="also each workload with its forward under torch.compile (issue 41, "
                    "item 4), against the compiled undumped step; rows under <workload>_compiled"
                    " (the profile, trace, host split and synchronous rows are left out there)")
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out: one (one "
                    "iteration in full), statistics (every iteration's statistics), every "
                    "(every iteration in full), recorder, profile, trace, split, sync, "
                    "kernels")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA GPU (torch.cuda.is_available() is False)")
        return 0
    reason = dumpd.cuda_unavailable_reason()
    if reason:
        print(f"SKIPPED: {reason}")
        return 0
    binary = os.environ.get("DUMPD_BIN", "dumpd")
    d2d, d2h = bandwidths()
    print(f"device-to-device {d2d/1e9:.0f} GB/s (copied), pinned device-to-host "
          f"{d2h/1e9:.1f} GB/s", flush=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "d2d_bytes_per_s": d2d,
              "d2h_bytes_per_s": d2h, "workloads": {}}
    daemon = Daemon(binary, Path(args.root))
    skip = set(filter(None, args.skip.split(",")))
    try:
        if "kernels" not in skip:
            result["kernels"] = kernel_rates(daemon, Path(args.root) / "kernels")
        for w in args.workloads.split(","):
            result["workloads"][w] = bench(w, daemon, d2d, d2h, Path(args.root) / w, args.steps,
                                           skip)
            if args.compile:
                # The synchronous hooks would break the graph; the profiles are eager's.
                result["workloads"][f"{w}_compiled"] = bench(
                    w, daemon, d2d, d2h, Path(args.root) / f"{w}_compiled", args.steps,
                    skip | {"profile", "trace", "split", "sync"}, compiled=True)
    finally:
        daemon.stop()
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
