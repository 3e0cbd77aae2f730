// A tensor's fingerprint: a 64-bit digest of its raw bytes, for comparing replicas, tensors
// that must be bit-identical across ranks (docs/replicas.md). Every single-bit flip of the
// bytes changes it; it is not a cryptographic hash and says nothing about tensors that are
// merely close.
//
// The rule, exact, so that the host, the device kernel and any other implementation agree
// (its arithmetic, shared with the kernel: base/fingerprint_rule.h):
// the bytes are read as little-endian 32-bit words w_i (a last partial word padded with zero
// bytes); word i is weighted by the odd 32-bit number
//     k_i = kFingerprintBase[i % 8] + (i / 8) * kFingerprintStep[i % 8]   (mod 2^32)
// (bases odd, steps even); the sum s = sum of w_i * k_i (mod 2^64, products taken in 64 bits)
// is then finished with the byte count: digest = mix64(s ^ (bytes * kFingerprintLength)),
// mix64 being splitmix64's finaliser (a bijection).
//
// Why a flip always shows: flipping bit b of w_i changes s by +-2^b * k_i, with k_i odd and
// below 2^32, which is not 0 mod 2^64; the finish is a bijection of s for a given length.
// Two flips can cancel only when their weighted changes are opposite, which the per-block
// weights make depend on both positions.
//
// Any order of summation gives the same digest (addition mod 2^64): SIMD lanes, threads and
// a device's blocks each sum their own words.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "base/fingerprint_rule.h"

namespace dumpd {

inline constexpr std::array<uint32_t, 8> kFingerprintBase{
    fingerprintBase(0), fingerprintBase(1), fingerprintBase(2), fingerprintBase(3),
    fingerprintBase(4), fingerprintBase(5), fingerprintBase(6), fingerprintBase(7)};
inline constexpr std::array<uint32_t, 8> kFingerprintStep{
    fingerprintStep(0), fingerprintStep(1), fingerprintStep(2), fingerprintStep(3),
    fingerprintStep(4), fingerprintStep(5), fingerprintStep(6), fingerprintStep(7)};
inline constexpr uint64_t kFingerprintLength = kFingerprintLengthFactor;

// The weighted sum s of `bytes`, whose first word is word `first_word` of the tensor (a
// multiple of 8, so that a tensor can be summed in pieces: add the pieces' sums). Uses AVX2
// when the CPU has it; the result does not depend on that.
uint64_t fingerprintSum(std::span<const std::byte> bytes, uint64_t first_word = 0);
// The digest of `bytes`.
inline uint64_t fingerprint(std::span<const std::byte> bytes) {
  return fingerprintFinish(fingerprintSum(bytes), bytes.size());
}

// The same sum one word at a time, with no SIMD: the reference the tests compare with.
uint64_t fingerprintSumScalar(std::span<const std::byte> bytes, uint64_t first_word = 0);

}  // namespace dumpd
