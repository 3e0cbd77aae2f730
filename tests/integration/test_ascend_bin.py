"""Self-check of ascend_bin, the independent bin reader/writer the convert tests rely on."""

import re
import struct

import numpy as np
import pytest

import ascend_bin as ab

RNG = np.random.default_rng(7)
SHAPE = (3, 5)  # 15 elements: int4 ends on a half byte


def sample(dtype_name):
    """(data given to write_bin, expected decoded array) for a tensor of SHAPE."""
    n = int(np.prod(SHAPE))
    if dtype_name == "DT_BF16":
        values = RNG.standard_normal(n).astype(np.float32)
        truncated = (values.view(np.uint32) & 0xFFFF0000).view(np.float32)
        return ab.bf16_bytes(values), truncated.reshape(SHAPE)
    if dtype_name == "DT_INT4":
        values = RNG.integers(-8, 8, n)
        return ab.pack_int4(values), values.astype(np.int8).reshape(SHAPE)
    if dtype_name in ("DT_BOOL", "DT_UINT1"):
        values = RNG.integers(0, 2, SHAPE).astype(ab.NUMPY_TYPES[dtype_name])
        return values, values
    dt = np.dtype(ab.NUMPY_TYPES[dtype_name])
    if dt.kind == "c":
        values = (RNG.standard_normal(SHAPE) + 1j * RNG.standard_normal(SHAPE)).astype(dt)
    elif dt.kind == "f":
        values = RNG.standard_normal(SHAPE).astype(dt)
    else:
        info = np.iinfo(dt)
        values = RNG.integers(info.min, info.max, SHAPE, dtype=dt, endpoint=True)
    return values, values


@pytest.mark.parametrize("dtype_name", sorted(ab.DECODED_TYPES))
def test_round_trip_every_dtype(tmp_path, dtype_name):
    data, expected = sample(dtype_name)
    shape = SHAPE if isinstance(data, bytes) else None
    path = tmp_path / "Op.op.1.2.3"
    ab.write_bin(path, "Default/op", [ab.Tensor(dtype_name, data, shape, "NCHW")],
                 [ab.Tensor("DT_INT32", np.arange(4, dtype=np.int32))], dump_time=123)
    got = ab.read_bin(path)
    assert got["version"] == "2.0" and got["dump_time"] == 123 and got["op_name"] == "Default/op"
    ((name, shape_read, fmt, array),) = got["inputs"]
    assert (name, shape_read, fmt) == (dtype_name, SHAPE, "FORMAT_NCHW")
    assert array.dtype == np.dtype(ab.DECODED_TYPES[dtype_name])
    np.testing.assert_array_equal(array, expected)
    assert array.tobytes() == expected.astype(ab.DECODED_TYPES[dtype_name]).tobytes()
    ((name, shape_read, fmt, array),) = got["outputs"]
    assert (name, shape_read, fmt) == ("DT_INT32", (4,), "FORMAT_ND")
    np.testing.assert_array_equal(array, [0, 1, 2, 3])


def test_int4_and_bf16_known_bytes(tmp_path):
    path = tmp_path / "Op.op.1.2.3"
    ab.write_bin(path, "op", [("DT_INT4", b"\x21\xf8\x07", (5,)),
                              ("DT_BF16", b"\x80\x3f\x20\xc0", (2,))], [])
    (_, _, _, int4), (_, _, _, bf16) = ab.read_bin(path)["inputs"]
    assert int4.tolist() == [1, 2, -8, -1, 7]
    assert bf16.tolist() == [1.0, -2.5]
    assert ab.pack_int4([1, 2, -8, -1, 7]) == b"\x21\xf8\x07"
    assert ab.bf16_bytes(np.float32([1.0, -2.5])) == b"\x80\x3f\x20\xc0"


def test_layout_and_field_numbers_on_the_wire(tmp_path):
    """The header bytes spelled out by hand from the spec's field numbers."""
    path = tmp_path / "Op.op.1.2.3"
    content = ab.write_bin(path, "ab", [("DT_UINT8", np.uint8([7, 9]))],
                           [("DT_FLOAT16", np.float16([1.0]))], dump_time=5, buffers=[b"B"])
    # OpInput: data_type=4 (field 1), format ND=2 (field 2), shape {dim: [2]} (field 3),
    # size 2 (field 5), original_shape (field 6).
    op_input = bytes([0x08, 4, 0x10, 2, 0x1A, 3, 0x0A, 1, 2, 0x28, 2, 0x32, 3, 0x0A, 1, 2])
    # OpOutput: data_type=2, format 2, shape [1], size 2 (field 6), original_shape (field 7).
    op_output = bytes([0x08, 2, 0x10, 2, 0x1A, 3, 0x0A, 1, 1, 0x30, 2, 0x3A, 3, 0x0A, 1, 1])
    header = (b"\x0a\x032.0" + b"\x10\x05" + b"\x1a" + bytes([len(op_output)]) + op_output +
              b"\x22" + bytes([len(op_input)]) + op_input + b"\x2a\x02\x18\x01" + b"\x32\x02ab")
    data = b"\x07\x09" + np.float16([1.0]).tobytes() + b"B"
    assert content == struct.pack("<Q", len(header)) + header + data
    assert ab.read_bin(path)["buffers"] == [b"B"]


def test_undecodable_type_is_raw_bytes(tmp_path):
    path = tmp_path / "Op.op.1.2.3"
    ab.write_bin(path, "op", [("DT_STRING", b"hey", (3,))], [])
    ((name, shape, _, array),) = ab.read_bin(path)["inputs"]
    assert (name, shape, array.tobytes()) == ("DT_STRING", (3,), b"hey")


def test_bad_sizes_rejected_naming_the_file(tmp_path):
    path = tmp_path / "Op.op.1.2.3"
    good = ab.write_bin(path, "op", [], [("DT_FLOAT", np.float32([1, 2]))])
    header_len = struct.unpack_from("<Q", good)[0]
    cases = {
        "truncated": good[:-1],
        "extra": good + b"\0",
        "header_past_end": struct.pack("<Q", len(good) - 7) + good[8:],
        "short": b"\1\0\0",
        "not_a_header": struct.pack("<Q", 2) + b"\xff\xff",
        "header_only": good[:8 + header_len],
    }
    for what, content in cases.items():
        bad = tmp_path / f"{what}.op.1.2.3"
        bad.write_bytes(content)
        with pytest.raises(ValueError, match=re.escape(str(bad))):
            ab.read_bin(bad)
    assert ab.read_bin(path)["outputs"][0][3].tolist() == [1.0, 2.0]


def test_size_not_matching_shape_rejected(tmp_path):
    path = tmp_path / "Op.op.1.2.3"
    ab.write_bin(path, "op", [("DT_FLOAT", b"12345678", (3,))], [])
    with pytest.raises(ValueError, match="input 0: 8 bytes, but DT_FLOAT of shape"):
        ab.read_bin(path)
