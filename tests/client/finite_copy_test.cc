// copyFindingNonFinite: the bytes arrive intact, and a NaN or inf anywhere (the 128-byte
// vector steps, the scalar tail, either part of a complex) is found; nothing else is.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "client/finite_copy.h"

namespace dumpd::client {
namespace {

struct Case {
  DType dtype;
  size_t width;       // bytes of one element (complex: of one part)
  uint64_t nan_bits;  // a quiet NaN of that width
  uint64_t inf_bits;  // -inf
  uint64_t max_bits;  // the largest finite value: all exponent bits but one
};

const Case kCases[] = {
    {DType::kFloat16, 2, 0x7e00, 0xfc00, 0x7bff},
    {DType::kBFloat16, 2, 0x7fc0, 0xff80, 0x7f7f},
    {DType::kFloat32, 4, 0x7fc00000, 0xff800000, 0x7f7fffff},
    {DType::kFloat64, 8, 0x7ff8000000000000, 0xfff0000000000000, 0x7fefffffffffffff},
    {DType::kComplex64, 4, 0x7fc00000, 0xff800000, 0x7f7fffff},
    {DType::kComplex128, 8, 0x7ff8000000000000, 0xfff0000000000000, 0x7fefffffffffffff},
};

void put(std::vector<std::byte>& v, size_t index, size_t width, uint64_t bits) {
  std::memcpy(v.data() + index * width, &bits, width);  // little-endian low bytes
}

// Finite values of every kind: the largest, subnormals, signed zeros, ordinary numbers.
std::vector<std::byte> finite(const Case& c, size_t n) {
  std::vector<std::byte> v(n * c.width);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t kinds[] = {c.max_bits, 1, uint64_t{1} << (c.width * 8 - 1), 0, c.max_bits >> 3};
    put(v, i, c.width, kinds[i % 5]);
  }
  return v;
}

TEST(FiniteCopy, CopiesEveryByteAndFindsNothingInFiniteTensors) {
  for (const Case& c : kCases) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}}) {
      const std::vector<std::byte> src = finite(c, n);
      std::vector<std::byte> dst(src.size(), std::byte{0x5a});
      EXPECT_FALSE(copyFindingNonFinite(dst.data(), src.data(), src.size(), c.dtype))
          << dtypeName(c.dtype) << " n=" << n;
      EXPECT_EQ(dst, src) << dtypeName(c.dtype) << " n=" << n;
    }
  }
}

TEST(FiniteCopy, FindsANanOrAnInfAtEveryPosition) {
  for (const Case& c : kCases) {
    const size_t n = 300;  // two 128-byte steps and a tail for every width
    for (uint64_t bad : {c.nan_bits, c.inf_bits}) {
      for (size_t at = 0; at < n; ++at) {
        std::vector<std::byte> src = finite(c, n);
        put(src, at, c.width, bad);
        std::vector<std::byte> dst(src.size());
        ASSERT_TRUE(copyFindingNonFinite(dst.data(), src.data(), src.size(), c.dtype))
            << dtypeName(c.dtype) << " at " << at;
        ASSERT_EQ(dst, src);
      }
    }
  }
}

TEST(FiniteCopy, IntegerAndBoolTensorsAreCopiedAndNeverNonFinite) {
  std::vector<std::byte> src(1000, std::byte{0xff});  // every bit set: a NaN in any float
  for (DType d : {DType::kInt32, DType::kUInt16, DType::kInt64, DType::kBool, DType::kInt8}) {
    std::vector<std::byte> dst(src.size());
    EXPECT_FALSE(copyFindingNonFinite(dst.data(), src.data(), src.size(), d)) << dtypeName(d);
    EXPECT_EQ(dst, src);
  }
  std::vector<std::byte> dst(src.size());
  EXPECT_TRUE(copyFindingNonFinite(dst.data(), src.data(), src.size(), DType::kFloat32));
}

}  // namespace
}  // namespace dumpd::client
