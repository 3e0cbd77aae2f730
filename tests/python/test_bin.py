"""file_format "bin" end to end: a Python client dumps every dtype through the real daemon,
the bin files are read back by tests/integration/ascend_bin.py (an independent reader written
from shared/spec/ascend-bin-format.md), `dumpctl convert` turns them into the same arrays
the npy path writes, and the statistics rules of the job still apply."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

import dumpd
from conftest import Daemon, dump_files, make_config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
import ascend_bin  # noqa: E402  (the independent reader)

DUMPCTL = os.environ.get("DUMPCTL_BIN", "")
RNG = np.random.default_rng(77)

BF16_BITS = np.array([0x3F80, 0xC000, 0x7F80, 0xFF80, 0x0000, 0x8000], dtype=np.uint16)
BF16_VALUES = (BF16_BITS.astype(np.uint32) << 16).view(np.float32)
INT4_LOGICAL = np.array([-8, 7, 0, -1, 3, -3, 1, 2], dtype=np.int8)
INT4_PACKED = ((INT4_LOGICAL[0::2].astype(np.uint8) & 0x0F)
               | ((INT4_LOGICAL[1::2].astype(np.uint8) & 0x0F) << 4)).astype(np.uint8)


def _native() -> Dict[str, np.ndarray]:
    out: Dict[str, np.ndarray] = {"bool": RNG.integers(0, 2, size=(2, 3)).astype(np.bool_)}
    for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        info = np.iinfo(t)
        out[t] = RNG.integers(info.min, info.max, size=(2, 3), dtype=t, endpoint=True)
    for t in ("float16", "float32", "float64"):
        a = RNG.standard_normal((4, 2)).astype(t)
        a.flat[0], a.flat[1] = np.inf, -0.0
        out[t] = a
    for t in ("complex64", "complex128"):
        out[t] = (RNG.standard_normal(3) + 1j * RNG.standard_normal(3)).astype(t)
    return out


NATIVE = _native()


def _dump_everything(daemon: Daemon, root: Path, file_format: str) -> Path:
    config = make_config(root, saved_data="full", file_format=file_format)
    with dumpd.Client(config, socket=daemon.socket) as client:
        for name, array in NATIVE.items():
            # Two inputs and an output of one dtype; the output listed first.
            assert client.dump_op("Cast", f"Default/net.{name}/Cast-op1",
                                  outputs=[array[::-1].copy()], inputs=[array, array * 0])
        assert client.dump_op("Cast", "Default/bf16-op2", inputs=[(BF16_BITS, "bfloat16")],
                              outputs=[(INT4_PACKED, "int4"),
                                       (np.array([0, 1, 1], dtype=np.uint8), "uint1")])
        counts = client.flush()
    assert counts["tensors_failed"] == 0, counts["last_error"]
    return root / "dump"


@pytest.fixture(scope="module")
def trees(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, Path]:
    bin_root = _dump_everything(daemon, tmp_path_factory.mktemp("bin"), "bin")
    npy_root = _dump_everything(daemon, tmp_path_factory.mktemp("npy"), "npy")
    return bin_root, npy_root


def _bin_files(root: Path) -> Dict[str, Path]:
    """Sanitised op name -> its bin file (one execution each here)."""
    files = {}
    for p in sorted((root / "rank_0" / "Net" / "0" / "0").iterdir()):
        if p.name.endswith(".csv"):
            continue
        fields = p.name.split(".")
        assert len(fields) == 5, p.name  # {op_type}.{op_name}.{task}.{stream}.{timestamp}
        assert fields[0] == "Cast" and all(f.isdigit() for f in fields[2:]), p.name
        files[fields[1]] = p
    return files


def test_one_bin_file_per_op_execution_and_no_npy(trees) -> None:
    bin_root, _ = trees
    assert dump_files(bin_root) == []
    files = _bin_files(bin_root)
    assert sorted(files) == sorted([f"Default_net_{n}_Cast-op1" for n in NATIVE]
                                   + ["Default_bf16-op2"])
    for p in files.values():
        assert p.stat().st_mode & 0o777 == 0o400


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_every_native_dtype_reads_back(trees, name: str) -> None:
    f = ascend_bin.read_bin(_bin_files(trees[0])[f"Default_net_{name}_Cast-op1"])
    assert f["version"] == "2.0"
    assert f["op_name"] == f"Default/net.{name}/Cast-op1"  # the full name
    assert f["dump_time"] > 1_600_000_000_000_000  # microseconds since the epoch
    array = NATIVE[name]
    got = [t[3] for t in f["inputs"]] + [t[3] for t in f["outputs"]]
    want = [array, array * 0, array[::-1]]
    assert len(f["inputs"]) == 2 and len(f["outputs"]) == 1
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()  # bit exact, -0.0 and inf included


def test_bf16_int4_uint1_keep_their_device_types(trees) -> None:
    f = ascend_bin.read_bin(_bin_files(trees[0])["Default_bf16-op2"])
    (bf16,) = f["inputs"]
    int4, uint1 = f["outputs"]
    assert bf16[0] == "DT_BF16" and int4[0] == "DT_INT4" and uint1[0] == "DT_UINT1"
    assert bf16[3].view(np.uint32).tolist() == BF16_VALUES.view(np.uint32).tolist()
    np.testing.assert_array_equal(int4[3], INT4_LOGICAL)
    np.testing.assert_array_equal(uint1[3], [0, 1, 1])


def _rows_without_timestamps(root: Path) -> List[List[str]]:
    with open(root / "rank_0" / "Net" / "0" / "0" / "statistic.csv", newline="") as f:
        rows = list(csv.reader(f))
    ts = rows[0].index("Timestamp")
    return sorted(r[:ts] + r[ts + 1:] for r in rows[1:])


def test_statistics_are_the_npy_jobs(trees) -> None:
    bin_root, npy_root = trees
    rows = _rows_without_timestamps(bin_root)
    assert len(rows) > 3 * (len(NATIVE) - 2)  # complex tensors have no statistics
    assert rows == _rows_without_timestamps(npy_root)


def test_convert_gives_the_npy_paths_arrays(trees, tmp_path: Path) -> None:
    bin_root, npy_root = trees
    out = tmp_path / "converted"
    run = subprocess.run([DUMPCTL, "convert", str(bin_root), "-o", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    converted = {p.name: p for p in out.rglob("*.npy")}
    npy = {(f.op_name, f.io, f.slot): f for f in dump_files(npy_root)}
    assert len(converted) == len(npy) == 3 * len(NATIVE) + 3
    for (op, io, slot), f in npy.items():
        bin_name = _bin_files(bin_root)[op].name
        shape = "x".join(str(d) for d in np.load(f.path).shape)
        name = f"{bin_name}.{io}.{slot}.{shape}.npy"
        assert name in converted, (name, sorted(converted))
        a, b = np.load(converted[name]), np.load(f.path)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.tobytes() == b.tobytes(), name
