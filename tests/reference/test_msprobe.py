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
import re
import subprocess
from pathlib import Path

import pytest

import make_golden
import pins
import replay
from test_replay import replay_into

CACHE = make_golden.cache_dir()
MSPROBE = CACHE / "msprobe" / "bin" / "msprobe"
MINDSPORE_FOR_MSPROBE = pins.mindspore_for_msprobe()


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


# Each MindSpore's tree against dumpd's replay of it in that MindSpore's generation and in the
# "2.6" one (dumpd's default; no installable MindSpore writes it, so msprobe pairs it with the
# newer writer's tree).
AGAINST_GOLDEN = [(e[0], f) for e in make_golden.pins() for f in sorted({"2.6", e[1]})]


@pytest.mark.parametrize("env,ms_format", AGAINST_GOLDEN,
                         ids=[f"{e}-ms_format{f}" for e, f in AGAINST_GOLDEN])
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


def both_compare(pytestconfig, daemon, tmp_path, change, dumpctl_options=(), ms_format="2.7",
                 config="all"):
    """Two dumpd runs of the replay under `config` in `ms_format`, the second changed by
    `change` from DIVERGES_AT on, compared by `dumpctl compare` and by msprobe: (dumpctl's
    first divergence line, dumpctl's rows of iteration 0 by (op, io.slot), msprobe's rows)."""
    env = make_golden.pins()[-1][0]
    runs = {}
    for name, perturb in (("good", None), ("bad", DIVERGES_AT)):
        (tmp_path / name).mkdir()
        runs[name] = replay_into(daemon, env, ms_format, config, tmp_path / name, perturb,
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
    iteration0 = runs["good"] / "LeNet" / "0" / "0"
    per_iteration = len(list(iteration0.glob("*.npy")))
    if config == "statistic":
        per_iteration = len(read_rows(iteration0 / "statistic.csv"))
    ours = {(r["LeftOp"], r["TensorIndex"]): r for r in ours[:per_iteration]}
    assert len(ours) == per_iteration
    rows = msprobe_compare(runs["bad"] / "LeNet", runs["good"] / "LeNet", tmp_path / "msprobe")
    return first, ours, rows


def read_rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


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


GENERATIONS = pytest.mark.parametrize("ms_format", ["2.6", "2.7"])


@GENERATIONS
def test_msprobe_and_dumpctl_compare_agree_on_a_divergent_run(pytestconfig, daemon, tmp_path,
                                                             ms_format):
    """The second run perturbed from DIVERGES_AT on: msprobe and `dumpctl compare` name the
    same first divergent op, and where they compute the same metric (cosine, max absolute
    error) they agree within 1e-6."""
    first, ours, rows = both_compare(pytestconfig, daemon, tmp_path, replay.perturbed,
                                     ms_format=ms_format)
    want = replay.sanitize(DIVERGES_AT)
    assert f" iteration 0 op {want} output.0:" in first, first
    failing = [r for r in rows if r["Accuracy Reached or Not"] == "No"]
    assert failing
    first_bad = min(failing, key=where)
    assert where(first_bad)[0] == 0 and where(first_bad)[2:] == (want, "output.0"), first_bad
    check_same_metrics(ours, rows)


@GENERATIONS
def test_msprobe_and_dumpctl_compare_agree_on_a_bfloat16_run(pytestconfig, daemon, tmp_path,
                                                            ms_format):
    """The second run in bfloat16 from DIVERGES_AT on (dumpd writes bfloat16 values as
    float32, `bfloat16` in the name). The rounding (about 2^-9 relative) passes both tools'
    default thresholds and msprobe's verdict (it sees float32 arrays), so the divergence is
    the first tensor with an error: `dumpctl compare` names it at a tightened relative
    Euclidean distance and says the dtypes differ; it is msprobe's first nonzero MaxAbsErr.
    Their metrics agree within 1e-6."""
    first, ours, rows = both_compare(pytestconfig, daemon, tmp_path, replay.as_bfloat16,
                                     ("--max-relative-euclidean", "0.001"), ms_format)
    want = replay.sanitize(DIVERGES_AT)
    assert f" iteration 0 op {want} output.0:" in first, first
    assert "dtypes differ: left bfloat16, right float32" in first, first
    assert all(r["Accuracy Reached or Not"] != "No" for r in rows)
    off = [r for r in rows if r["MaxAbsErr"] not in ("", "nan") and float(r["MaxAbsErr"]) > 0]
    assert off
    first_off = min(off, key=where)
    assert where(first_off)[0] == 0 and where(first_off)[2:] == (want, "output.0"), first_off
    check_same_metrics(ours, rows)


def statistic_where(row, lines={}):
    """(step, line of msprobe's row in its NPU statistic.csv): the order the kernels ran."""
    path = row["NPU CSV File"]
    if path not in lines:
        lines[path] = {f"{r['Op Name']}.{r['Task ID']}.{r['IO']}.{r['Slot']}": i
                       for i, r in enumerate(read_rows(path))}
    return int(Path(path).parent.name), lines[path][row["NPU Name"]]


# msprobe's relative error of a statistic (in %) by dumpctl's name of the statistic.
RELATIVE = {"Max Value": "MaxRelativeErr", "Min Value": "MinRelativeErr",
            "L2Norm Value": "NormRelativeErr"}


@GENERATIONS
def test_msprobe_and_dumpctl_compare_agree_on_statistic_trees(pytestconfig, daemon, tmp_path,
                                                              ms_format):
    """statistic.csv trees (`saved_data` "statistic"; no CPU MindSpore writes them, so both
    are dumpd's), the second run four times as large from DIVERGES_AT on: msprobe reads
    every row of both generations' statistic.csv, pairs it, and names the same first
    divergent op as `dumpctl compare`; the relative error of the statistic dumpctl finds
    worst agrees with msprobe's within 1e-6."""
    first, ours, rows = both_compare(pytestconfig, daemon, tmp_path, replay.scaled,
                                     ms_format=ms_format, config="statistic")
    want = replay.sanitize(DIVERGES_AT)
    assert f" iteration 0 op {want} output.0:" in first, first
    stat_rows = sum(len(read_rows(f)) for f in (tmp_path / "good").rglob("statistic.csv"))
    assert len(rows) == stat_rows
    for row in rows:
        assert row["NPU Name"] == row["Bench Name"], row
        assert row["NPU Dtype"] == row["Bench Dtype"], row
        assert row["NPU Tensor Shape"] == row["Bench Tensor Shape"], row
    failing = [r for r in rows if r["Accuracy Reached or Not"] == "No"]
    assert failing and all(r["Accuracy Reached or Not"] in ("Yes", "No") for r in rows)
    first_bad = min(failing, key=statistic_where)
    name = first_bad["NPU Name"]
    assert statistic_where(first_bad)[0] == 0, first_bad
    assert replay.sanitize(name.rsplit(".", 3)[0]) == want, name
    assert name.endswith(".output.0"), name
    checked = 0
    for row in rows:
        step, _ = statistic_where(row)
        if step != 0:
            continue
        op, _, io, slot = row["NPU Name"].rsplit(".", 3)
        d = ours[(replay.sanitize(op), f"{io}.{slot}")]
        worst = re.search(r"worst (.+) ([-+0-9.e]+|nan|NaN)$", d["Note"])
        assert worst, d["Note"]
        theirs = row[RELATIVE[worst[1]]]
        if not theirs.endswith("%"):
            continue  # msprobe's N/A: a statistic of 0 in the right run
        a, b = float(theirs[:-1]) / 100, float(worst[2])
        assert abs(a - b) <= 1e-6 * max(1.0, abs(a)), (row["NPU Name"], worst[1], a, b)
        checked += 1
    assert checked > len(ours) // 2
