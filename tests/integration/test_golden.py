"""The golden cases (tests/storage/golden/) through the real daemon: raw ring records in the
producer's order, then statistic.csv and every .npy compared byte for byte with what
make_golden.py (MindSpore's rules, written apart from dumpd) says each generation writes."""

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import write_config

pytest.importorskip("google.protobuf")
import rawclient as rc  # noqa: E402  (generates protobuf code)

GOLDEN = Path(__file__).resolve().parents[1] / "storage" / "golden"
WIRE_DTYPE = {"bool": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "uint8": 5,
              "uint16": 6, "uint32": 7, "uint64": 8, "float16": 9, "float32": 10,
              "float64": 11, "bfloat16": 12, "int4": 13, "uint1": 14, "complex64": 15,
              "complex128": 16}


def tensor_bytes(t):
    if "hex" in t:
        return bytes.fromhex(t["hex"])
    i = np.arange(t["values"]["ramp"], dtype=np.int64)
    return (((i * 7) % 1000) * 0.125 - 50.0).astype(np.float32).tobytes()


@pytest.mark.parametrize("ms_format", ["2.6", "2.7"])
def test_the_daemon_writes_the_golden_tree(daemon, workdir, ms_format):
    cases = json.loads((GOLDEN / "cases.json").read_text())
    (workdir / "dump").mkdir()
    cfg = write_config(workdir, saved_data="full", iteration="0",
                       statistic_category=cases["categories"][ms_format])
    s = rc.RawSession(daemon.socket, cfg.read_text(), str(workdir / "dump"),
                      capacity=4 << 20, ms_format=ms_format)
    sent = 0
    for op in cases["ops"]:
        # One record per tensor, in the order MindSpore writes rows: inputs, then outputs.
        for io in ("input", "output"):
            for t in (t for t in op["tensors"] if t["io"] == io):
                s.ring.commit_op(0, 0, op["op_name"], tensor_bytes(t), op_type=op["op_type"],
                                 io=0 if io == "input" else 1, slot=t["slot"],
                                 dtype=WIRE_DTYPE[t["dtype"]], timestamp_us=t["timestamp_us"],
                                 shape=t["shape"])
                sent += 1
    counts = s.flush().counts
    s.close()
    assert counts.tensors_written == sent and counts.tensors_failed == 0, counts
    d = workdir / "dump" / "rank_0" / "Net" / "0" / "0"
    assert (d / "statistic.csv").read_bytes() == (GOLDEN / ms_format / "statistic.csv").read_bytes()
    written = sorted(p.name for p in d.glob("*.npy"))
    golden = sorted(p.name for p in (GOLDEN / "npy").glob("*.npy"))
    assert len(written) == len(golden)
    for name in written:
        expected = GOLDEN / "npy" / name
        if not expected.exists():  # the 256-byte name, mapped to digits
            line = (d / "mapping.csv").read_text()
            assert line.startswith(name + ",") and len(line) == len(name) + 1 + 256 + 1
            expected = GOLDEN / "npy" / "long.npy"
        assert (d / name).read_bytes() == expected.read_bytes(), name
