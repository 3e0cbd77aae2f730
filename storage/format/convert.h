// Element decoders shared by the statistics and the .npy writer. Branch-free so loops over
// them vectorise.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace dumpd::storage {

// Unaligned little-endian load (the ring does not promise element alignment).
template <typename T>
inline T loadUnaligned(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// IEEE half -> float, exact for every input (normals, subnormals, inf, NaN payloads). Three
// candidates and a select, no branch and no arithmetic on float subnormals (which costs ~100
// cycles an operation on x86).
inline float halfToFloat(uint16_t h) {
  const uint32_t exponent = h & 0x7c00u;
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;
  // Normal: rebias the exponent from 15 to 127.
  const float normal = std::bit_cast<float>(shifted + (112u << 23));
  // Inf/NaN: exponent all ones, mantissa (NaN payload) kept.
  const float special = std::bit_cast<float>(shifted | 0x7f800000u);
  // Subnormal (and zero): mantissa * 2^-24, exact, and a normal float.
  const float subnormal = static_cast<float>(h & 0x3ffu) * 0x1p-24f;
  const float value = exponent == 0x7c00u ? special : (exponent == 0 ? subnormal : normal);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(value) |
                              (static_cast<uint32_t>(h & 0x8000u) << 16));
}

// bfloat16 is the upper half of a float32: exact.
inline float bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// The low (first) and high (second) int4 of a byte, sign-extended from bit 3.
inline int8_t int4Low(uint8_t b) { return static_cast<int8_t>(static_cast<uint8_t>(b << 4)) >> 4; }
inline int8_t int4High(uint8_t b) { return static_cast<int8_t>(b) >> 4; }

}  // namespace dumpd::storage
