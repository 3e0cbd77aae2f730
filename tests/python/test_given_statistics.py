"""dumpd.Statistics: a tensor's statistics computed by the caller (dumpd.torch computes them
inside compiled graphs) and given to dump_op in place of the tensor. The row statistic.csv
gets is made from them as from a device's (avg = sum / count, l2norm = sqrt(sum_squares));
only a job that writes nothing but statistics takes them, and bad rows are refused with an
error that names the problem."""

import csv
import math
from pathlib import Path

import pytest

import dumpd
from conftest import Daemon, make_config

CATEGORIES = ["max", "min", "avg", "count", "nan count", "negative inf count",
              "positive inf count", "zero count", "l2norm"]


def table(root: Path) -> list:
    [path] = (root / "dump").rglob("statistic.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_given_statistics_make_the_row(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, saved_data="statistic", statistic_category=CATEGORIES)
    with dumpd.Client(config, socket=daemon.socket) as client:
        assert client.statistics_only
        client.set_step(0)
        given = dumpd.Statistics([4, 5], "bfloat16",
                                 [0, 0, 0, 4, 8, 8, 7.5, -2.25, 6.0, 90.0])
        assert (given.shape, given.dtype, given.count) == ([4, 5], "bfloat16", 20)
        client.dump_op("MatMul", "Default/net/MatMul-op1", inputs=[None, given], outputs=[])
        client.flush()
        stats = client.stats()
    assert stats["given_statistics"] == 1
    assert stats["bytes_committed"] < 400, stats  # one record: no tensor crossed
    [row] = table(tmp_path)
    assert (row["IO"], row["Slot"], row["Data Type"], row["Shape"]) == (
        "input", "1", "bfloat16", "(4,5)")
    assert row["Data Size"] == "40"
    assert float(row["Max Value"]) == 7.5 and float(row["Min Value"]) == -2.25
    assert float(row["Avg Value"]) == pytest.approx(6.0 / 20, rel=1e-6)
    assert float(row["L2Norm Value"]) == pytest.approx(math.sqrt(90.0), rel=1e-6)
    assert [row[k] for k in ("Count", "NaN Count", "Negative Inf Count", "Positive Inf Count",
                             "Zero Count")] == ["20", "0", "0", "0", "4"]


def test_a_job_that_writes_tensors_refuses_them(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, saved_data="tensor")
    with dumpd.Client(config, socket=daemon.socket) as client:
        assert not client.statistics_only
        client.set_step(0)
        given = dumpd.Statistics([3], "float32", [0, 0, 0, 0, 1, 2, 1.0, -1.0, 1.0, 3.0])
        with pytest.raises(ValueError, match="tensor slot 0 of Default/net/Relu-op1: statistics "
                           "were given in place of the tensor, but this job writes more"):
            client.dump_op("Relu", "Default/net/Relu-op1", inputs=[], outputs=[given])


@pytest.mark.parametrize("args, message", [
    (([2], "float32", [0] * 9), "values holds 9 numbers, not the 10"),
    (([2], "complex64", [0] * 10), "complex64 tensors have no statistics row"),
    (([2], "float33", [0] * 10), 'unknown dtype "float33"'),
    (([2, -1], "float32", [0] * 10), "a dimension is negative"),
    (([2], "float32", [3, 0, 0, 0, 0, 0, 0, 0, 0, 0]), "count 0 of .* is 3.0+, not a whole "
     "number from 0 to the 2 elements"),
    (([2], "float32", [0, 0.5, 0, 0, 0, 0, 0, 0, 0, 0]), "count 1 of"),
    (([2], "float32", [float("nan")] + [0] * 9), "count 0 of"),
])
def test_bad_statistics_are_refused_by_name(args, message) -> None:
    with pytest.raises(ValueError, match=message):
        dumpd.Statistics(*args)
