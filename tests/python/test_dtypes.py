"""Every dtype round trip: numpy array -> dumpd.Client.dump -> daemon -> numpy.load."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import pytest

import dumpd
from conftest import Daemon, dump_files, index_files

RNG = np.random.default_rng(1234)
SHAPE = (3, 5)


def _ints(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, size=SHAPE, dtype=dtype, endpoint=True)
    a.flat[0], a.flat[1] = info.min, info.max  # the extremes survive
    return a


def _floats(dtype) -> np.ndarray:
    a = RNG.standard_normal(SHAPE).astype(dtype)
    a.flat[0], a.flat[1], a.flat[2], a.flat[3] = np.inf, -np.inf, -0.0, np.finfo(dtype).max
    return a


def _complex(dtype) -> np.ndarray:
    return (RNG.standard_normal(SHAPE) + 1j * RNG.standard_normal(SHAPE)).astype(dtype)


# name in the file -> the array sent (the file holds exactly these values)
NATIVE: Dict[str, np.ndarray] = {
    "bool": RNG.integers(0, 2, size=SHAPE).astype(np.bool_),
    "int8": _ints(np.int8),
    "int16": _ints(np.int16),
    "int32": _ints(np.int32),
    "int64": _ints(np.int64),
    "uint8": _ints(np.uint8),
    "uint16": _ints(np.uint16),
    "uint32": _ints(np.uint32),
    "uint64": _ints(np.uint64),
    "float16": _floats(np.float16),
    "float32": _floats(np.float32),
    "float64": _floats(np.float64),
    "complex64": _complex(np.complex64),
    "complex128": _complex(np.complex128),
}


def _bf16_case() -> Tuple[np.ndarray, np.ndarray]:
    """Raw bfloat16 bits (uint16) and the float32 values they stand for (exactly)."""
    values = np.array([0.0, -0.0, 1.0, -2.5, 3.140625, 65280.0, np.inf, -np.inf, 1e-40,
                       -1.5e38, 0.333984375, 7.0], dtype=np.float32).reshape(3, 4)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # truncation: 1e-40 is inexact
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def _int4_case() -> Tuple[np.ndarray, np.ndarray]:
    """Packed int4 pairs (low nibble first) and the int8 values they unpack to."""
    logical = np.array([[-8, 7, 0, -1, 3, -3], [1, 2, -4, 5, -6, 6]], dtype=np.int8)
    lo = logical[:, 0::2].astype(np.uint8) & 0x0F
    hi = logical[:, 1::2].astype(np.uint8) & 0x0F
    packed = (lo | (hi << 4)).astype(np.uint8)
    return packed, logical


@pytest.fixture(scope="module")
def dumped(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> Dict[tuple, object]:
    """Dumps every case once (one op per dtype) and indexes the files."""
    root = tmp_path_factory.mktemp("dtypes")
    from conftest import make_config

    config = make_config(root)
    bf16_bits, _ = _bf16_case()
    int4_packed, _ = _int4_case()
    with dumpd.Client(config, socket=daemon.socket) as client:
        for name, array in NATIVE.items():
            assert client.dump("Cast", f"Default/{name}-op0", "output", 0, array)
        assert client.dump("Cast", "Default/bf16-op0", "output", 0, bf16_bits, dtype="bfloat16")
        assert client.dump("Cast", "Default/bf16i-op0", "output", 0, bf16_bits.view(np.int16),
                           dtype="bfloat16")
        assert client.dump("Cast", "Default/int4-op0", "output", 0, int4_packed, dtype="int4")
        assert client.dump("Cast", "Default/int4s-op0", "output", 0, int4_packed.view(np.int8),
                           dtype="int4")
        assert client.dump("Cast", "Default/uint1-op0", "output", 0,
                           np.array([[0, 1, 1], [1, 0, 0]], dtype=np.uint8), dtype="uint1")
        # dump_op takes the same overrides as (array, dtype) pairs.
        assert client.dump_op("Cast", "Default/pairs-op0",
                              outputs=[(bf16_bits, "bfloat16"), (int4_packed, "int4"),
                                       NATIVE["float32"]])
        counts = client.flush()
    assert counts["tensors_failed"] == 0, counts["last_error"]
    return index_files(dump_files(root / "dump"))


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_native_dtype_round_trip(dumped, name: str) -> None:
    f = dumped[(0, f"Default_{name}-op0", "output", 0)]
    assert f.dtype == name
    loaded = f.load()
    assert loaded.dtype == NATIVE[name].dtype and loaded.shape == SHAPE
    np.testing.assert_array_equal(loaded, NATIVE[name])
    if name.startswith("float"):  # -0.0 keeps its sign bit
        assert np.signbit(loaded.flat[2])


@pytest.mark.parametrize("op", ["bf16", "bf16i"])
def test_bfloat16_is_written_as_exact_float32(dumped, op: str) -> None:
    f = dumped[(0, f"Default_{op}-op0", "output", 0)]
    _, values = _bf16_case()
    assert f.dtype == "bfloat16"
    loaded = f.load()
    assert loaded.dtype == np.float32 and loaded.shape == values.shape
    assert loaded.view(np.uint32).tolist() == values.view(np.uint32).tolist()  # bit exact


@pytest.mark.parametrize("op", ["int4", "int4s"])
def test_int4_is_unpacked_to_int8_low_nibble_first(dumped, op: str) -> None:
    f = dumped[(0, f"Default_{op}-op0", "output", 0)]
    _, logical = _int4_case()
    assert f.dtype == "int4"
    loaded = f.load()
    assert loaded.dtype == np.int8 and loaded.shape == (2, 6)  # last dimension doubled
    np.testing.assert_array_equal(loaded, logical)


def test_uint1_is_written_as_uint8(dumped) -> None:
    f = dumped[(0, "Default_uint1-op0", "output", 0)]
    assert f.dtype == "uint1"
    loaded = f.load()
    assert loaded.dtype == np.uint8
    np.testing.assert_array_equal(loaded, [[0, 1, 1], [1, 0, 0]])


def test_overrides_in_dump_op_pairs(dumped) -> None:
    _, values = _bf16_case()
    _, logical = _int4_case()
    bf16 = dumped[(0, "Default_pairs-op0", "output", 0)]
    int4 = dumped[(0, "Default_pairs-op0", "output", 1)]
    plain = dumped[(0, "Default_pairs-op0", "output", 2)]
    assert (bf16.dtype, int4.dtype, plain.dtype) == ("bfloat16", "int4", "float32")
    np.testing.assert_array_equal(bf16.load(), values)
    np.testing.assert_array_equal(int4.load(), logical)
    np.testing.assert_array_equal(plain.load(), NATIVE["float32"])
