"""`dumpctl compare`: dump trees built by hand with numpy (MindSpore file names, statistic.csv
of both generations, .npy.lz4 from the `lz4` tool, bin files from the independent writer in
ascend_bin.py), the real dumpctl comparing them, every expected metric computed here with
numpy from the arrays."""

import csv
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import DUMPCTL
import ascend_bin as ab  # noqa: E402  (builds protobuf classes at import)

pytestmark = pytest.mark.skipif(not DUMPCTL, reason="DUMPCTL_BIN not set")

ITERATION = Path("rank_0") / "Net" / "0" / "0"
METRICS = ["CosineSimilarity", "MaxAbsoluteError", "AccumulatedRelativeError",
           "RelativeEuclideanDistance", "KullbackLeiblerDivergence", "MeanAbsoluteError",
           "RootMeanSquareError"]


def npy_name(op, ts, io="output", slot=0, dtype="float32", op_type="Add"):
    return f"{op_type}.{op}.0.0.{ts}.{io}.{slot}.DefaultFormat.{dtype}.npy"


def save(root, op, array, ts=1, io="output", slot=0, dtype=None):
    d = root / ITERATION
    d.mkdir(parents=True, exist_ok=True)
    path = d / npy_name(op, ts, io, slot, dtype or str(np.asarray(array).dtype))
    np.save(path, array)
    return path


def compare(left, right, *args, out=None):
    """Runs dumpctl compare; returns (exit code, stdout, rows of the CSV as dicts)."""
    csv_path = Path(out or (Path(left).parent / "result.csv"))
    if csv_path.exists():
        csv_path.unlink()
    proc = subprocess.run([DUMPCTL, "compare", str(left), str(right), "-q", "-o", str(csv_path),
                           *args], capture_output=True, text=True, timeout=300)
    rows = list(csv.DictReader(open(csv_path))) if csv_path.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, rows


def expected(x, y):
    """The metrics of shared/spec/compare.md and dumpd's rules, with numpy: non-finite
    elements left out, KL over min-max normalised sides clamped to 1e-10."""
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    d = x - y
    with np.errstate(divide="ignore", invalid="ignore"):
        def normalise(v):
            lo, hi = v.min(), v.max()
            if lo == 0 and hi == 0:
                return None
            a = (v - lo) / (hi - lo) if hi > lo else np.ones_like(v)
            a = np.maximum(a, 1e-10)
            return a / a.sum()
        p, q = normalise(x), normalise(y)
        kl = float(np.sum(p * np.log(p / q))) if p is not None and q is not None else math.nan
        return {
            "CosineSimilarity": float(x @ y / np.sqrt((x @ x) * (y @ y))),
            "MaxAbsoluteError": float(np.abs(d).max()),
            "AccumulatedRelativeError": float(np.abs(d).sum() / np.abs(y).sum()),
            "RelativeEuclideanDistance": float(np.sqrt(d @ d) / np.sqrt(y @ y)),
            "KullbackLeiblerDivergence": kl,
            "MeanAbsoluteError": float(np.abs(d).mean()),
            "RootMeanSquareError": float(np.sqrt((d * d).mean())),
            "StandardDeviation": (x.mean(), x.std(), y.mean(), y.std()),
        }


def close(got, want, abs_tol=0.0):
    if math.isnan(want):
        return math.isnan(got)
    return math.isclose(got, want, rel_tol=1e-9, abs_tol=abs_tol)


def assert_metrics(row, x, y):
    want = expected(x, y)
    for name in METRICS:
        # KL of near-identical sides is a difference of O(1) terms: absolute tolerance too.
        tol = 1e-13 if name == "KullbackLeiblerDivergence" else 1e-15
        assert close(float(row[name]), want[name], tol), (name, row[name], want[name])
    left, right = row["StandardDeviation"][1:-1].split(")(")
    got = [float(v) for v in left.split(";") + right.split(";")]
    for g, w in zip(got, want["StandardDeviation"]):
        assert close(g, w, 1e-15), (row["StandardDeviation"], want["StandardDeviation"])


