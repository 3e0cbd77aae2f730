"""Runs dumpd's benchmarks and prints ratios against references measured in the same run.

Invoked by bench/run (which builds first). Each row pairs a dumpd figure with its reference:
memcpy, a raw sequential write, a raw create+write+close loop, an undumped training step,
`cat` of the files `dumpctl compare` reads, or the same latency without a hostile client.
`--only recorder` (or any of SECTIONS) runs one part.
"""

import argparse
import datetime
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("micro", "client", "python", "hostile", "compare", "recorder", "node", "torch2",
            "replicas", "stats", "mindspore")


class Daemon:
    """A dumpd whose anonymous RSS (rings excluded: they are shared memory) is sampled."""

    def __init__(self, binary, workdir):
        self.socket = str(Path(workdir) / "d.sock")
        self.proc = subprocess.Popen([binary, "--socket", self.socket, "--log-level", "warn"],
                                     stderr=open(Path(workdir) / "dumpd.log", "wb"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(self.socket)
                break
            except OSError:
                time.sleep(0.02)
            finally:
                s.close()
        self.peak_anon_kib = 0
        self._stop = False
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self):
        while not self._stop:
            try:
                for line in open(f"/proc/{self.proc.pid}/status"):
                    if line.startswith("RssAnon:"):
                        self.peak_anon_kib = max(self.peak_anon_kib, int(line.split()[1]))
            except OSError:
                return
            time.sleep(0.05)

    def stop(self):
        self._stop = True
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=300)


def run_json_lines(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{out.stdout}\n{out.stderr}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]


def bench_with_daemon(bins, disk_dir, args_of, env=None, python="/usr/bin/python3"):
    """Runs a bench script against a fresh dumpd in a scratch directory of disk_dir:
    args_of(daemon, work) gives the script and its arguments. Returns (JSON lines, daemon)."""
    with tempfile.TemporaryDirectory(prefix="dumpd-bench-", dir=disk_dir) as work:
        d = Daemon(str(bins / "dumpd"), work)
        try:
            lines = run_json_lines([python, *args_of(d, work)], env=env)
        finally:
            d.stop()
    return lines, d


def recorder_rows(row, l):
    """Rows 9 from recorder_bench.py's line (reference None: a figure without one)."""
    base = l["step_s_none"]
    for mode, st in l["status_warm"].items():
        print(f"recorder {mode}: ring_bytes {l['ring_bytes'] >> 20} MiB, steps "
              f"{l['recorder_steps']}, {l['ring_bytes_per_step'][mode] / 1e6:.1f} MB/step to the "
              f"ring, kept {st['kept_iterations']} iterations ({st['kept_bytes'] / 1e6:.1f} MB), "
              f"blocked waits {l['blocked_waits'][mode]}, dropped {l['tensors_dropped'][mode]}, "
              f"warning: {st['warning'] or '-'}")
    for mode, target in (("full", "<= 1.10"), ("statistic", "<= 1.05")):
        row(f"9. AlexNet step, recorder {mode} (steps {l['recorder_steps']}) vs no dump",
            l[f"step_s_{mode}"], base, l[f"step_s_{mode}"] / base, target, "s/step")
    row("9. AlexNet step, every iteration written (row 5) vs no dump", l["step_s_every"], base,
        l["step_s_every"] / base, "(reference)", "s/step")
    for mode in ("full", "statistic"):
        mb = l["trigger_bytes"][mode] / 1e6
        ms = l["trigger_s"][mode] * 1e3
        row(f"9. trigger -> kept iterations on disk, {mode} ({mb:.3g} MB of files)", ms, None,
            None, f"(figure) {mb / max(ms, 1e-9):.2f} GB/s", "ms")
    rss = l["rss_kib"]
    kept = sum(s["kept_bytes"] for s in l["status_warm"].values())
    for key in ("RssAnon", "RssShmem"):
        before, warm = rss["before_job"][key] / 1024, rss["warm"][key] / 1024
        row(f"9. daemon {key} recording vs before the job (kept {kept / 2**20:.0f} MiB)",
            warm, before, warm / max(before, 1 / 1024),
            "growth << kept" if key == "RssAnon" else "(figure: ring pages mapped)", "MiB")


