#!/usr/bin/env bash
# Everything measured on the lent GPU machine in one call (docs/performance.md): tests/gpu,
# the node-scale write path, the host's memory bandwidth, the producer's cost per CUDA
# tensor, and bench/gpu. Run from a kit made
# by bench/gpu/make_kit (build here, run there); results go to $OUT.
#   NODE_ARGS overrides node_bench.py's arguments, GPU_ARGS adds gpu_bench.py's (e.g.
#   --skip sync,every); SKIP="tests gpu" skips parts (tests node memory path gpu).
# The flight recorder's rows only (issue 22: tests/gpu, then the recorder rows with the time
# from a trigger to disk and the daemon's RSS), about 3 minutes:
#   SKIP="node memory path" GPU_ARGS="--skip one,statistics,every,profile,trace,split,sync,kernels"
# torch.compile on CUDA (issue 41, item 4: tests/gpu/test_gpu_compile.py runs with the tests),
# the compiled rows beside the eager ones, without the recorder:
#   SKIP="node memory path" GPU_ARGS="--compile --skip recorder,profile,trace,split,sync,kernels"
set -uo pipefail
cd "$(dirname "$0")"
export DUMPD_BIN=$PWD/bin/dumpd DUMPCTL_BIN=$PWD/bin/dumpctl PYTHONPATH=$PWD/python
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/dumpd-device-out}
mkdir -p "$OUT"
skip() { [[ " ${SKIP:-} " == *" $1 "* ]]; }
{ nvidia-smi -L; nproc; free -g; df -h /dev/shm; git_commit=$(cat COMMIT 2>/dev/null);
  echo "commit ${git_commit:-unknown}"; } 2>&1 | tee "$OUT/machine.txt"
if ! skip tests; then
  timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tee "$OUT/tests.log"
fi
if ! skip node; then
  # shellcheck disable=SC2086
  timeout 240 python3 bench/node_bench.py --dumpd "$DUMPD_BIN" --fs tmpfs=/dev/shm \
    ${NODE_ARGS:---ranks 1,8,16 --sizes 16M,4K --writers 2,16} >"$OUT/node.jsonl" \
    2> >(tee "$OUT/node.log" >&2)
fi
if ! skip memory; then
  timeout 60 python3 bench/gpu/host_memory.py | tee "$OUT/host_memory.jsonl"
fi
if ! skip path; then
  timeout 120 python3 bench/gpu/host_path.py | tee "$OUT/host_path.jsonl"
fi
if ! skip gpu; then
  # shellcheck disable=SC2086
  timeout 400 python3 bench/gpu/gpu_bench.py --out "$OUT/gpu_bench.json" --steps 6 \
    ${GPU_ARGS:-} 2>&1 |
    tee "$OUT/gpu_bench.log"
fi
