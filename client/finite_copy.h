// The client's copy of a host tensor into the ring, which also looks for NaN and infinity on
// the way (one read of the bytes, already paid): the daemon's flight recorder then needs no
// second pass over them (ring kCheckedBit, docs/recorder.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace dumpd::client {

// Copies `bytes` bytes of a contiguous `dtype` tensor from src to dst (not overlapping) and
// returns whether any element is a NaN or an infinity (either part of a complex element).
// Integer and bool tensors are copied and return false.
bool copyFindingNonFinite(std::byte* dst, const std::byte* src, uint64_t bytes, DType dtype);

}  // namespace dumpd::client
