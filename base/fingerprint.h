// A tensor's fingerprint: a 64-bit digest of its raw bytes, for comparing replicas, tensors
// that must be bit-identical across ranks (docs/replicas.md). Every single-bit flip of the
// bytes changes it; it is not a cryptographic hash and says nothing about tensors that are
// merely close.
//
// The rule, exact, so that the host, the device kernel and any other implementation agree:
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

namespace dumpd {

inline constexpr std::array<uint32_t, 8> kFingerprintBase{0x9E3779B1u, 0x85EBCA77u, 0xC2B2AE3Du,
                                                          0x27D4EB2Fu, 0x165667B1u, 0xD3A2646Du,
                                                          0xFD7046C5u, 0xB55A4F09u};
inline constexpr std::array<uint32_t, 8> kFingerprintStep{0x2545F492u, 0x61C88646u, 0x7FEB352Eu,
                                                          0x846CA68Cu, 0x94D049BAu, 0xBF58476Cu,
                                                          0x3C6EF372u, 0xDAA66D2Au};
inline constexpr uint64_t kFingerprintLength = 0x9E3779B97F4A7C15ull;

// splitmix64's finaliser.
constexpr uint64_t fingerprintMix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// The weighted sum s of `bytes`, whose first word is word `first_word` of the tensor (a
// multiple of 8, so that a tensor can be summed in pieces: add the pieces' sums). Uses AVX2
// when the CPU has it; the result does not depend on that.
uint64_t fingerprintSum(std::span<const std::byte> bytes, uint64_t first_word = 0);
// The digest of a tensor of `total_bytes` whose weighted sum is `sum`.
constexpr uint64_t fingerprintFinish(uint64_t sum, uint64_t total_bytes) {
  return fingerprintMix(sum ^ (total_bytes * kFingerprintLength));
}
// The digest of `bytes`.
inline uint64_t fingerprint(std::span<const std::byte> bytes) {
  return fingerprintFinish(fingerprintSum(bytes), bytes.size());
}

// The same sum one word at a time, with no SIMD: the reference the tests compare with.
uint64_t fingerprintSumScalar(std::span<const std::byte> bytes, uint64_t first_word = 0);

}  // namespace dumpd
