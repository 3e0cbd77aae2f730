// Saturating arithmetic for counters that sum figures a client can influence.
#pragma once

#include <cstdint>

namespace dumpd {

inline uint64_t saturatingAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

}  // namespace dumpd