def recorder_busy_rows(row, l):
    """Rows 9 (busy node) from recorder_bench.py's busy_node line."""
    base, block = l["step_s"]["none"], l["block_s"]["none"]
    for mode, st in l["status"].items():
        st = st or {}
        print(f"recorder busy {mode}: {l['threads']} torch threads, ring_bytes "
              f"{l['ring_bytes'] >> 20} MiB, {l['ring_bytes_per_step'][mode] / 1e6:.1f} MB/step, "
              f"blocked waits {l['blocked_waits'][mode]}, producer waits "
              f"{st.get('producer_waits', 0)}, discarded for space "
              f"{st.get('discarded_for_space', 0)}, kept {st.get('kept_iterations', 0)} "
              f"iterations, warning: {st.get('warning') or '-'}")
    for mode, target in (("full", "<= 1.10"), ("statistic", "<= 1.05")):
        step = l["step_s"][mode]
        row(f"9. busy node: small CNN step, recorder {mode} vs no dump", step, base, step / base,
            target, "s/step")
        row(f"9. busy node: {l['steps_timed']} steps and the flush, recorder {mode} vs no dump",
            l["block_s"][mode], block, l["block_s"][mode] / block, "(figure)", "s")
        copy = l["dump_call_s_per_step"][mode]
        row(f"9. busy node: the client's dump calls (the copy) per step, {mode}, vs the step",
            copy * 1e3, base * 1e3, 1 + copy / base, "(floor)", "ms")


def reference_envs(what):
    """The pinned reference environments (scripts/install-reference: built on first use,
    cached): a function from an environment's name to its directory, or None, with a warning
    that names `what` is left out, when they cannot be built."""
    install = ROOT / "scripts" / "install-reference"
    built = subprocess.run([str(install)], capture_output=True, text=True)
    if built.returncode != 0:
        print(f"warning: no {what}, scripts/install-reference failed: "
              f"{built.stderr[-1000:]}", file=sys.stderr)
        return None

    def where(name):
        return Path(subprocess.run([str(install), "--path", name], capture_output=True,
                                   text=True, check=True).stdout.strip())
    return where


def torch2_rows(row, results, bins, env, args, quick):
    """Rows 11 (bench/compile_bench.py) and 12 (bench/msprobe_torch_bench.py)."""
    where = reference_envs("torch 2 rows")
    if where is None:
        return
    python = str(where("torch2") / "bin" / "python")
    for script, extra in (("compile_bench.py", []),
                          ("compile_bench.py", ["--model", "convbn-cl"]),
                          ("msprobe_torch_bench.py", ["--msprobe-site", str(where("msprobe"))])):
        lines, _ = bench_with_daemon(bins, args.disk_dir, lambda d, work: [
            str(ROOT / "bench" / script), "--socket", d.socket, "--dir", work,
            *(["--dumpd-pid", str(d.proc.pid)] if script == "compile_bench.py" else []),
            *extra, *quick], env, python)
        results.setdefault(script.removesuffix(".py"), []).extend(lines)
        for l in lines:
            if l["bench"] == "compile_step":
                what = {"none": "undumped", "idle": "no iteration selected",
                        "statistic": "statistics every step",
                        "statistic_tensors": "statistics every step, tensors handed over",
                        "full": "one selected iteration in full"}[l["config"]]
                model = "CNN" if l.get("model", "small") == "small" else "channels-last Conv+BN CNN"
                row(f"11. {l['mode']} {model} step, {what}, vs {l['mode']} undumped", l["step_s"],
                    l["reference_s"], l["ratio"], l["target"], "s/step")
            elif l["bench"] == "msprobe_torch" and l["config"] != "none":
                row(f"12. CPU CNN step, {l['config']}, vs undumped", l["step_s"],
                    l["step_s_none"], l["ratio"], "(figure)", "s/step")
                row(f"12. {l['config']} bytes written per step", l["bytes_per_step"] / 1e6,
                    None, None, "(figure)", "MB")


