"""msprobe reads dumpd's trees (issue 39 §3): the real msprobe 26.2.0 compares MindSpore's own
graph-mode dump with dumpd's replay of the same run.

msprobe compares two MindSpore graph-mode trees in its auto mode with `--rank` (without it, it
looks for one process directory and refuses). Its MindSpore code imports the real mindspore,
so the msprobe environment runs with a MindSpore environment's packages on its path (2.10.0:
both have numpy 2). It keys files on op name, task, io and slot, and reads dtype and shape
from the arrays, so dumpd's lower-case dtype text pairs with MindSpore's `Float32`.
"""

import csv
import os
import subprocess
from pathlib import Path

import pytest

import make_golden
import replay
from test_replay import SOURCE, replay_into

CACHE = make_golden.cache_dir()
MSPROBE = CACHE / "msprobe" / "bin" / "msprobe"
MINDSPORE_FOR_MSPROBE = "ms-2.10.0"  # a MindSpore msprobe can import (numpy 2)


def msprobe_compare(target, golden, out):
    """Rows of msprobe's compare_result_*.csv files (one file per rank and step)."""
    site = next((CACHE / MINDSPORE_FOR_MSPROBE / "lib").glob("python3*/site-packages"))
    env = dict(os.environ, PYTHONPATH=str(site))
    run = subprocess.run([str(MSPROBE), "compare", "-m", "auto", "-tp", str(target), "-gp",
                          str(golden), "-o", str(out), "--rank", "0"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = []
    for f in sorted(Path(out).glob("compare_result_*.csv")):
        with open(f, newline="") as fh:
            rows.extend(csv.DictReader(fh))
    return rows


@pytest.mark.parametrize("env,ms_format", [(e[0], e[1]) for e in make_golden.pins()],
                         ids=[e[0] for e in make_golden.pins()])
def test_msprobe_matches_every_tensor_of_dumpds_tree_to_mindspores(daemon, tmp_path, env,
                                                                  ms_format):
    (tmp_path / "dumpd").mkdir()
    ours = replay_into(daemon, env, ms_format, "all", tmp_path / "dumpd") / "LeNet"
    golden = make_golden.golden_dir(CACHE, env, "all") / "dump" / "rank_0" / "LeNet"
    rows = msprobe_compare(ours, golden, tmp_path / "msprobe")
    files = list(golden.rglob("*.npy"))
    assert len(rows) == len(files) == len(list(ours.rglob("*.npy")))
    compared = 0
    for row in rows:
        assert row["NPU Name"] and row["Bench Name"], row  # paired, both sides
        assert Path(row["NPU Name"]).parent.name == Path(row["Bench Name"]).parent.name
        assert row["NPU Dtype"] == row["Bench Dtype"], row
        assert row["NPU Tensor Shape"] == row["Bench Tensor Shape"], row
        if row["Cosine"] in ("", "nan", "unsupported"):
            # msprobe does not compare scalars or one-element tensors; it says so.
            assert "scalar" in row["Err_message"] or "length 1" in row["Err_message"], row
            continue
        assert float(row["Cosine"]) == 1.0, row
        assert float(row["MaxAbsErr"]) == 0.0, row
        assert row["Accuracy Reached or Not"] == "Yes", row
        compared += 1
    assert compared > len(rows) // 2


# A kernel in the middle of the forward pass: from it on, the perturbed run diverges.
DIVERGES_AT = "Default/network-WithLossCell/_backbone-LeNet5/fc2-Dense/MatMul-op0"


def where(row):
    """(step, timestamp, op name, io.slot) of a msprobe row, from its NPU file name."""
    f = Path(row["NPU Name"])
    m = replay.FILE_NAME.match(f.name)
    return int(f.parent.name), int(m["ts"]), m["name"], f"{m['io']}.{m['slot']}"


def both_compare(pytestconfig, daemon, tmp_path, change, dumpctl_options=()):
    """Two dumpd runs of the replay, the second changed by `change` from DIVERGES_AT on,
    compared by `dumpctl compare` and by msprobe: (dumpctl's first divergence line,
    dumpctl's rows of iteration 0 by (op, io.slot), msprobe's rows)."""
    env, ms_format = make_golden.pins()[-1][:2]
    runs = {}
    for name, perturb in (("good", None), ("bad", DIVERGES_AT)):
        (tmp_path / name).mkdir()
        runs[name] = replay_into(daemon, env, ms_format, "all", tmp_path / name, perturb,
                                 change)
    dumpctl = pytestconfig.getoption("dumpctl")
    out = subprocess.run([dumpctl, "compare", str(runs["bad"]), str(runs["good"]), "-q", "-o",
                          str(tmp_path / "dumpctl.csv"), *dumpctl_options],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    first = next(l for l in out.stdout.splitlines() if l.startswith("first divergence:"))
    # dumpctl's rows come in execution order, iteration 0 first: each key once an iteration.
    with open(tmp_path / "dumpctl.csv", newline="") as fh:
        ours = list(csv.DictReader(fh))
    per_iteration = len(list((runs["good"] / "LeNet" / "0" / "0").glob("*.npy")))
    ours = {(r["LeftOp"], r["TensorIndex"]): r for r in ours[:per_iteration]}
    assert len(ours) == per_iteration
    rows = msprobe_compare(runs["bad"] / "LeNet", runs["good"] / "LeNet", tmp_path / "msprobe")
    return first, ours, rows


def check_same_metrics(ours, rows):
    """Cosine and max absolute error of every tensor of iteration 0 both compute them for
    agree within 1e-6; returns how many."""
    checked = 0
    for row in rows:
        step, _, op, io = where(row)
        if step != 0 or row["Cosine"] in ("", "nan", "unsupported"):
            continue
        d = ours[(op, io)]
        for theirs_key, ours_key in (("Cosine", "CosineSimilarity"),
                                     ("MaxAbsErr", "MaxAbsoluteError")):
            a, b = float(row[theirs_key]), float(d[ours_key])
            assert abs(a - b) <= 1e-6 * max(1.0, abs(a)), (op, io, theirs_key, a, b)
        checked += 1
    assert checked > len(ours) // 2
    return checked


def test_msprobe_and_dumpctl_compare_agree_on_a_divergent_run(pytestconfig, daemon, tmp_path):
    """The second run perturbed from DIVERGES_AT on: msprobe and `dumpctl compare` name the
    same first divergent op, and where they compute the same metric (cosine, max absolute
    error) they agree within 1e-6."""
    first, ours, rows = both_compare(pytestconfig, daemon, tmp_path, replay.perturbed)
    want = replay.sanitize(DIVERGES_AT)
    assert f" iteration 0 op {want} output.0:" in first, first
    failing = [r for r in rows if r["Accuracy Reached or Not"] == "No"]
    assert failing
    first_bad = min(failing, key=where)
    assert where(first_bad)[0] == 0 and where(first_bad)[2:] == (want, "output.0"), first_bad
    check_same_metrics(ours, rows)


def test_msprobe_and_dumpctl_compare_agree_on_a_bfloat16_run(pytestconfig, daemon, tmp_path):
    """The second run in bfloat16 from DIVERGES_AT on (dumpd writes bfloat16 values as
    float32, `bfloat16` in the name). The rounding (about 2^-9 relative) passes both tools'
    default thresholds and msprobe's verdict (it sees float32 arrays), so the divergence is
    the first tensor with an error: `dumpctl compare` names it at a tightened relative
    Euclidean distance and says the dtypes differ; it is msprobe's first nonzero MaxAbsErr.
    Their metrics agree within 1e-6."""
    first, ours, rows = both_compare(pytestconfig, daemon, tmp_path, replay.as_bfloat16,
                                     ("--max-relative-euclidean", "0.001"))
    want = replay.sanitize(DIVERGES_AT)
    assert f" iteration 0 op {want} output.0:" in first, first
    assert "dtypes differ: left bfloat16, right float32" in first, first
    assert all(r["Accuracy Reached or Not"] != "No" for r in rows)
    off = [r for r in rows if r["MaxAbsErr"] not in ("", "nan") and float(r["MaxAbsErr"]) > 0]
    assert off
    first_off = min(off, key=where)
    assert where(first_off)[0] == 0 and where(first_off)[2:] == (want, "output.0"), first_off
    check_same_metrics(ours, rows)
