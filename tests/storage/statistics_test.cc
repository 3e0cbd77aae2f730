#include "storage/format/statistics.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "storage/format/convert.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNanF = std::numeric_limits<float>::quiet_NaN();
constexpr float kInfF = std::numeric_limits<float>::infinity();

using testing::statsOf;

TEST(StatisticsTest, SpecExampleInput) {
  TensorStats s = statsOf(DType::kFloat32, std::vector<float>{1, 2, 3, 4, 5, 6});
  EXPECT_EQ(s.count, 6u);
  EXPECT_EQ(s.max, 6);
  EXPECT_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.avg, 3.5);
  EXPECT_NEAR(s.l2norm, 9.539392, 1e-6);
  EXPECT_EQ(s.positive, 6u);
  EXPECT_EQ(s.negative, 0u);
  EXPECT_EQ(s.zero, 0u);
}

TEST(StatisticsTest, AnyNanMakesMaxMinAvgNan) {
  TensorStats s = statsOf(DType::kFloat32, std::vector<float>{1, kNanF, 3});
  EXPECT_TRUE(std::isnan(s.max));
  EXPECT_TRUE(std::isnan(s.min));
  EXPECT_TRUE(std::isnan(s.avg));
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.positive, 2u);
  EXPECT_EQ(s.negative, 0u);
  EXPECT_EQ(s.count, 3u);
}

TEST(StatisticsTest, InfinitiesJoinMaxMinAvg) {
  TensorStats s = statsOf(DType::kFloat32, std::vector<float>{1, kInfF, -kInfF, -2});
  EXPECT_EQ(s.max, kInf);
  EXPECT_EQ(s.min, -kInf);
  EXPECT_TRUE(std::isnan(s.avg));  // inf + -inf
  EXPECT_FALSE(std::signbit(s.avg));
  EXPECT_EQ(s.positive_inf, 1u);
  EXPECT_EQ(s.negative_inf, 1u);
  EXPECT_EQ(s.negative, 2u);
  EXPECT_EQ(s.positive, 2u);
  StatOptions ms27;
  ms27.format = config::MsFormat::k27;
  TensorStats t = statsOf(DType::kFloat32, std::vector<float>{kInfF, 1}, 0, ms27);
  EXPECT_EQ(t.avg, kInf);
  EXPECT_EQ(t.l2norm, kInf);
  // 2.6's running mean: inf, then 1 - inf = -inf added to inf.
  TensorStats u = statsOf(DType::kFloat32, std::vector<float>{kInfF, 1});
  EXPECT_TRUE(std::isnan(u.avg));
  EXPECT_EQ(u.l2norm, kInf);
}

TEST(StatisticsTest, ZeroCountIncludesNegativeZeroAndSignCountsAreStrict) {
  TensorStats s = statsOf(DType::kFloat32, std::vector<float>{0.0f, -0.0f, 1, -3});
  EXPECT_EQ(s.zero, 2u);
  EXPECT_EQ(s.negative, 1u);
  EXPECT_EQ(s.positive, 1u);
}

TEST(StatisticsTest, BoolCountsAsZeroOrOne) {
  TensorStats s = statsOf(DType::kBool, std::vector<uint8_t>{1, 0, 5});
  EXPECT_EQ(s.max, 1);
  EXPECT_EQ(s.min, 0);
  EXPECT_DOUBLE_EQ(s.avg, 2.0 / 3.0);
  EXPECT_EQ(s.positive, 2u);
  EXPECT_EQ(s.zero, 1u);
  EXPECT_DOUBLE_EQ(s.l2norm, std::sqrt(2.0));
}

TEST(StatisticsTest, BFloat16UsesConvertedValues) {
  // 1.5 = 0x3FC00000, -2 = 0xC0000000: bfloat16 keeps the upper halves.
  TensorStats s = statsOf(DType::kBFloat16, std::vector<uint16_t>{0x3FC0, 0xC000, 0x7FC0});
  EXPECT_EQ(s.nan, 1u);
  TensorStats t = statsOf(DType::kBFloat16, std::vector<uint16_t>{0x3FC0, 0xC000});
  EXPECT_EQ(t.max, 1.5);
  EXPECT_EQ(t.min, -2);
  EXPECT_DOUBLE_EQ(t.avg, -0.25);
}

TEST(StatisticsTest, Int4UsesLowNibbleFirstSignExtended) {
  // 0x7F -> -1, 7; 0x08 -> -8, 0
  TensorStats s = statsOf(DType::kInt4, std::vector<uint8_t>{0x7F, 0x08}, 4);
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.max, 7);
  EXPECT_EQ(s.min, -8);
  EXPECT_EQ(s.zero, 1u);
  EXPECT_EQ(s.negative, 2u);
  EXPECT_DOUBLE_EQ(s.avg, -0.5);
  // Odd count: the high nibble of the last byte is padding.
  TensorStats odd = statsOf(DType::kInt4, std::vector<uint8_t>{0x7F, 0x78}, 3);
  EXPECT_EQ(odd.count, 3u);
  EXPECT_EQ(odd.max, 7);
  EXPECT_EQ(odd.min, -8);
}