def mindspore_rows(row, results, bins, env, args, quick):
    """Row 17 (bench/mindspore_bench.py): dumpd.mindspore on a PyNative step, and msprobe's
    MindSpore dump tried beside it, in the newest pinned MindSpore (msprobe's partner)."""
    where = reference_envs("MindSpore rows")
    if where is None:
        return
    sys.path.insert(0, str(ROOT / "tests" / "reference"))
    import pins

    ms_env = where(pins.mindspore_for_msprobe())
    site = str(next((ms_env / "lib").glob("python3*/site-packages")))
    msprobe_python = str(where("msprobe") / "bin" / "python")
    lines, _ = bench_with_daemon(bins, args.disk_dir, lambda d, work: [
        str(ROOT / "bench" / "mindspore_bench.py"), "--socket", d.socket, "--dir", work,
        "--msprobe-python", msprobe_python, "--mindspore-site", site, *quick],
        dict(env, GLOG_v="3"), str(ms_env / "bin" / "python"))
    results.setdefault("mindspore_bench", []).extend(lines)
    what = {"idle": "attached, nothing selected",
            "hooks": "hooks run, a kernel filter matching nothing",
            "recorder": "recorder always on (full)",
            "recorder_stat": "recorder always on (statistic)",
            "statistic": "statistics every step", "tensor": "tensors every step"}
    for l in lines:
        if l["bench"] == "mindspore_step" and l["config"] != "none":
            row(f"17. PyNative LeNet step, {what[l['config']]}, vs undumped", l["step_s"],
                l["reference_s"], l["ratio"], l["target"], "s/step")
        elif l["bench"] == "mindspore_msprobe":
            if "refused" in l:
                print(f"17. {l['config']}: cannot run: {l['refused']}")
            else:
                row(f"17. PyNative LeNet step, {l['config']}, vs undumped", l["step_s"],
                    l["reference_s"], l["ratio"], "(figure)", "s/step")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-release")
    ap.add_argument("--quick", action="store_true", help="shorter runs, noisier figures")
    ap.add_argument("--disk-dir", default=str(ROOT / "bench" / "results" / "scratch"))
    ap.add_argument("--only", choices=SECTIONS, action="append",
                    help="run only this part (repeatable); default: all")
    args = ap.parse_args()
    want = set(args.only or SECTIONS)
    build = ROOT / args.build
    bins = build / "bin"
    quick = ["--quick"] if args.quick else []
    rows = []
    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": {"cores": os.cpu_count(), "kernel": platform.release(),
                           "cpu": next((l.split(":", 1)[1].strip()
                                        for l in open("/proc/cpuinfo")
                                        if l.startswith("model name")), "?")},
               "rows": rows}

    def row(name, value, reference, ratio, target, unit):
        rows.append({"name": name, "dumpd": value, "reference": reference, "ratio": ratio,
                     "target": target, "unit": unit})

    # Micro-benchmarks (Google Benchmark), reported as absolute figures.
    micro = None
    if "micro" in want:
        micro = subprocess.run([str(bins / "dumpd_micro_bench"), "--benchmark_format=json",
                                "--benchmark_min_time=0.2" if args.quick
                                else "--benchmark_min_time=0.5"],
                               capture_output=True, text=True)
    if micro is None:
        pass
    elif micro.returncode != 0:
        print(f"warning: dumpd_micro_bench failed ({micro.returncode}): {micro.stderr[-500:]}",
              file=sys.stderr)
        results["micro_error"] = micro.returncode
    else:
        results["micro"] = [{k: b.get(k) for k in ("name", "real_time", "time_unit",
                                                    "bytes_per_second", "items_per_second",
                                                    "label")}
                            for b in json.loads(micro.stdout)["benchmarks"]]
        copies = {b["name"]: b["real_time"] for b in results["micro"]
                  if b["name"].startswith("BM_StridedCopy/")}
        reference = copies.get("BM_StridedCopy/0")
        for arg, what in (("1", "channels-last"), ("3", "every other element")):
            if reference and f"BM_StridedCopy/{arg}" in copies:
                t = copies[f"BM_StridedCopy/{arg}"]
                row(f"13. strided copy into C order, 16 MiB {what}, vs memcpy", t, reference,
                    t / reference, "(figure: was ascontiguousarray + memcpy)", "ms")
        # Replica fingerprints, as read rates of the same 16 MiB (GB/s).
        prints = {b["name"]: b["real_time"] for b in results["micro"]
                  if b["name"].startswith("BM_Fingerprint/")}
        gbps = lambda ms: (16 << 20) / (ms / 1000) / 1e9  # noqa: E731
        fp = prints.get("BM_Fingerprint/1")
        if fp and reference:
            row("14. replica fingerprint of 16 MiB vs memcpy's read of it", gbps(fp),
                gbps(reference), reference / fp, ">= 0.8", "GB/s")
        if fp and prints.get("BM_Fingerprint/0"):
            plain = prints["BM_Fingerprint/0"]
            row("14. replica fingerprint of 16 MiB vs a plain read (sum of words)", gbps(fp),
                gbps(plain), plain / fp, "(figure)", "GB/s")

        # Statistics (MindSpore's chunks) and the client's copy with its NaN/inf check.
        micro_ms = {b["name"]: b["real_time"] for b in results["micro"]}
        read = micro_ms.get("BM_Fingerprint/0")
        for name, what in (("BM_Statistics/0", "float32, ms_format 2.6"),
                           ("BM_Statistics/3", "float32, ms_format 2.7"),
                           ("BM_BF16Statistics/0", "bfloat16"),
                           ("BM_BF16Statistics/1", "float16")):
            t = micro_ms.get(name)
            if t and read:
                size = 16 << 20 if "BF16" not in name else 8 << 20
                row(f"16a. statistics of 4 Mi elements, {what} (rate) vs a plain read of 16 MiB",
                    size / (t / 1000) / 1e9, gbps(read), read / t * (size / (16 << 20)),
                    ">= 8 GB/s (float32), >= 4 (half types)", "GB/s")
        for size in ("1", "16"):
            plain = micro_ms.get(f"BM_FiniteCopy/0/{size}")
            checked = micro_ms.get(f"BM_FiniteCopy/1/{size}")
            if plain and checked:
                mib = int(size) << 20
                row(f"16b. client copy of {size} MiB float32 with the NaN/inf check vs memcpy",
                    mib / (checked / 1000) / 1e9, mib / (plain / 1000) / 1e9, checked / plain,
                    "(figure: replaces the daemon's second read)", "GB/s")

    peaks = {}
    for label, base in (("tmpfs", "/dev/shm"), ("disk", args.disk_dir)) if "client" in want \
            else ():
        Path(base).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="dumpd-bench-", dir=base) as work:
            d = Daemon(str(bins / "dumpd"), work)
            try:
                only = [] if label == "tmpfs" else ["--only", "sustained"]
                lines = run_json_lines([str(bins / "dumpd_client_bench"), "--socket", d.socket,
                                        "--dir", work, "--label", label, *only, *quick])
                if label == "disk":
                    lines += run_json_lines([str(bins / "dumpd_client_bench"), "--socket",
                                             d.socket, "--dir", work, "--label", label,
                                             "--only", "files", *quick])
            finally:
                d.stop()
            peaks[label] = d.peak_anon_kib
        for l in lines:
            if l["bench"] == "critical_path":
                s = l["size"]
                size = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
                row(f"1. dumpOp (C++) {size} tensors vs memcpy", l["dump_bytes_per_s"] / 1e9,
                    l["memcpy_bytes_per_s"] / 1e9,
                    l["dump_bytes_per_s"] / l["memcpy_bytes_per_s"],
                    ">= 0.8 (>= 1 MiB)", "GB/s")
            elif l["bench"] == "small_records":
                row("2. 256-byte tensors through dumpOp", l["records_per_s"] / 1e6, 1.0,
                    l["records_per_s"] / 1e6, ">= 1 (M records/s)", "M records/s")
            elif l["bench"] == "sustained":
                row(f"3. sustained client->files on {l['fs']} vs raw write",
                    l["dumpd_bytes_per_s"] / 1e9, l["raw_bytes_per_s"] / 1e9,
                    l["dumpd_bytes_per_s"] / l["raw_bytes_per_s"], ">= 0.9", "GB/s")
            elif l["bench"] == "files":
                row(f"4. 4 KiB files/s on {l['fs']} vs raw create+write+close",
                    l["dumpd_files_per_s"], l["raw_files_per_s"],
                    l["dumpd_files_per_s"] / l["raw_files_per_s"], ">= 0.8", "files/s")

    # Python client and the PyTorch training overhead.
    env = dict(os.environ, PYTHONPATH=str(build / "python"))
    has_python = (build / "python" / "dumpd" / "__init__.py").exists()
    if has_python and "replicas" in want:
        lines, _ = bench_with_daemon(bins, args.disk_dir, lambda d, work: [
            str(ROOT / "bench" / "replica_bench.py"), "--socket", d.socket, "--dir", work,
            *quick], env)
        for l in lines:
            row("15. DDP step (2 gloo ranks, 4x1024 MLP), check_replicas every step vs unchecked",
                l["step_s_checked"], l["step_s_unchecked"], l["ratio"], "<= 1.03", "s/step")
            row("15b. the same step with the digests only (no exchange) vs unchecked",
                l["step_s_digested"], l["step_s_unchecked"], l["ratio_digested"], "-", "s/step")
            row("15c. digest of a step's gradients+parameters vs a plain read of them (rate)",
                l["digested_bytes_per_step"] / l["digest_s"] / 1e9,
                l["digested_bytes_per_step"] / l["read_s"] / 1e9, l["digest_vs_read"],
                ">= 0.8", "GB/s")
            results.setdefault("replicas", []).append(l)

    if has_python and "stats" in want:
        lines, _ = bench_with_daemon(bins, args.disk_dir, lambda d, work: [
            str(ROOT / "bench" / "stats_bench.py"), "--socket", d.socket, "--dir", work,
            *quick], env)
        for l in lines:
            s = l["step_s"]
            row("16. statistics-only job (16 x 1 MiB float32 a step, busy node): client computes",
                s["client"], s["undumped"], l["ratio_client"], "<= 1.10", "s/step")
            row("16. the same, bytes cross and dumpd computes (host_statistics=False)",
                s["daemon"], s["undumped"], l["ratio_daemon"], "-", "s/step")
            results.setdefault("stats", []).append(l)

    if has_python and "python" in want:
        lines, d = bench_with_daemon(bins, args.disk_dir, lambda d, work: [
            str(ROOT / "bench" / "python_bench.py"), "--socket", d.socket, "--dir", work,
            *quick], env)
        peaks["training"] = d.peak_anon_kib
        for l in lines:
            if l["bench"] == "critical_path":
                s = l["size"]
                size = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
                row(f"1. client.dump (Python) {size} vs numpy copy", l["dump_bytes_per_s"] / 1e9,
                    l["memcpy_bytes_per_s"] / 1e9,
                    l["dump_bytes_per_s"] / l["memcpy_bytes_per_s"], ">= 0.8 (>= 1 MiB)",
                    "GB/s")
            elif l["bench"] == "training":
                base = l["step_s_none"]
                row("5. AlexNet step with dumpd vs no dump", l["step_s_dumpd"], base,
                    l["step_s_dumpd"] / base, "<= 1.10", "s/step")
                row("5. AlexNet step, dump_once off, vs no dump", l["step_s_dumpd_copy"], base,
                    l["step_s_dumpd_copy"] / base, "(reference)", "s/step")
                row("5. AlexNet bytes to the ring per step, dump once / off",
                    l["dump_bytes_per_step"] / 1e6, l["dump_bytes_per_step_copy"] / 1e6,
                    l["dump_bytes_per_step"] / l["dump_bytes_per_step_copy"], "< 1", "MB")
                row("5. AlexNet step with sync np.save vs no dump", l["step_s_npsave"], base,
                    l["step_s_npsave"] / base, "(reference)", "s/step")
                over_d = max(l["step_s_dumpd"] - base, 1e-9)
                over_n = l["step_s_npsave"] - base
                row("5. np.save overhead / dumpd overhead", over_n / over_d, 1.0, over_n / over_d,
                    ">= 3", "x")
                results["training"] = l
    # The benign job's flush and `dumpctl status` while a tight-loop client floods dumpd,
    # against the same without it (the figure the hostile tests no longer bound).
    if has_python and "hostile" in want:
        with tempfile.TemporaryDirectory(prefix="dumpd-bench-", dir=args.disk_dir) as work:
            lines = run_json_lines(["/usr/bin/python3", str(ROOT / "bench" / "hostile_bench.py"),
                                    "--dumpd", str(bins / "dumpd"), "--dumpctl",
                                    str(bins / "dumpctl"), "--dir", work, *quick], env=env)
        for l in lines:
            for what, label in (("flush", "benign flush"), ("status", "dumpctl status")):
                quiet, attack = l[f"{what}_s_quiet"], l[f"{what}_s_attack"]
                for stat in ("p50", "p99", "max"):
                    row(f"8. {label} {stat}, tight-loop client vs none", attack[stat] * 1e3,
                        quiet[stat] * 1e3, attack[stat] / quiet[stat],
                        "< 1000 ms" if stat == "max" else "(figure)", "ms")
            results["hostile"] = l
    # Flight recorder (issue 22): every step recorded, trigger to disk, daemon RSS.
    if has_python and "recorder" in want:
        Path(args.disk_dir).mkdir(parents=True, exist_ok=True)
        lines, d = bench_with_daemon(bins, args.disk_dir, lambda d, work: [
            str(ROOT / "bench" / "recorder_bench.py"), "--socket", d.socket, "--dir", work,
            "--dumpd-pid", str(d.proc.pid), "--dumpctl", str(bins / "dumpctl"), *quick], env)
        peaks["recorder"] = d.peak_anon_kib
        for l in lines:
            if l["bench"] == "recorder_busy":
                recorder_busy_rows(row, l)
                results["recorder_busy"] = l
            else:
                recorder_rows(row, l)
                results["recorder"] = l
    # Node scale (issue 25): N producer processes against one dumpd vs N raw writers.
    if has_python and "node" in want:
        Path(args.disk_dir).mkdir(parents=True, exist_ok=True)
        sizes = "16M,4K" if args.quick else "16M,1M,4K"
        lines = run_json_lines(["/usr/bin/python3", str(ROOT / "bench" / "node_bench.py"),
                                "--dumpd", str(bins / "dumpd"), "--ranks", "1,2",
                                "--sizes", sizes, "--rank-bytes", "256M",
                                "--max-small-files", "5000" if args.quick else "20000",
                                "--fs", f"tmpfs=/dev/shm,disk={args.disk_dir}"], env=env)
        for l in lines:
            size = l["tensor_bytes"]
            label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
            if size >= 1 << 20:
                row(f"10. {l['ranks']} ranks, {label} tensors, {l['fs']}: dumpd vs raw writers",
                    l["dumpd_gbps"], l["raw_gbps"], l["ratio"], ">= 0.9 (8-16 ranks)", "GB/s")
            else:
                row(f"10. {l['ranks']} ranks, {label} tensors, {l['fs']}: files/s vs raw",
                    l["dumpd_files_per_s"] / 1e3, l["raw_files_per_s"] / 1e3, l["ratio"],
                    ">= 0.7 (8 ranks)", "k files/s")
            row(f"10. daemon CPU per GB, {l['ranks']} ranks, {label}, {l['fs']}",
                l["daemon_cpu_s_per_gb"], None, None, "(figure)", "cpu-s/GB")
        results["node"] = lines
    # dumpctl compare on two page-cached trees, against cat of the same files.
    lines = []
    if "compare" in want:
        # msprobe beside it: the reference environments (cached; built on first use).
        where = reference_envs("msprobe row")
        side = ["--msprobe-cache", str(where("msprobe").parent)] if where else []
        with tempfile.TemporaryDirectory(prefix="dumpd-bench-", dir=args.disk_dir) as work:
            lines = run_json_lines(["/usr/bin/python3", str(ROOT / "bench" / "compare_bench.py"),
                                    "--dumpctl", str(bins / "dumpctl"), "--dir", work, *quick,
                                    *side])
    for l in lines:
        if l["bench"] == "compare_msprobe":
            row(f"7. dumpctl compare vs msprobe compare ({l['msprobe']}), two trees, "
                f"{l['bytes'] / 1e9:.2g} GB", l["dumpctl_s"], l["msprobe_s"],
                l["dumpctl_s"] / l["msprobe_s"], "(figure: lower is faster)", "s")
            continue
        gib = l["bytes"] / 2 / (1 << 30)
        row(f"7. dumpctl compare, two {gib:.2g} GiB trees, vs cat", l["compare_bytes_per_s"] / 1e9,
            l["cat_bytes_per_s"] / 1e9, l["compare_bytes_per_s"] / l["cat_bytes_per_s"],
            f">= 1 GB/s per core ({l['compare_bytes_per_s_per_core'] / 1e9:.2f} on "
            f"{l['cores']})", "GB/s")
        row("7. dumpctl compare, all cores vs -j 1", l["compare_bytes_per_s"] / 1e9,
            l["compare_one_thread_bytes_per_s"] / 1e9,
            l["compare_bytes_per_s"] / l["compare_one_thread_bytes_per_s"], "scales with cores",
            "GB/s")
    # torch 2 on the CPU (issue 40): the compiled step, and msprobe's PyTorch dump beside
    # dumpd's, each in the torch 2 reference environment (scripts/install-reference).
    if has_python and "torch2" in want:
        torch2_rows(row, results, bins, env, args, quick)
    if has_python and "mindspore" in want:
        mindspore_rows(row, results, bins, env, args, quick)
    for label, kib in peaks.items():
        row(f"6. daemon peak anonymous RSS ({label} runs)", kib / 1024, 64, kib / 1024 / 64,
            "< 64 MiB", "MiB")

    out = ROOT / "bench" / "results" / "latest.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    width = max(len(r["name"]) for r in rows) if rows else 10
    print(f"\n{'benchmark':<{width}}  {'dumpd':>12}  {'reference':>12}  {'ratio':>7}  target")

    def num(v, width, spec):  # None: a figure without a reference, left blank
        return " " * width if v is None else format(v, f">{width}{spec}")

    for r in rows:
        print(f"{r['name']:<{width}}  {num(r['dumpd'], 12, '.4g')}  "
              f"{num(r['reference'], 12, '.4g')}  {num(r['ratio'], 7, '.3f')}  {r['target']}  "
              f"[{r['unit']}]")
    if "micro" in results:
        print("\nmicro-benchmarks:")
        for b in results["micro"]:
            bps = b.get("bytes_per_second")
            ips = b.get("items_per_second")
            extra = f"{bps / 1e9:8.2f} GB/s" if bps else (f"{ips / 1e6:8.2f} M/s" if ips else "")
            print(f"  {b['name']:<40} {b['real_time']:>10.3f} {b['time_unit']}  {extra}  "
                  f"{b.get('label') or ''}")
    print(f"\nwritten {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
