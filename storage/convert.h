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

// IEEE half -> float, exact for every input (normals, subnormals, inf, NaN payloads).
inline float halfToFloat(uint16_t h) {
  uint32_t magnitude = static_cast<uint32_t>(h & 0x7fffu) << 13;
  // Scaling by 2^112 moves the 5-bit exponent bias (15) to the 8-bit one (127); it also
  // normalises half subnormals, which arrive here as float subnormals.
  float scaled = std::bit_cast<float>(magnitude) * 0x1p112f;
  // Exponent all ones (inf/NaN): keep the mantissa, set the float exponent to all ones.
  float special = std::bit_cast<float>(magnitude | 0x7f800000u);
  float value = (h & 0x7c00u) == 0x7c00u ? special : scaled;
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(value) | sign);
}

// bfloat16 is the upper half of a float32: exact.
inline float bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// The low (first) and high (second) int4 of a byte, sign-extended from bit 3.
inline int8_t int4Low(uint8_t b) { return static_cast<int8_t>(static_cast<uint8_t>(b << 4)) >> 4; }
inline int8_t int4High(uint8_t b) { return static_cast<int8_t>(b) >> 4; }

}  // namespace dumpd::storage
