#include "client/strided_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace dumpd::client {
namespace {

// The reference: element by element, C order, by index arithmetic.
std::vector<std::byte> naive(const std::byte* src, const std::vector<int64_t>& shape,
                             const std::vector<int64_t>& strides, size_t item) {
  int64_t count = 1;
  for (int64_t s : shape) count *= s;
  std::vector<std::byte> out(static_cast<size_t>(count) * item);
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t rest = flat;
    int64_t offset = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      offset += (rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    std::memcpy(out.data() + flat * static_cast<int64_t>(item), src + offset, item);
  }
  return out;
}

std::vector<std::byte> numbered(size_t bytes) {
  std::vector<std::byte> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((i * 131 + i / 251) & 0xff);
  return v;
}

std::vector<int64_t> cStrides(const std::vector<int64_t>& shape, size_t item) {
  std::vector<int64_t> s(shape.size());
  auto stride = static_cast<int64_t>(item);
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = stride;
    stride *= shape[d];
  }
  return s;
}

void expectCopies(const std::byte* src, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& strides, size_t item) {
  const std::vector<std::byte> want = naive(src, shape, strides, item);
  std::vector<std::byte> got(want.size() + 16, std::byte{0xee});
  copyStrided(got.data(), src, shape, strides, item);
  ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin()));
  for (size_t i = want.size(); i < got.size(); ++i) {
    ASSERT_EQ(got[i], std::byte{0xee}) << "wrote past the end";
  }
}

TEST(StridedCopyTest, ChannelsLastBecomesNchw) {
  // N, C, H, W = 2, 3, 17, 5 stored N, H, W, C (float32).
  const std::vector<int64_t> shape{2, 3, 17, 5};
  const size_t item = 4;
  const std::vector<std::byte> src = numbered(2 * 3 * 17 * 5 * item);
  const std::vector<int64_t> strides{17 * 5 * 3 * 4, 4, 5 * 3 * 4, 3 * 4};
  expectCopies(src.data(), shape, strides, item);
  // Spot check the meaning, not only agreement with the reference: element (1, 2, 16, 4).
  std::vector<std::byte> got(src.size());
  copyStrided(got.data(), src.data(), shape, strides, item);
  const int64_t logical = ((1 * 3 + 2) * 17 + 16) * 5 + 4;
  const int64_t stored = ((1 * 17 + 16) * 5 + 4) * 3 + 2;
  EXPECT_EQ(0, std::memcmp(got.data() + logical * 4, src.data() + stored * 4, 4));
}

TEST(StridedCopyTest, TransposesOfEveryElementSizeAndTileRemainder) {
  for (size_t item : {1, 2, 4, 8, 16}) {
    for (int64_t rows : {1, 7, 16, 33}) {
      for (int64_t cols : {1, 9, 16, 40}) {
        const std::vector<std::byte> src = numbered(static_cast<size_t>(rows * cols) * item);
        // The .T of a rows x cols C array.
        const auto i = static_cast<int64_t>(item);
        expectCopies(src.data(), {cols, rows}, {i, cols * i}, item);
      }
    }
  }
}

TEST(StridedCopyTest, SlicesNegativeAndBroadcastStrides) {
  const size_t item = 4;
  const std::vector<std::byte> src = numbered(6 * 10 * 8 * item);
  // [:, ::2, 1:7]: rows of 6 contiguous elements, every other row.
  expectCopies(src.data() + 4, {6, 5, 6}, {320, 64, 4}, item);
  // [:, :, ::-1]: reversed rows.
  expectCopies(src.data() + 7 * 4, {6, 10, 8}, {320, 32, -4}, item);
  // [::3, :, ::2]: a gather in the last dimension.
  expectCopies(src.data(), {2, 10, 4}, {960, 32, 8}, item);
  // A broadcast dimension (stride 0) in front of a transpose.
  expectCopies(src.data(), {3, 8, 10}, {0, 4, 32}, item);
  // A C-contiguous array, and one with size-1 dimensions of any stride.
  expectCopies(src.data(), {6, 10, 8}, cStrides({6, 10, 8}, item), item);
  expectCopies(src.data(), {6, 1, 80}, {320, 12345, 4}, item);
}

TEST(StridedCopyTest, RandomPermutedSlicedViewsMatchTheReference) {
  std::mt19937 rng(20261127);
  for (int round = 0; round < 300; ++round) {
    const size_t item = size_t{1} << (rng() % 5);
    const size_t rank = 1 + rng() % 5;
    std::vector<int64_t> base(rank);
    for (int64_t& s : base) s = 1 + static_cast<int64_t>(rng() % 6);
    const std::vector<int64_t> base_strides = cStrides(base, item);
    int64_t total = 1;
    for (int64_t s : base) total *= s;
    const std::vector<std::byte> src = numbered(static_cast<size_t>(total) * item);
    // Permute the dimensions, then step through some of them.
    std::vector<size_t> order(rank);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
    for (size_t d : order) {
      const int64_t step = 1 + static_cast<int64_t>(rng() % 2);
      shape.push_back((base[d] + step - 1) / step);
      strides.push_back(base_strides[d] * step);
    }
    SCOPED_TRACE("round " + std::to_string(round));
    expectCopies(src.data(), shape, strides, item);
  }
}

TEST(StridedCopyTest, EmptyArraysCopyNothingAndScalarsOneElement) {
  const std::vector<std::byte> src = numbered(64);
  std::vector<std::byte> dst(8, std::byte{0xee});
  copyStrided(dst.data(), src.data(), std::vector<int64_t>{0, 4}, std::vector<int64_t>{4, 16}, 4);
  EXPECT_EQ(dst[0], std::byte{0xee});
  copyStrided(dst.data(), src.data() + 8, std::vector<int64_t>{}, std::vector<int64_t>{}, 4);
  EXPECT_EQ(0, std::memcmp(dst.data(), src.data() + 8, 4));
  EXPECT_EQ(dst[4], std::byte{0xee});
}

TEST(StridedCopyTest, ContiguityIgnoresSizeOneDimensions) {
  EXPECT_TRUE(isCContiguous(std::vector<int64_t>{2, 3}, std::vector<int64_t>{12, 4}, 4));
  EXPECT_TRUE(isCContiguous(std::vector<int64_t>{2, 1, 3}, std::vector<int64_t>{12, 99, 4}, 4));
  EXPECT_TRUE(isCContiguous(std::vector<int64_t>{0, 3}, std::vector<int64_t>{1, 1}, 4));
  EXPECT_FALSE(isCContiguous(std::vector<int64_t>{2, 3}, std::vector<int64_t>{4, 8}, 4));
  EXPECT_FALSE(isCContiguous(std::vector<int64_t>{3}, std::vector<int64_t>{-4}, 4));
}

}  // namespace
}  // namespace dumpd::client
