#include "client/strided_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace dumpd::client {
namespace {

struct Dim {
  int64_t size;
  int64_t src;  // byte stride in the source
  int64_t dst;  // byte stride in the C-ordered destination
};

// The source layout without size-1 dimensions, neighbours merged where the outer one's stride
// is the inner one's whole extent; destination strides filled in. Empty: one element. Returns
// false for an empty array (nothing to copy).
bool simplify(std::span<const int64_t> shape, std::span<const int64_t> strides, size_t item,
              std::vector<Dim>& dims) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return false;
    if (shape[i] == 1) continue;
    const Dim d{shape[i], strides[i], 0};
    if (!dims.empty() && dims.back().src == d.src * d.size) {
      dims.back() = Dim{dims.back().size * d.size, d.src, 0};
    } else {
      dims.push_back(d);
    }
  }
  auto stride = static_cast<int64_t>(item);
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    it->dst = stride;
    stride *= it->size;
  }
  return true;
}

// Calls body(source offset, destination offset) for every index of `outer`, in C order.
template <typename Body>
void forEachIndex(const std::vector<Dim>& outer, Body&& body) {
  std::vector<int64_t> index(outer.size(), 0);
  int64_t src = 0;
  int64_t dst = 0;
  for (;;) {
    body(src, dst);
    size_t k = outer.size();
    for (;;) {
      if (k == 0) return;
      --k;
      if (++index[k] < outer[k].size) {
        src += outer[k].src;
        dst += outer[k].dst;
        break;
      }
      src -= outer[k].src * (outer[k].size - 1);
      dst -= outer[k].dst * (outer[k].size - 1);
      index[k] = 0;
    }
  }
}

template <size_t N>
inline void copyElement(std::byte* dst, const std::byte* src) {
  std::memcpy(dst, src, N);
}

// Tiles of kRows source-contiguous elements by kCols destination-contiguous ones: wide in
// the destination's direction, so each tile writes whole cache lines. Measured on 16 MiB of
// channels-last float32 (docs/performance.md): 16 x 64 beats square tiles by 1.5x.
constexpr int64_t kRows = 16;
constexpr int64_t kCols = 64;

// The elements i0 <= i < i1, j0 <= j < j1 of the transpose below, one at a time.
template <size_t N>
inline void transposeScalar(std::byte* dst, const std::byte* src, int64_t i0, int64_t i1,
                            int64_t j0, int64_t j1, int64_t src_col, int64_t dst_row) {
  for (int64_t i = i0; i < i1; ++i) {
    std::byte* d = dst + i * dst_row;
    const std::byte* s = src + i * static_cast<int64_t>(N);
    for (int64_t j = j0; j < j1; ++j) {
      copyElement<N>(d + j * static_cast<int64_t>(N), s + j * src_col);
    }
  }
}

#if defined(__SSE2__)
// 4-byte elements in 4 x 4 blocks of SSE registers (bit moves only: any 4-byte dtype, NaN
// payloads kept), the tile's ragged edges one at a time.
inline void transposeTile4(std::byte* dst, const std::byte* src, int64_t i0, int64_t i1, int64_t j0,
                           int64_t j1, int64_t src_col, int64_t dst_row) {
  int64_t i = i0;
  for (; i + 4 <= i1; i += 4) {
    int64_t j = j0;
    for (; j + 4 <= j1; j += 4) {
      const std::byte* s = src + i * 4 + j * src_col;
      __m128 r0 = _mm_loadu_ps(reinterpret_cast<const float*>(s));
      __m128 r1 = _mm_loadu_ps(reinterpret_cast<const float*>(s + src_col));
      __m128 r2 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 2 * src_col));
      __m128 r3 = _mm_loadu_ps(reinterpret_cast<const float*>(s + 3 * src_col));
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      std::byte* d = dst + i * dst_row + j * 4;
      _mm_storeu_ps(reinterpret_cast<float*>(d), r0);
      _mm_storeu_ps(reinterpret_cast<float*>(d + dst_row), r1);
      _mm_storeu_ps(reinterpret_cast<float*>(d + 2 * dst_row), r2);
      _mm_storeu_ps(reinterpret_cast<float*>(d + 3 * dst_row), r3);
    }
    transposeScalar<4>(dst, src, i, i + 4, j, j1, src_col, dst_row);
  }
  transposeScalar<4>(dst, src, i, i1, j0, j1, src_col, dst_row);
}
#endif