def random_ops(seed, count=4, shape=(8, 16)):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def test_identical_trees_pass(tmp_path):
    arrays = random_ops(1)
    for side in ("L", "R"):
        for i, a in enumerate(arrays):
            save(tmp_path / side, f"Default_Add-op{i}", a, ts=100 + i, io="input")
            save(tmp_path / side, f"Default_Add-op{i}", a * 2, ts=100 + i)
    code, out, rows = compare(tmp_path / "L", tmp_path / "R")
    assert code == 0, out
    assert "all 8 pairs pass" in out
    assert len(rows) == 8
    for row in rows:
        assert row["Result"] == "pass"
        assert float(row["CosineSimilarity"]) == 1.0
        assert float(row["MaxAbsoluteError"]) == 0.0
        assert float(row["RelativeEuclideanDistance"]) == 0.0
    assert [r["TensorIndex"] for r in rows[:2]] == ["input.0", "output.0"]
    assert_metrics(rows[1], arrays[0] * 2, arrays[0] * 2)


def test_scaled_tree_fails_on_relative_euclidean(tmp_path):
    x = random_ops(2, count=1)[0]
    save(tmp_path / "L", "Default_Mul-op0", x)
    save(tmp_path / "R", "Default_Mul-op0", 2 * x)
    code, out, rows = compare(tmp_path / "L", tmp_path / "R")
    assert code == 1, out
    (row,) = rows
    assert row["Result"] == "fail"
    assert math.isclose(float(row["CosineSimilarity"]), 1.0, rel_tol=1e-12)
    assert math.isclose(float(row["RelativeEuclideanDistance"]), 0.5, rel_tol=1e-12)
    assert "relative euclidean 0.5 > 0.05" in row["Note"]
    assert_metrics(row, x, 2 * x)


def test_first_divergence_is_named_and_earlier_ops_pass(tmp_path):
    arrays = random_ops(3, count=6)
    noise = np.random.default_rng(4).standard_normal(arrays[3].shape).astype(np.float32)
    for i, a in enumerate(arrays):
        save(tmp_path / "L", f"Default_Op-op{i}", a, ts=10 + i)
        save(tmp_path / "R", f"Default_Op-op{i}", a + noise if i == 3 else a, ts=500 + i)
    code, out, rows = compare(tmp_path / "L", tmp_path / "R")
    assert code == 1
    assert [r["Result"] for r in rows] == ["pass"] * 3 + ["fail"] + ["pass"] * 2
    want = expected(arrays[3], arrays[3] + noise)
    cosine = want["CosineSimilarity"]
    assert ("first divergence: rank 0 graph 0 iteration 0 op Default_Op-op3 output.0: "
            f"cosine {cosine:.6g} < 0.99") in out
    assert_metrics(rows[3], arrays[3], arrays[3] + noise)


