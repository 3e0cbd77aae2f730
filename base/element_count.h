// The one overflow rule for tensor shapes, shared by the client, the daemon and storage.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace dumpd {

// At most 2^56 elements: with at most 16 bytes per element no byte count derived from an
// element count can overflow 64 bits.
inline constexpr uint64_t kMaxElements = uint64_t{1} << 56;

// Number of elements of `shape`; nullopt when a dimension is negative or the product exceeds
// kMaxElements. An empty shape is a scalar (1 element).
inline std::optional<uint64_t> elementCount(std::span<const int64_t> shape) {
  uint64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > kMaxElements) {
      return std::nullopt;
    }
  }
  return n;
}

}  // namespace dumpd
