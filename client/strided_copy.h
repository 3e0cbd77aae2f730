// One-pass copy of a strided host array into C-contiguous memory: how a non-contiguous
// tensor (a transposed view, a channels-last buffer, a slice) reaches its ring slot without a
// contiguous temporary on the training thread.
//
// The layout is simplified first: dimensions of size 1 go, and neighbours the source keeps
// contiguous with each other merge. Then:
//   * rows the source keeps contiguous (the last dimension's stride is the element size) are
//     copied with memcpy;
//   * a transposed layout (another dimension has the element-size stride: channels-last,
//     a .T) is copied in square tiles, so reads and writes both stay within a few cache lines;
//   * anything else element by element.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace dumpd::client {

// Copies the array of `shape` with elements of `item` bytes, element (i0, ..., in) at
// `src + i0 * strides[0] + ... + in * strides[n]` (byte strides, any sign, 0 for a broadcast
// dimension), to `dst` in C order. REQUIRES: strides.size() == shape.size(), every size >= 0,
// `dst` holds item * (product of shape) bytes and does not overlap the source.
void copyStrided(std::byte* dst, const std::byte* src, std::span<const int64_t> shape,
                 std::span<const int64_t> strides, size_t item);

// True when `strides` describe the C-contiguous layout of `shape` (or the array is empty or
// has one element): a plain memcpy copies it.
bool isCContiguous(std::span<const int64_t> shape, std::span<const int64_t> strides, size_t item);

}  // namespace dumpd::client
