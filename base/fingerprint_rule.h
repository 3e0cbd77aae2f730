// The fingerprint rule's arithmetic (base/fingerprint.h), in C++17 and callable from CUDA
// kernels, so that the host, the device kernel (client/device_fingerprint.cu) and their tests
// share one statement of it.
//
// A block is 8 consecutive words (32 bytes): block b's word j (word 8b + j of the tensor) is
// weighted by fingerprintBase(j) + b * fingerprintStep(j) (mod 2^32). A byte at offset o is
// the part of word o / 4 that starts at bit 8 * (o % 4).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DUMPD_HOST_DEVICE __host__ __device__
#else
#define DUMPD_HOST_DEVICE
#endif

namespace dumpd {

// The rule's sixteen constants: entries 0-7 the bases (odd), 8-15 the steps (even). A switch,
// not an array: kernels can call it, and constant indices fold away.
DUMPD_HOST_DEVICE constexpr uint32_t fingerprintConstant(unsigned i) {
  switch (i & 15u) {
    case 0:
      return 0x9E3779B1u;
    case 1:
      return 0x85EBCA77u;
    case 2:
      return 0xC2B2AE3Du;
    case 3:
      return 0x27D4EB2Fu;
    case 4:
      return 0x165667B1u;
    case 5:
      return 0xD3A2646Du;
    case 6:
      return 0xFD7046C5u;
    case 7:
      return 0xB55A4F09u;
    case 8:
      return 0x2545F492u;
    case 9:
      return 0x61C88646u;
    case 10:
      return 0x7FEB352Eu;
    case 11:
      return 0x846CA68Cu;
    case 12:
      return 0x94D049BAu;
    case 13:
      return 0xBF58476Cu;
    case 14:
      return 0x3C6EF372u;
    default:
      return 0xDAA66D2Au;
  }
}

DUMPD_HOST_DEVICE constexpr uint32_t fingerprintBase(unsigned j) {
  return fingerprintConstant(j & 7u);
}
DUMPD_HOST_DEVICE constexpr uint32_t fingerprintStep(unsigned j) {
  return fingerprintConstant(8u + (j & 7u));
}

// k_i of word `index`.
DUMPD_HOST_DEVICE constexpr uint32_t fingerprintWeight(uint64_t index) {
  const unsigned j = static_cast<unsigned>(index & 7u);
  return fingerprintBase(j) + static_cast<uint32_t>(index >> 3) * fingerprintStep(j);
}

// The weighted sum of one whole block: `w` its 8 words, `block` its number.
DUMPD_HOST_DEVICE inline uint64_t fingerprintBlockSum(const uint32_t (&w)[8], uint64_t block) {
  const uint32_t b = static_cast<uint32_t>(block);
  uint64_t s = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (unsigned j = 0; j < 8; ++j) {
    s += static_cast<uint64_t>(w[j]) * (fingerprintBase(j) + b * fingerprintStep(j));
  }
  return s;
}

// What the byte `value` at byte offset `offset` of the tensor adds to the sum.
DUMPD_HOST_DEVICE constexpr uint64_t fingerprintByteTerm(uint8_t value, uint64_t offset) {
  return (static_cast<uint64_t>(value) << (8u * (offset & 3u))) * fingerprintWeight(offset >> 2);
}

inline constexpr uint64_t kFingerprintLengthFactor = 0x9E3779B97F4A7C15ull;

// splitmix64's finaliser.
DUMPD_HOST_DEVICE constexpr uint64_t fingerprintMix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// The digest of a tensor of `total_bytes` whose weighted sum is `sum`.
DUMPD_HOST_DEVICE constexpr uint64_t fingerprintFinish(uint64_t sum, uint64_t total_bytes) {
  return fingerprintMix(sum ^ (total_bytes * kFingerprintLengthFactor));
}

}  // namespace dumpd