TEST(StatisticsTest, UInt1AndIntegerTypes) {
  TensorStats u1 = statsOf(DType::kUInt1, std::vector<uint8_t>{1, 0, 1, 1});
  EXPECT_EQ(u1.max, 1);
  EXPECT_DOUBLE_EQ(u1.avg, 0.75);
  TensorStats i64 = statsOf(DType::kInt64, std::vector<int64_t>{-(int64_t{1} << 40), 5});
  EXPECT_EQ(i64.min, -std::ldexp(1.0, 40));
  TensorStats u64 = statsOf(DType::kUInt64, std::vector<uint64_t>{~uint64_t{0}});
  EXPECT_EQ(u64.max, 18446744073709551615.0);
  TensorStats i8 = statsOf(DType::kInt8, std::vector<int8_t>{-128, 127});
  EXPECT_EQ(i8.min, -128);
  EXPECT_EQ(i8.max, 127);
  TensorStats u16 = statsOf(DType::kUInt16, std::vector<uint16_t>{65535, 1});
  EXPECT_EQ(u16.max, 65535);
}

TEST(StatisticsTest, ManyElementsExerciseLanesAndTail) {
  std::vector<double> v;
  for (int i = 0; i < 1003; ++i) v.push_back(i - 500);
  TensorStats s = statsOf(DType::kFloat64, v);
  EXPECT_EQ(s.max, 502);
  EXPECT_EQ(s.min, -500);
  EXPECT_DOUBLE_EQ(s.avg, 1.0);
  EXPECT_EQ(s.zero, 1u);
  EXPECT_EQ(s.negative, 500u);
  EXPECT_EQ(s.positive, 502u);
  double sq = 0;
  for (double x : v) sq += x * x;
  EXPECT_DOUBLE_EQ(s.l2norm, std::sqrt(sq));
}

double referenceHalf(uint16_t h) {
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : kInf;
  } else {
    v = std::ldexp(mant + 1024, exp - 25);
  }
  return (h & 0x8000) ? -v : v;
}

TEST(StatisticsTest, HalfToFloatIsExactForEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = halfToFloat(static_cast<uint16_t>(h));
    double want = referenceHalf(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      // The payload survives (numpy keeps it when widening as well).
      ASSERT_EQ(std::bit_cast<uint32_t>(f) & 0x7fffff, (h & 0x3ffu) << 13) << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    }
  }
}

TEST(StatisticsTest, Float16Statistics) {
  // 1, -2, 65504 (max half), 2^-24 (smallest subnormal)
  TensorStats s = statsOf(DType::kFloat16, std::vector<uint16_t>{0x3C00, 0xC000, 0x7BFF, 0x0001});
  EXPECT_EQ(s.max, 65504);
  EXPECT_EQ(s.min, -2);
  TensorStats inf = statsOf(DType::kFloat16, std::vector<uint16_t>{0x7C00, 0xFC00, 0x7E00});
  EXPECT_EQ(inf.positive_inf, 1u);
  EXPECT_EQ(inf.negative_inf, 1u);
  EXPECT_EQ(inf.nan, 1u);
}

TEST(StatisticsTest, Md5AndSha1AreOverRawBytes) {
  std::vector<uint8_t> abc = {'a', 'b', 'c'};
  StatOptions o;
  o.md5 = true;
  o.sha1 = true;
  TensorStats s = statsOf(DType::kUInt8, abc, 0, o);
  std::string md5, sha1;
  appendHex(md5, s.md5);
  appendHex(sha1, s.sha1);
  EXPECT_EQ(md5, "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(sha1, "a9993e364706816aba3e25717850c26c9cd0d89d");
}

TEST(StatisticsTest, ValuesCanBeSkippedForHashOnly) {
  StatOptions o;
  o.values = false;
  o.md5 = true;
  TensorStats s = statsOf(DType::kFloat32, std::vector<float>{1, 2}, 0, o);
  EXPECT_EQ(s.count, 2u);
  EXPECT_EQ(s.max, 0);  // untouched
}

TEST(StatisticsTest, ComplexHasNoStatistics) {
  EXPECT_FALSE(hasStatistics(DType::kComplex64));
  EXPECT_FALSE(hasStatistics(DType::kComplex128));
  EXPECT_TRUE(hasStatistics(DType::kBFloat16));
  EXPECT_TRUE(hasStatistics(DType::kInt4));
}

ConstBuffer bytesOf(const auto& v) {
  return ConstBuffer(reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(v[0]));
}

TEST(StatisticsTest, ContainsNonFiniteFindsInfAndNanAnywhere) {
  std::vector<float> big(10000, 1.0f);
  EXPECT_FALSE(containsNonFinite(DType::kFloat32, bytesOf(big)));
  big.back() = kNanF;
  EXPECT_TRUE(containsNonFinite(DType::kFloat32, bytesOf(big)));
  big.back() = -kInfF;
  EXPECT_TRUE(containsNonFinite(DType::kFloat32, bytesOf(big)));
  std::vector<double> d = {1, 2, kInf};
  EXPECT_TRUE(containsNonFinite(DType::kFloat64, bytesOf(d)));
  std::vector<uint16_t> h = {0x3C00, 0x7C00};
  EXPECT_TRUE(containsNonFinite(DType::kFloat16, bytesOf(h)));
  std::vector<uint16_t> hf = {0x3C00, 0x7BFF};
  EXPECT_FALSE(containsNonFinite(DType::kFloat16, bytesOf(hf)));
  std::vector<uint16_t> bf = {0x3F80, 0x7FC0};
  EXPECT_TRUE(containsNonFinite(DType::kBFloat16, bytesOf(bf)));
  std::vector<float> c64 = {1, 2, 3, kInfF};
  EXPECT_TRUE(containsNonFinite(DType::kComplex64, bytesOf(c64)));
  std::vector<int32_t> ints = {0x7f800000, -1};
  EXPECT_FALSE(containsNonFinite(DType::kInt32, bytesOf(ints)));
}

}  // namespace
}  // namespace dumpd::storage
