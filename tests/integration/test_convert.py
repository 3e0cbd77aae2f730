"""`dumpctl convert`: bin files written by the independent ascend_bin writer, converted by the
real dumpctl binary, the .npy files loaded back with numpy."""

import os
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import DUMPCTL

pytest.importorskip("google.protobuf")
import ascend_bin as ab  # noqa: E402  (builds protobuf classes at import)

pytestmark = pytest.mark.skipif(not DUMPCTL, reason="DUMPCTL_BIN is not set")

RNG = np.random.default_rng(11)


def dumpctl_convert(*args, cwd=None):
    return subprocess.run([DUMPCTL, "convert", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def npy_names(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file())


def tensor_for(dtype_name, shape):
    """(ascend_bin.Tensor, the array convert must produce) for `dtype_name` and `shape`."""
    n = int(np.prod(shape, dtype=np.int64))
    if dtype_name == "DT_BF16":
        bits = RNG.integers(0, 1 << 16, n, dtype=np.uint16)
        bits[:4] = [0x3F80, 0xC020, 0x7F80, 0x0001][:min(4, n)]  # 1, -2.5, inf, subnormal
        expected = (bits.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        return ab.Tensor(dtype_name, bits.astype("<u2").tobytes(), shape), expected
    if dtype_name == "DT_INT4":
        values = RNG.integers(-8, 8, n)
        values[:2] = [-8, -1][:min(2, n)]
        return ab.Tensor(dtype_name, ab.pack_int4(values), shape), \
            values.astype(np.int8).reshape(shape)
    dt = np.dtype(ab.NUMPY_TYPES[dtype_name])
    if dtype_name in ("DT_BOOL", "DT_UINT1"):
        values = RNG.integers(0, 2, shape).astype(dt)
    elif dt.kind == "c":
        values = (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dt)
    elif dt.kind == "f":
        values = RNG.standard_normal(shape).astype(dt)
    else:
        info = np.iinfo(dt)
        values = RNG.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    return ab.Tensor(dtype_name, values), values


def assert_same(path, expected):
    got = np.load(path)
    assert got.dtype == expected.dtype, path
    assert got.shape == expected.shape, path
    # Bytes, not values: NaN payloads and -0.0 must survive as well.
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes(), path


@pytest.mark.parametrize("dtype_name", sorted(ab.DECODED_TYPES))
def test_every_dtype_converts_to_its_npy(tmp_path, dtype_name):
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    bin_name = f"{dtype_name.title().replace('_', '')}.Default_op-op1.3.1.1700000000000001"
    inputs = [tensor_for(dtype_name, (2, 3, 5)), tensor_for(dtype_name, (7,))]
    outputs = [tensor_for(dtype_name, ()), tensor_for(dtype_name, (0, 4))]
    ab.write_bin(src / bin_name, "Default/op-op1", [t for t, _ in inputs],
                 [t for t, _ in outputs])
    r = dumpctl_convert(src, "-o", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"converted 4 tensors from 1 files into {out}\n"
    names = [f"{bin_name}.input.0.2x3x5.npy", f"{bin_name}.input.1.7.npy",
             f"{bin_name}.output.0..npy", f"{bin_name}.output.1.0x4.npy"]
    assert npy_names(out) == sorted(names)
    expected = [e for _, e in inputs] + [e for _, e in outputs]
    for name, want in zip(names, expected):
        assert want.dtype == np.dtype(ab.DECODED_TYPES[dtype_name])
        assert_same(out / name, want)
    # The independent reader decodes the same values.
    decoded = ab.read_bin(src / bin_name)
    for (_, _, _, array), name in zip(decoded["inputs"] + decoded["outputs"], names):
        assert np.load(out / name).tobytes() == array.tobytes()


def test_bfloat16_is_exact_float32_and_int4_sign_extends(tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    ab.write_bin(src / "Cast.op.1.1.5", "op",
                 [("DT_BF16", ab.bf16_bytes(np.float32([1.0, -2.5, 3.140625, -0.0])), (2, 2))],
                 [("DT_INT4", b"\x21\xf8\x97", (6,))])
    r = dumpctl_convert(src, "-o", out)
    assert r.returncode == 0, r.stderr
    bf16 = np.load(out / "Cast.op.1.1.5.input.0.2x2.npy")
    assert bf16.dtype == np.float32
    assert bf16.ravel().tolist() == [1.0, -2.5, 3.140625, -0.0]
    assert np.signbit(bf16.ravel()[3])
    int4 = np.load(out / "Cast.op.1.1.5.output.0.6.npy")
    assert int4.dtype == np.int8
    assert int4.tolist() == [1, 2, -8, -1, 7, -7]


def test_msaccucmp_example_name(tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    name = "Conv2D.Default_Conv2D-op1.2.7.161243956333802"
    x = RNG.standard_normal((32, 256, 13, 13)).astype(np.float16)
    ab.write_bin(src / name, "Default/Conv2D-op1", [("DT_FLOAT16", x, None, "NC1HWC0")],
                 [("DT_FLOAT", np.float32(2.5))])
    r = dumpctl_convert(src / name, "-o", out)
    assert r.returncode == 0, r.stderr
    assert npy_names(out) == [f"{name}.input.0.32x256x13x13.npy", f"{name}.output.0..npy"]
    assert_same(out / f"{name}.input.0.32x256x13x13.npy", x)
    scalar = np.load(out / f"{name}.output.0..npy")
    assert scalar.shape == () and scalar == np.float32(2.5)


def test_corrupt_file_rejected_by_name_others_converted(tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    (src / "rank_0").mkdir(parents=True)
    good = ab.write_bin(src / "rank_0" / "Add.op.1.1.1", "op", [],
                        [("DT_INT32", np.int32([1, 2, 3]))])
    (src / "Truncated.op.1.1.2").write_bytes(good[:-2])
    (src / "Extra.op.1.1.3").write_bytes(good + b"\0")
    with pytest.raises(ValueError):  # the independent reader agrees they are broken
        ab.read_bin(src / "Truncated.op.1.1.2")
    r = dumpctl_convert(src, "-o", out)
    assert r.returncode == 1
    assert f"{src}/Truncated.op.1.1.2: sizes do not add up" in r.stderr
    assert f"{src}/Extra.op.1.1.3: sizes do not add up" in r.stderr
    assert "Add.op" not in r.stderr
    assert npy_names(out) == ["rank_0/Add.op.1.1.1.output.0.3.npy"]
    assert np.load(out / "rank_0/Add.op.1.1.1.output.0.3.npy").tolist() == [1, 2, 3]
    assert r.stdout == f"converted 1 tensors from 1 files into {out}, 2 files rejected\n"


def test_bad_tensors_rejected_by_name_others_converted(tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    ab.write_bin(src / "Mix.op.1.1.1", "op",
                 [("DT_FLOAT", b"12345678", (3,)), ("DT_STRING", b"hey", (3,))],
                 [("DT_UINT16", np.uint16([1, 65535]))])
    r = dumpctl_convert(src, "-o", out)
    assert r.returncode == 1
    assert (f"{src}/Mix.op.1.1.1: input 0: size 8 bytes does not match shape [3] of float32 "
            "(12 bytes)") in r.stderr
    assert f"{src}/Mix.op.1.1.1: input 1: data type DT_STRING cannot be converted" in r.stderr
    assert npy_names(out) == ["Mix.op.1.1.1.output.0.2.npy"]
    assert np.load(out / "Mix.op.1.1.1.output.0.2.npy").tolist() == [1, 65535]


def test_tree_kept_other_files_ignored(tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    files = ["Top.op.0.0.1", "rank_0/Net/0/3/A.op.0.0.2", "rank_1/Net/1/0/B.op.0.0.3"]
    for i, f in enumerate(files):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        ab.write_bin(src / f, "op", [("DT_INT64", np.int64([i]))], [])
    (src / "rank_1" / "statistic.csv").write_text("Op Type\n")
    (src / "rank_1" / "C.op.0.0.4.npy").write_bytes(b"not a bin file")
    os.symlink(src / files[0], src / "rank_1" / "Link.op.0.0.5")
    r = dumpctl_convert(src, "-o", out)
    assert r.returncode == 0, r.stderr
    assert npy_names(out) == sorted(f + ".input.0.1.npy" for f in files)
    for i, f in enumerate(files):
        npy = out / (f + ".input.0.1.npy")
        assert np.load(npy).tolist() == [i]
        assert stat.S_IMODE(npy.stat().st_mode) == 0o644 & ~current_umask()
    assert r.stdout == f"converted 3 tensors from 3 files into {out}\n"


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_default_output_is_the_current_directory(tmp_path):
    src, cwd = tmp_path / "in", tmp_path / "cwd"
    src.mkdir()
    cwd.mkdir()
    ab.write_bin(src / "Op.op.1.1.1", "op", [], [("DT_BOOL", np.array([True, False]))])
    r = dumpctl_convert(src, cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert np.load(cwd / "Op.op.1.1.1.output.0.2.npy").tolist() == [True, False]


def test_usage_and_missing_input(tmp_path):
    assert dumpctl_convert().returncode == 2
    assert dumpctl_convert(tmp_path, "-o").returncode == 2
    assert dumpctl_convert(tmp_path, "--bogus").returncode == 2
    r = dumpctl_convert("--help")
    assert r.returncode == 0 and "usage: dumpctl convert IN [-o OUT]" in r.stdout
    r = dumpctl_convert(tmp_path / "missing", "-o", tmp_path / "out")
    assert r.returncode == 1
    assert f"{tmp_path}/missing: no such file or directory" in r.stderr