def test_shapes_differing(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    save(tmp_path / "L", "count", x, ts=1)
    save(tmp_path / "R", "count", np.arange(7, dtype=np.float32), ts=1)
    save(tmp_path / "L", "reshaped", x, ts=2)
    y = (x.ravel() + 0.001).astype(np.float32)
    save(tmp_path / "R", "reshaped", y, ts=2)
    code, out, rows = compare(tmp_path / "L", tmp_path / "R")
    assert code == 1
    assert rows[0]["Result"] == "fail"
    assert rows[0]["Note"] == "left [2,3] (6 elements), right [7] (7)"
    assert rows[1]["Result"] == "pass"
    assert rows[1]["Note"] == "shapes differ: left [2,3], right [6]"
    assert_metrics(rows[1], x, y)


def test_missing_side_gives_star_rows_and_passes(tmp_path):
    a, b, c = random_ops(5, count=3)
    save(tmp_path / "L", "shared", a, ts=1)
    save(tmp_path / "R", "shared", a, ts=1)
    save(tmp_path / "L", "left_only", b, ts=2)
    save(tmp_path / "R", "right_only", c, ts=3)
    code, out, rows = compare(tmp_path / "L", tmp_path / "R")
    assert code == 0, out
    assert "left only 1, right only 1" in out
    assert [(r["LeftOp"], r["RightOp"], r["Result"]) for r in rows] == [
        ("shared", "shared", "pass"), ("left_only", "*", "unmatched"),
        ("*", "right_only", "unmatched")]
    assert rows[1]["CosineSimilarity"] == "NaN"
    assert rows[1]["StandardDeviation"] == "(NaN;NaN)(NaN;NaN)"


def test_all_zero_tensors_have_nan_cosine_and_kl(tmp_path):
    z = np.zeros((4, 4), dtype=np.float32)
    save(tmp_path / "L", "zeros", z)
    save(tmp_path / "R", "zeros", z)
    code, out, rows = compare(tmp_path / "L", tmp_path / "R")
    assert code == 0, out
    (row,) = rows
    assert row["CosineSimilarity"] == "NaN"
    assert row["KullbackLeiblerDivergence"] == "NaN"
    assert float(row["MaxAbsoluteError"]) == 0.0
    assert_metrics(row, z, z)


def test_nan_and_inf_at_the_same_places_pass(tmp_path):
    x = random_ops(6, count=1)[0]
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    save(tmp_path / "L", "special", x)
    save(tmp_path / "R", "special", x.copy())
    code, out, rows = compare(tmp_path / "L", tmp_path / "R")
    assert code == 0, out
    assert float(rows[0]["CosineSimilarity"]) == 1.0
    assert_metrics(rows[0], x, x)


def test_nan_and_inf_at_different_places_fail(tmp_path):
    x = random_ops(7, count=1)[0]
    y = x.copy()
    x[0, 0] = np.nan
    y[3, 3] = np.inf
    x[4, 4], y[4, 4] = np.inf, -np.inf
    save(tmp_path / "L", "special", x)
    save(tmp_path / "R", "special", y)
    code, out, rows = compare(tmp_path / "L", tmp_path / "R")
    assert code == 1, out
    assert rows[0]["Result"] == "fail"
    assert "3 elements differ in nan/inf" in rows[0]["Note"]
    assert_metrics(rows[0], x, y)


def test_map_pairs_different_op_names(tmp_path):
    x, y = random_ops(8, count=2)
    save(tmp_path / "L", "Default_MatMul-op3", x, ts=1)
    save(tmp_path / "R", "Default_network_Dense-op9", x + 0.01 * y, ts=7)
    names = tmp_path / "names.csv"
    names.write_text("left,right\nDefault/MatMul-op3,Default/network/Dense-op9\n")
    code, out, rows = compare(tmp_path / "L", tmp_path / "R", "--map", str(names))
    assert len(rows) == 1, rows
    assert rows[0]["LeftOp"] == "Default_MatMul-op3"
    assert rows[0]["RightOp"] == "Default_network_Dense-op9"
    assert_metrics(rows[0], x, x + 0.01 * y)
    names.write_text("only one field\n")
    proc = subprocess.run([DUMPCTL, "compare", str(tmp_path / "L"), str(tmp_path / "R"),
                           "--map", str(names)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "line 1" in proc.stderr


STAT_HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
               "Max Value,Min Value,Avg Value,L2Norm Value\n")


def stat_row(generation, full_name, ts, io, slot, a):
    """One statistic.csv row as MindSpore writes it: 2.6 sanitises the name and writes the
    shape "(2,3)", 2.7 keeps the full name and writes "[2,3]"; numbers as C++ %g."""
    name = full_name.replace("/", "_") if generation == "2.6" else full_name
    dims = ",".join(str(d) for d in a.shape)
    shape = f"({dims})" if generation == "2.6" else f"[{dims}]"
    v = a.astype(np.float64)
    values = [v.max(), v.min(), v.mean(), np.sqrt((v * v).sum())]
    return (f"Add,{name},0,0,{ts},{io},{slot},{a.nbytes},{a.dtype},\"{shape}\"," +
            "".join(f"{x:g}," for x in values) + "\n")


@pytest.mark.parametrize("left_gen,right_gen", [("2.6", "2.6"), ("2.7", "2.7"), ("2.6", "2.7")])
def test_statistics_only_trees(tmp_path, left_gen, right_gen):
    a, b = random_ops(9, count=2, shape=(2, 3))
    b_changed = b * 1.5
    for side, gen, second in (("L", left_gen, b), ("R", right_gen, b_changed)):
        d = tmp_path / side / ITERATION
        d.mkdir(parents=True)
        (d / "statistic.csv").write_text(
            STAT_HEADER + stat_row(gen, "Default/Add-op0", 10, "output", 0, a) +
            stat_row(gen, "Default/network/Sub-op1", 11, "input", 1, second))
    code, out, rows = compare(tmp_path / "L", tmp_path / "R")
    assert code == 1, out
    assert [r["Result"] for r in rows] == ["pass", "fail"]
    assert rows[0]["LeftOp"] == "Default_Add-op0"
    assert rows[1]["TensorIndex"] == "input.1"
    assert rows[1]["Shape"] == "[2,3]"
    assert rows[1]["CosineSimilarity"] == "NaN"
    # The worst relative difference, from the values as the csv holds them (%g).
    def columns(v):
        v = v.astype(np.float64)
        return [float(f"{c:g}") for c in (v.max(), v.min(), v.mean(), np.sqrt((v * v).sum()))]
    worst = max(abs(lv - rv) / abs(rv) for lv, rv in zip(columns(b), columns(b_changed)))
    note = rows[1]["Note"]
    reported = float(note.split("relative difference ")[1].split(" ")[0])
    assert math.isclose(reported, worst, rel_tol=1e-5), (note, worst)
    shortest = [repr(v).removesuffix(".0") for v in (columns(b)[0], columns(b_changed)[0])]
    assert f"Max Value {shortest[0]} vs {shortest[1]};" in note, note
    code, out, _ = compare(tmp_path / "L", tmp_path / "R", "--max-statistic-relative", "0.34")
    assert code == 0, out


def lz4_tree(src, dst):
    for f in src.rglob("*.npy"):
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["lz4", "-q", "-f", str(f), str(target) + ".lz4"], check=True)


@pytest.mark.conditional
@pytest.mark.skipif(shutil.which("lz4") is None, reason="the lz4 tool is not installed")
def test_npy_lz4_files(tmp_path):
    x, y = random_ops(10, count=2)
    save(tmp_path / "plain", "Default_Conv-op0", x)
    save(tmp_path / "other", "Default_Conv-op0", x + 0.1 * y)
    lz4_tree(tmp_path / "plain", tmp_path / "packed")
    assert list((tmp_path / "packed").rglob("*.npy.lz4"))
    code, out, rows = compare(tmp_path / "packed", tmp_path / "plain")
    assert code == 0, out
    assert float(rows[0]["CosineSimilarity"]) == 1.0
    code, out, rows = compare(tmp_path / "packed", tmp_path / "other")
    assert_metrics(rows[0], x, x + 0.1 * y)


def test_mindspore_tree_against_dumpd_bin_tree(tmp_path):
    """Left: MindSpore's layout (npy names, 2.6 statistic.csv). Right: the same data in bin
    files, one per op execution (float32, bfloat16 raw, int4 packed)."""
    rng = np.random.default_rng(11)
    ops = []
    for i in range(3):
        x = rng.standard_normal((4, 8)).astype(np.float32)
        bf = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)  # exactly representable in bf16
        q = rng.integers(-8, 8, size=(5,)).astype(np.int8)
        ops.append((f"Default/network/Layer-op{i}", 1000 + i, x, bf, q))
    left = tmp_path / "mindspore" / ITERATION
    right = tmp_path / "dumpd" / ITERATION
    left.mkdir(parents=True)
    right.mkdir(parents=True)
    rows = STAT_HEADER
    for full, ts, x, bf, q in ops:
        name = full.replace("/", "_")
        np.save(left / npy_name(name, ts, "input", 0, "float32", "Layer"), x)
        np.save(left / npy_name(name, ts, "input", 1, "bfloat16", "Layer"), bf)
        np.save(left / npy_name(name, ts, "output", 0, "int4", "Layer"), q)
        rows += stat_row("2.6", full, ts, "input", 0, x)
        ab.write_bin(right / f"Layer.{name}.0.0.{ts + 7}", full,
                     inputs=[ab.Tensor("DT_FLOAT", x),
                             ab.Tensor("DT_BF16", ab.bf16_bytes(bf), bf.shape)],
                     outputs=[ab.Tensor("DT_INT4", ab.pack_int4(q), q.shape)])
    (left / "statistic.csv").write_text(rows)
    code, out, result = compare(tmp_path / "mindspore", tmp_path / "dumpd")
    assert code == 0, out
    assert "all 9 pairs pass" in out
    assert [r["TensorIndex"] for r in result[:3]] == ["input.0", "input.1", "output.0"]
    for r, (full, ts, x, bf, q) in zip(result[0::3], ops):
        assert r["LeftOp"] == r["RightOp"] == full.replace("/", "_")
    for r in result:
        assert float(r["CosineSimilarity"]) == 1.0, r
        assert float(r["MaxAbsoluteError"]) == 0.0
    assert_metrics(result[2], ops[0][4], ops[0][4])
    # A perturbed bin tree: the metrics of the bf16 input against numpy.
    full, ts, x, bf, q = ops[1]
    bent = (bf * 1.25).astype(np.float32)
    name = full.replace("/", "_")
    (right / f"Layer.{name}.0.0.{ts + 7}").unlink()
    ab.write_bin(right / f"Layer.{name}.0.0.{ts + 7}", full,
                 inputs=[ab.Tensor("DT_FLOAT", x),
                         ab.Tensor("DT_BF16", ab.bf16_bytes(bent), bent.shape)],
                 outputs=[ab.Tensor("DT_INT4", ab.pack_int4(q), q.shape)])
    decoded = ab.read_bin(right / f"Layer.{name}.0.0.{ts + 7}")["inputs"][1][3]
    code, out, result = compare(tmp_path / "mindspore", tmp_path / "dumpd")
    assert code == 1
    assert "op Default_network_Layer-op1 input.1" in out
    assert_metrics(result[4], bf, decoded)