// dst[i * dst_row + j] = src[i + j * src_col] (in elements of N bytes; strides in bytes) for
// a rows x cols block, tile by tile.
template <size_t N>
void transpose(std::byte* dst, const std::byte* src, int64_t rows, int64_t cols, int64_t src_col,
               int64_t dst_row) {
  for (int64_t i0 = 0; i0 < rows; i0 += kRows) {
    const int64_t i1 = std::min(rows, i0 + kRows);
    for (int64_t j0 = 0; j0 < cols; j0 += kCols) {
      const int64_t j1 = std::min(cols, j0 + kCols);
#if defined(__SSE2__)
      if constexpr (N == 4) {
        transposeTile4(dst, src, i0, i1, j0, j1, src_col, dst_row);
        continue;
      }
#endif
      transposeScalar<N>(dst, src, i0, i1, j0, j1, src_col, dst_row);
    }
  }
}

template <size_t N>
void gather(std::byte* dst, const std::byte* src, int64_t count, int64_t src_stride) {
  for (int64_t j = 0; j < count; ++j) {
    copyElement<N>(dst + j * static_cast<int64_t>(N), src + j * src_stride);
  }
}

template <size_t N>
void copyDims(std::byte* dst, const std::byte* src, std::vector<Dim>& dims) {
  const Dim last = dims.back();
  dims.pop_back();
  // The source's own contiguous dimension, when it is not the last one: a transpose.
  auto k = std::find_if(dims.begin(), dims.end(),
                        [](const Dim& d) { return d.src == static_cast<int64_t>(N); });
  if (k != dims.end()) {
    const Dim rows = *k;
    dims.erase(k);
    forEachIndex(dims, [&](int64_t s, int64_t d) {
      transpose<N>(dst + d, src + s, rows.size, last.size, last.src, rows.dst);
    });
    return;
  }
  forEachIndex(dims,
               [&](int64_t s, int64_t d) { gather<N>(dst + d, src + s, last.size, last.src); });
}

}  // namespace

void copyStrided(std::byte* dst, const std::byte* src, std::span<const int64_t> shape,
                 std::span<const int64_t> strides, size_t item) {
  std::vector<Dim> dims;
  if (!simplify(shape, strides, item, dims)) return;
  if (dims.empty()) {
    std::memcpy(dst, src, item);
    return;
  }
  const Dim last = dims.back();
  if (last.src == static_cast<int64_t>(item)) {  // contiguous rows
    dims.pop_back();
    const auto row = static_cast<size_t>(last.size) * item;
    forEachIndex(dims, [&](int64_t s, int64_t d) { std::memcpy(dst + d, src + s, row); });
    return;
  }
  switch (item) {
    case 1:
      return copyDims<1>(dst, src, dims);
    case 2:
      return copyDims<2>(dst, src, dims);
    case 4:
      return copyDims<4>(dst, src, dims);
    case 8:
      return copyDims<8>(dst, src, dims);
    case 16:
      return copyDims<16>(dst, src, dims);
    default:  // no dtype has another size; element by element all the same
      dims.pop_back();
      forEachIndex(dims, [&](int64_t s, int64_t d) {
        for (int64_t j = 0; j < last.size; ++j) {
          std::memcpy(dst + d + j * static_cast<int64_t>(item), src + s + j * last.src, item);
        }
      });
  }
}

bool isCContiguous(std::span<const int64_t> shape, std::span<const int64_t> strides, size_t item) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return true;
  auto expected = static_cast<int64_t>(item);
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

}  // namespace dumpd::client
