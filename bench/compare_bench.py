"""`dumpctl compare` throughput against `cat` of the same files, both from the page cache.

Builds two dump trees (LEFT, and RIGHT = LEFT with a small perturbation, so every metric is
computed on real differences) of float32 .npy files with MindSpore names, reads both once to
bring them into the page cache, then times `cat LEFT/* RIGHT/* > /dev/null` (the reference:
reading the bytes and nothing else), `dumpctl compare LEFT RIGHT -q -o CSV` on every core,
and the same with `-j 1` (how it scales). Prints one JSON line.

With `--msprobe-cache` (scripts/install-reference's cache), also times msprobe's compare of
MindSpore graph-mode dumps (`msprobe compare -m auto --rank 0`, mindstudio-probe as pinned in
tests/reference/pins.txt) against `dumpctl compare` on the same two trees of about 1 GB in
all, in the same run, and prints a second JSON line.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reference"))
from pins import mindspore_for_msprobe  # noqa: E402  (the pins file's reader)


def build_tree(root: Path, total_bytes: int, tensor_bytes: int, rng, perturb: float) -> list:
    iteration = root / "rank_0" / "Net" / "0" / "0"
    iteration.mkdir(parents=True)
    elements = tensor_bytes // 4
    base = np.random.default_rng(5).standard_normal(elements).astype(np.float32)
    files = []
    for i in range(max(1, total_bytes // tensor_bytes)):
        a = np.roll(base, i)
        if perturb:
            a = a + perturb * rng.standard_normal(elements).astype(np.float32)
        ts = 1700000000000000 + i
        name = f"MatMul.Default_MatMul-op{i}.0.0.{ts}.output.0.DefaultFormat.float32.npy"
        np.save(iteration / name, a)
        files.append(iteration / name)
    return files


def best_of(n, fn):
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def msprobe_side_by_side(dumpctl, cache: Path, work: Path, total: int, rng) -> dict:
    """Wall time of msprobe's compare and of `dumpctl compare` on the same two trees."""
    msprobe = cache / "msprobe" / "bin" / "msprobe"
    # msprobe's MindSpore compare imports mindspore: a MindSpore environment on its path.
    site = glob.glob(str(cache / mindspore_for_msprobe() / "lib" / "python3*" / "site-packages"))
    if not msprobe.exists() or not site:
        raise SystemExit(f"msprobe or a MindSpore environment missing under {cache}: "
                         "run scripts/install-reference")
    left, right = work / "ms-left", work / "ms-right"
    files = build_tree(left, total // 2, 8 << 20, rng, 0.0)
    files += build_tree(right, total // 2, 8 << 20, rng, 1e-3)
    size = sum(f.stat().st_size for f in files)
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
    env = dict(os.environ, PYTHONPATH=site[0])

    def run_msprobe():
        out_dir = work / "msprobe-out"
        out = subprocess.run([str(msprobe), "compare", "-m", "auto", "-tp",
                              str(left / "rank_0" / "Net"), "-gp", str(right / "rank_0" / "Net"),
                              "-o", str(out_dir), "--rank", "0"],
                             env=env, capture_output=True, text=True)
        results = list(out_dir.glob("compare_result_*.csv"))
        if out.returncode != 0 or not results:
            raise SystemExit(f"msprobe compare failed ({out.returncode}): {out.stdout[-2000:]}"
                             f"{out.stderr[-2000:]}")
        for f in results:
            f.unlink()

    def run_dumpctl():
        out = subprocess.run([dumpctl, "compare", str(left), str(right), "-q",
                              "-o", str(work / "ms-result.csv")], capture_output=True, text=True)
        if out.returncode not in (0, 1):
            raise SystemExit(f"dumpctl compare failed ({out.returncode}): {out.stderr}")

    t_dumpctl = best_of(2, run_dumpctl)
    t_msprobe = best_of(1, run_msprobe)  # minutes: one run
    return {"bench": "compare_msprobe", "bytes": size, "tensors": len(files),
            "dumpctl_s": t_dumpctl, "msprobe_s": t_msprobe,
            "msprobe": (cache / "msprobe" / ".dumpd-pin").read_text().split()[-1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dumpctl", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--msprobe-cache", type=Path,
                    help="scripts/install-reference's cache: also time msprobe's compare")
    args = ap.parse_args()
    total = (256 << 20) if args.quick else (2 << 30)
    tensor = 16 << 20
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="dumpd-compare-", dir=args.dir) as work:
        left, right = Path(work) / "left", Path(work) / "right"
        files = build_tree(left, total, tensor, rng, 0.0)
        files += build_tree(right, total, tensor, rng, 1e-3)
        size = sum(f.stat().st_size for f in files)
        paths = [str(f) for f in files]

        def cat():
            subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True)

        def compare(threads=None):
            jobs = ["-j", str(threads)] if threads else []
            out = subprocess.run([args.dumpctl, "compare", str(left), str(right), "-q", *jobs,
                                  "-o", str(Path(work) / "result.csv")],
                                 capture_output=True, text=True)
            if out.returncode not in (0, 1):
                raise SystemExit(f"dumpctl compare failed ({out.returncode}): {out.stderr}")

        cat()  # into the page cache
        runs = 2 if args.quick else 3
        t_cat = best_of(runs, cat)
        t_compare = best_of(runs, compare)
        t_one = best_of(runs, lambda: compare(1))  # scaling with cores
        side = None
        if args.msprobe_cache:
            shutil.rmtree(left)
            shutil.rmtree(right)
            side = msprobe_side_by_side(args.dumpctl, args.msprobe_cache, Path(work),
                                        (256 << 20) if args.quick else (1 << 30), rng)
    cores = os.cpu_count() or 1
    print(json.dumps({"bench": "compare", "bytes": size, "cores": cores,
                      "compare_bytes_per_s": size / t_compare, "cat_bytes_per_s": size / t_cat,
                      "compare_bytes_per_s_per_core": size / t_compare / cores,
                      "compare_one_thread_bytes_per_s": size / t_one}))
    if side:
        print(json.dumps(side))


if __name__ == "__main__":
    main()