def test_large_tensor_on_many_threads(tmp_path):
    rng = np.random.default_rng(12)
    x = rng.standard_normal(3_000_001).astype(np.float32)
    y = (x + 0.05 * rng.standard_normal(x.size)).astype(np.float32)
    save(tmp_path / "L", "big", x)
    save(tmp_path / "R", "big", y)
    code, out, rows = compare(tmp_path / "L", tmp_path / "R", "-j", "4")
    assert_metrics(rows[0], x, y)
    assert "compared 1 pairs" in out


def test_unusable_roots_exit_three_and_usage_two(tmp_path):
    save(tmp_path / "L", "a", np.ones(3, dtype=np.float32))
    (tmp_path / "empty").mkdir()
    assert compare(tmp_path / "L", tmp_path / "missing")[0] == 3
    code, out, _ = compare(tmp_path / "L", tmp_path / "empty")
    assert code == 3 and "no tensors found" in out
    assert compare(tmp_path / "L", tmp_path / "L", "--bogus")[0] == 2


def test_html_report_is_written(tmp_path):
    x = random_ops(13, count=1)[0]
    save(tmp_path / "L", "Default_Html-op0", x)
    save(tmp_path / "R", "Default_Html-op0", -x)
    html = tmp_path / "report.html"
    code, out, _ = compare(tmp_path / "L", tmp_path / "R", "--html", str(html))
    assert code == 1
    assert "Default_Html-op0" in html.read_text()
    assert not list(tmp_path.glob("report.html.tmp*"))
