"""Host tensors of which only statistics are written (saved_data "statistic", no md5/sha1):
the client computes them with dumpd's own library and 96 bytes cross the ring instead of the
tensor (Client(host_statistics=True), the default). statistic.csv is then the same, byte for
byte, as when the bytes cross and dumpd computes the statistics (host_statistics=False), in
both ms_format generations, on every path of the library: the AVX2 lanes (float32/float16 of
eight chunks or more), the generic chunks, NaN and inf, integers and bool, signed zeros."""

import csv
import hashlib
from pathlib import Path

import numpy as np
import pytest

import dumpd
from conftest import Daemon, make_config


EVERY_VALUE = ["max", "min", "avg", "count", "negative zero count", "positive zero count",
               "nan count", "negative inf count", "positive inf count", "zero count", "l2norm"]


def arrays():
    rng = np.random.default_rng(52)
    big = rng.standard_normal(400_003).astype(np.float32) + 0.5  # 32 chunks in 2.6
    late_inf = rng.standard_normal(90_000).astype(np.float32)
    late_inf[-3] = np.inf  # 2.6: a later chunk poisons avg; 2.7: inf
    with_nan = rng.standard_normal(50_000).astype(np.float32)
    with_nan[123] = np.nan
    return [
        ("Big", big),
        ("Small", rng.standard_normal(5_000).astype(np.float32)),
        ("Half", (rng.standard_normal(200_000) * 4).astype(np.float16)),
        ("Double", rng.standard_normal(30_000) * 1e6),
        ("Int", rng.integers(-1000, 1000, 70_000, dtype=np.int32)),
        ("Bool", rng.integers(0, 2, 999).astype(np.bool_)),
        ("LateInf", late_inf),
        ("Nan", with_nan),
        ("Zeros", np.array([-0.0, 0.0, 1.0, -0.0], dtype=np.float32)),
        # Strided: statistics of the C-ordered elements (a copy first), in chunks of them.
        ("Transposed", rng.standard_normal((300, 701)).astype(np.float32).T),
        ("ChannelsLast", rng.standard_normal((4, 32, 33, 16)).astype(np.float32)
         .transpose(0, 3, 1, 2)),  # an NCHW view of an NHWC buffer
    ]


def run(daemon: Daemon, root: Path, ms_format: str, host: bool):
    root.mkdir()
    config = make_config(root, saved_data="statistic", statistic_category=EVERY_VALUE)
    data = arrays()
    with dumpd.Client(config, socket=daemon.socket, ms_format=ms_format,
                      host_statistics=host) as client:
        client.set_step(0)
        for i, (name, a) in enumerate(data):
            client.dump(name, f"Default/net/{name}-op{i}", "output", 0, a)
        client.flush()
        stats = client.stats()
    [table] = (root / "dump").rglob("statistic.csv")
    with open(table, newline="") as f:
        rows = list(csv.reader(f))
    # The timestamp column differs between runs.
    return [r[:4] + r[5:] for r in rows], stats, sum(a.nbytes for _, a in data)


@pytest.mark.parametrize("ms_format", ["2.6", "2.7"])
def test_the_clients_statistics_are_the_daemons(daemon: Daemon, tmp_path: Path,
                                               ms_format: str) -> None:
    here, here_stats, total = run(daemon, tmp_path / "client", ms_format, True)
    there, there_stats, _ = run(daemon, tmp_path / "daemon", ms_format, False)
    assert len(here) == 1 + len(arrays())
    assert here == there
    assert here_stats["host_statistics"] == len(arrays())
    assert there_stats["host_statistics"] == 0
    # What crossed the ring: 96 bytes a tensor against every byte of them.
    assert here_stats["bytes_committed"] < 2048, here_stats
    assert there_stats["bytes_committed"] >= total, there_stats
    # The rules show: 2.6's avg of LateInf is nan (its inf is in a later chunk), 2.7's inf.
    header = here[0]
    late = next(r for r in here if r[1].endswith("LateInf-op6"))
    assert late[header.index("Avg Value")] == ("nan" if ms_format == "2.6" else "inf")


def test_hashes_need_the_bytes(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, saved_data="statistic",
                         statistic_category=["max", "min", "avg", "md5"])
    a = np.arange(10, dtype=np.float32)
    with dumpd.Client(config, socket=daemon.socket) as client:
        client.set_step(0)
        client.dump("Add", "Default/net/Add-op0", "output", 0, a)
        client.flush()
        assert client.stats()["host_statistics"] == 0
    [table] = (tmp_path / "dump").rglob("statistic.csv")
    row = table.read_text().splitlines()[1].split(",")
    assert row[-2] == hashlib.md5(a.tobytes()).hexdigest(), row
