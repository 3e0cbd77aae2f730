"""dumpd.fingerprint: the replica digest of an array's bytes, as docs/replicas.md defines it.

The rule is restated here with numpy (independently of the C++ code), and the digest must
follow it for every length; a single flipped bit anywhere changes it; a view that is not
C-contiguous gets the digest of its C-order copy; torch tensors work like numpy arrays.
"""

import numpy as np
import pytest

import dumpd

BASE = [0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F,
        0x165667B1, 0xD3A2646D, 0xFD7046C5, 0xB55A4F09]
STEP = [0x2545F492, 0x61C88646, 0x7FEB352E, 0x846CA68C,
        0x94D049BA, 0xBF58476C, 0x3C6EF372, 0xDAA66D2A]
M64 = (1 << 64) - 1


def by_the_rule(data: bytes) -> int:
    padded = data + b"\0" * (-len(data) % 4)
    words = np.frombuffer(padded, dtype="<u4").astype(np.uint64)
    i = np.arange(words.size, dtype=np.uint64)
    base = np.array(BASE, dtype=np.uint64)[i % 8]
    step = np.array(STEP, dtype=np.uint64)[i % 8]
    k = (base + (i // 8) * step) % np.uint64(1 << 32)
    s = int(np.sum(words * k, dtype=np.uint64))  # wraps mod 2^64, as the rule says
    x = s ^ ((len(data) * 0x9E3779B97F4A7C15) & M64)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


@pytest.mark.parametrize("n", [0, 1, 3, 4, 7, 32, 127, 128, 129, 4097, 1 << 20])
def test_the_digest_follows_the_documented_rule(n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    assert dumpd.fingerprint(data) == by_the_rule(data.tobytes())


def test_a_single_flipped_bit_anywhere_changes_it():
    a = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    clean = dumpd.fingerprint(a)
    bits = a.view(np.uint32)
    for index in range(0, a.size, 37):
        for bit in (0, 13, 22, 31):  # mantissa, exponent and sign bits
            bits[index] ^= np.uint32(1 << bit)
            assert dumpd.fingerprint(a) != clean, (index, bit)
            bits[index] ^= np.uint32(1 << bit)
    assert dumpd.fingerprint(a) == clean


def test_a_strided_view_is_fingerprinted_in_c_order():
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    assert dumpd.fingerprint(a.T) == dumpd.fingerprint(np.ascontiguousarray(a.T))
    assert dumpd.fingerprint(a.T) != dumpd.fingerprint(a)


def test_torch_tensors_and_their_numpy_views_agree():
    torch = pytest.importorskip("torch", reason="torch is not installed for this interpreter")
    t = torch.randn(33, 17)
    assert dumpd.fingerprint(t) == dumpd.fingerprint(t.numpy())
    # numpy has no bfloat16: its bits go through an int16 view, which is the same bytes.
    bits = t.to(torch.bfloat16).view(torch.int16)
    assert dumpd.fingerprint(bits) == by_the_rule(bits.numpy().tobytes())


def test_what_is_not_an_array_is_a_type_error():
    with pytest.raises(TypeError):
        dumpd.fingerprint(object())


def test_compare_replicas_names_the_ranks_that_differ():
    table = np.array([[1, 7], [1, 7], [1, 8], [1, 7]], dtype=np.uint64)  # 4 ranks x 2 tensors
    assert dumpd.compare_replicas(table, 4, 2) == [(1, True, 7, [2])]
    two = np.array([[5], [6]], dtype=np.int64)  # two replicas that differ: no majority
    assert dumpd.compare_replicas(two, 2, 1) == [(0, False, 0, [0, 1])]
    assert dumpd.compare_replicas(np.full((3, 4), -1, dtype=np.int64), 3, 4) == []
    with pytest.raises(ValueError, match="the digest table has 8 digests, not 3 ranks x 2"):
        dumpd.compare_replicas(table, 3, 2)
    with pytest.raises(TypeError, match="64-bit digests"):
        dumpd.compare_replicas(np.zeros((2, 2), dtype=np.int32), 2, 2)
