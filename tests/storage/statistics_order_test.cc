// computeStats as MindSpore's sequential loop computes it: sums in element order ("2.7" up to
// 20480 elements; the chunked and "2.6" rules are chunk_sums_test's), the first of
// equal extremes kept, SHA1 sliced above 20480 elements, int4 hashed unpacked, NaN poisoning.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "storage/format/statistics.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

constexpr float kNanF = std::numeric_limits<float>::quiet_NaN();
constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

using testing::statsOf;

StatOptions hashes() {
  StatOptions o;
  o.md5 = true;
  o.sha1 = true;
  return o;
}

// The test's own digest and hex, independent of the code under test.
std::string hexOf(const unsigned char* d, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s.push_back(kDigits[d[i] >> 4]);
    s.push_back(kDigits[d[i] & 0xf]);
  }
  return s;
}

std::string evpHex(const EVP_MD* md, const void* data, size_t size) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, md, nullptr) == 1 &&
            EVP_DigestUpdate(ctx, data, size) == 1 && EVP_DigestFinal_ex(ctx, d, &len) == 1;
  EVP_MD_CTX_free(ctx);
  EXPECT_TRUE(ok);
  return hexOf(d, len);
}

std::string sha1Hex(const void* data, size_t size) { return evpHex(EVP_sha1(), data, size); }
std::string md5Hex(const void* data, size_t size) { return evpHex(EVP_md5(), data, size); }

template <size_t N>
std::string hexOf(const std::array<unsigned char, N>& a) {
  return hexOf(a.data(), N);
}

// --- (a) sums in element order, double accumulators (2.7; 2.6 is chunk_sums_test's) ---

StatOptions inOrder() {
  StatOptions o;
  o.format = config::MsFormat::k27;  // one chain in element order up to 20480 elements
  return o;
}

TEST(StatisticsOrderTest, Float64SumIsSequentialSoLargeValuesCancelExactly) {
  std::vector<double> v = {1e16, 1, 1, 1, 1, 1, 1, 1, -1e16};
  TensorStats s = statsOf(DType::kFloat64, v, 0, inOrder());
  // Sequentially every 1 is lost against 1e16 (ulp 2); lanes or pairs would keep some.
  EXPECT_EQ(s.avg, 0.0);
  double sq = 0;
  for (double x : v) sq += x * x;
  EXPECT_EQ(s.l2norm, std::sqrt(sq));
  EXPECT_EQ(s.l2norm, std::sqrt(2e32));
}

TEST(StatisticsOrderTest, Float64SumIsSequentialAcrossManyBlocks) {
  // The pattern repeated past the 1024-element blocks: still one chain in element order.
  std::vector<double> v;
  for (int r = 0; r < 700; ++r) {
    v.insert(v.end(), {1e16, 1, 1, 1, 1, 1, 1, 1, -1e16});
  }
  TensorStats s = statsOf(DType::kFloat64, v, 0, inOrder());
  EXPECT_EQ(s.avg, 0.0);
  EXPECT_EQ(s.count, v.size());
}

// Deterministic values of widely spread magnitudes, so the order of additions shows.
std::vector<float> spreadFloats(size_t n) {
  std::vector<float> v(n);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int exponent = static_cast<int>((x >> 33) % 48) - 24;  // 2^-24 .. 2^23
    const float mantissa = 1.0f + static_cast<float>((x >> 40) & 0xffff) / 65536.0f;
    const float value = std::ldexp(mantissa, exponent);
    v[i] = (x >> 63) ? -value : value;
  }
  return v;
}

TEST(StatisticsOrderTest, Float32SumsMatchAPlainSequentialDoubleLoop) {
  const std::vector<float> v = spreadFloats(5003);
  double seq = 0, seq_sq = 0;
  for (float f : v) {
    seq += double{f};
    seq_sq += double{f} * double{f};
  }
  // Eight lanes, and pairwise: the data must tell them from the sequential loop.
  double lanes[8] = {}, lanes_sq[8] = {};
  for (size_t i = 0; i < v.size(); ++i) {
    lanes[i % 8] += double{v[i]};
    lanes_sq[i % 8] += double{v[i]} * double{v[i]};
  }
  double lane = 0, lane_sq = 0;
  for (int j = 0; j < 8; ++j) {
    lane += lanes[j];
    lane_sq += lanes_sq[j];
  }
  std::vector<double> pair(v.begin(), v.end());
  while (pair.size() > 1) {
    std::vector<double> next;
    for (size_t i = 0; i + 1 < pair.size(); i += 2) next.push_back(pair[i] + pair[i + 1]);
    if (pair.size() % 2) next.push_back(pair.back());
    pair.swap(next);
  }
  ASSERT_NE(seq, lane) << "test data does not discriminate";
  ASSERT_NE(seq, pair[0]) << "test data does not discriminate";
  ASSERT_NE(seq_sq, lane_sq) << "test data does not discriminate";

  TensorStats s = statsOf(DType::kFloat32, v, 0, inOrder());
  EXPECT_EQ(s.avg, seq / static_cast<double>(v.size()));
  EXPECT_EQ(s.l2norm, std::sqrt(seq_sq));
}

TEST(StatisticsOrderTest, Float32CancellationFollowsElementOrder) {
  // 2^30 + 2^-30 rounds back to 2^30 in double: sequentially only the final 2^-30 survives.
  const float big = std::ldexp(1.0f, 30);
  const float tiny = std::ldexp(1.0f, -30);
  std::vector<float> v = {big, tiny, tiny, tiny, tiny, tiny, tiny, tiny, -big, tiny};
  TensorStats s = statsOf(DType::kFloat32, v, 0, inOrder());
  EXPECT_EQ(s.avg, double{tiny} / 10);
}

// --- (b) the first of equal extremes (-0 or +0) in element order ---

TEST(StatisticsOrderTest, Float32NegativeZeroFirstIsTheMaxAndMin) {
  TensorStats s = statsOf(DType::kFloat32, std::vector<float>{-0.0f, 0.0f});
  EXPECT_EQ(s.max, 0.0);
  EXPECT_TRUE(std::signbit(s.max));
  EXPECT_EQ(s.min, 0.0);
  EXPECT_TRUE(std::signbit(s.min));
  EXPECT_EQ(s.zero, 2u);
  EXPECT_EQ(s.negative, 0u);
}

TEST(StatisticsOrderTest, Float32PositiveZeroFirstIsTheMaxAndMin) {
  TensorStats s = statsOf(DType::kFloat32, std::vector<float>{0.0f, -0.0f});
  EXPECT_EQ(s.max, 0.0);
  EXPECT_FALSE(std::signbit(s.max));
  EXPECT_EQ(s.min, 0.0);
  EXPECT_FALSE(std::signbit(s.min));
}

TEST(StatisticsOrderTest, Float32MaxZeroAfterANegativeKeepsTheFirstZero) {
  TensorStats s = statsOf(DType::kFloat32, std::vector<float>{-1.0f, 0.0f, -0.0f});
  EXPECT_EQ(s.max, 0.0);
  EXPECT_FALSE(std::signbit(s.max));
  EXPECT_EQ(s.min, -1.0);
  TensorStats t = statsOf(DType::kFloat32, std::vector<float>{-1.0f, -0.0f, 0.0f});
  EXPECT_EQ(t.max, 0.0);
  EXPECT_TRUE(std::signbit(t.max));
  // Min zero after positives: the first zero again.
  TensorStats u = statsOf(DType::kFloat32, std::vector<float>{2.0f, -0.0f, 0.0f, 3.0f});
  EXPECT_EQ(u.min, 0.0);
  EXPECT_TRUE(std::signbit(u.min));
  EXPECT_EQ(u.max, 3.0);
  // The first zero at index 7, the second at 8 (lane 0 of the next group of eight).
  std::vector<float> w = {1, 1, 1, 1, 1, 1, 1, -0.0f, 0.0f};
  TensorStats x = statsOf(DType::kFloat32, w);
  EXPECT_TRUE(std::signbit(x.min));
  w[7] = 0.0f;
  w[8] = -0.0f;
  TensorStats y = statsOf(DType::kFloat32, w);
  EXPECT_FALSE(std::signbit(y.min));
}

TEST(StatisticsOrderTest, Float16BFloat16Float64NegativeZeroFirst) {
  // -0 is 0x8000 in both 16-bit types.
  for (DType d : {DType::kFloat16, DType::kBFloat16}) {
    TensorStats s = statsOf(d, std::vector<uint16_t>{0x8000, 0x0000});
    EXPECT_EQ(s.max, 0.0) << dtypeName(d);
    EXPECT_TRUE(std::signbit(s.max)) << dtypeName(d);
    EXPECT_TRUE(std::signbit(s.min)) << dtypeName(d);
    TensorStats t = statsOf(d, std::vector<uint16_t>{0x0000, 0x8000});
    EXPECT_FALSE(std::signbit(t.max)) << dtypeName(d);
    EXPECT_FALSE(std::signbit(t.min)) << dtypeName(d);
  }
  TensorStats s = statsOf(DType::kFloat64, std::vector<double>{-0.0, 0.0});
  EXPECT_TRUE(std::signbit(s.max));
  EXPECT_TRUE(std::signbit(s.min));
  TensorStats t = statsOf(DType::kFloat64, std::vector<double>{-1.0, 0.0, -0.0});
  EXPECT_FALSE(std::signbit(t.max));
}

TEST(StatisticsOrderTest, FirstZeroFarIntoTheTensorDecides) {
  // Negatives everywhere but a -0 at 5007 and a +0 at 6000: max is the -0. (The later zero
  // sits at a multiple of 8, where a reduction over eight lanes would look first.)
  std::vector<float> neg(8000, -1.5f);
  neg[5007] = -0.0f;
  neg[6000] = 0.0f;
  TensorStats a = statsOf(DType::kFloat32, neg);
  EXPECT_EQ(a.max, 0.0);
  EXPECT_TRUE(std::signbit(a.max));
  EXPECT_EQ(a.zero, 2u);
  neg[5007] = 0.0f;
  neg[6000] = -0.0f;
  TensorStats b = statsOf(DType::kFloat32, neg);
  EXPECT_FALSE(std::signbit(b.max));
  // Positives: the min is the first zero.
  std::vector<float> pos(8000, 2.5f);
  pos[5003] = -0.0f;
  pos[7992] = 0.0f;
  TensorStats c = statsOf(DType::kFloat32, pos);
  EXPECT_EQ(c.min, 0.0);
  EXPECT_TRUE(std::signbit(c.min));
  // float16 past its 2048-element decode blocks: 0xBE00 is -1.5.
  std::vector<uint16_t> half(8000, 0xBE00);
  half[5001] = 0x8000;
  half[6144] = 0x0000;
  TensorStats h = statsOf(DType::kFloat16, half);
  EXPECT_EQ(h.max, 0.0);
  EXPECT_TRUE(std::signbit(h.max));
  EXPECT_EQ(h.min, -1.5);
}

// --- (c) SHA1: plain up to 20480 elements, sliced above ---

std::string slicedSha1(const std::vector<float>& v) {
  constexpr size_t kSlice = 20480;
  std::string hexes;
  for (size_t start = 0; start < v.size(); start += kSlice) {
    const size_t n = std::min(kSlice, v.size() - start);
    hexes += sha1Hex(v.data() + start, n * sizeof(float));
  }
  return sha1Hex(hexes.data(), hexes.size());
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.25f - 1000.0f;
  return v;
}

TEST(StatisticsOrderTest, Sha1IsPlainUpTo20480Elements) {
  std::vector<float> v = ramp(20480);
  TensorStats s = statsOf(DType::kFloat32, v, 0, hashes());
  EXPECT_EQ(hexOf(s.sha1), sha1Hex(v.data(), v.size() * sizeof(float)));
  EXPECT_EQ(hexOf(s.md5), md5Hex(v.data(), v.size() * sizeof(float)));
}

TEST(StatisticsOrderTest, Sha1Above20480ElementsIsOfTheSlicesHexDigests) {
  for (size_t n : {size_t{20481}, size_t{50000}, size_t{40960}}) {
    std::vector<float> v = ramp(n);
    TensorStats s = statsOf(DType::kFloat32, v, 0, hashes());
    const std::string plain = sha1Hex(v.data(), v.size() * sizeof(float));
    const std::string sliced = slicedSha1(v);
    ASSERT_NE(plain, sliced);
    EXPECT_EQ(hexOf(s.sha1), sliced) << n;
    // MD5 stays over the whole of the bytes.
    EXPECT_EQ(hexOf(s.md5), md5Hex(v.data(), v.size() * sizeof(float))) << n;
  }
}

TEST(StatisticsOrderTest, Sha1SlicesCountElementsNotBytes) {
  // float64: a slice is 20480 * 8 bytes.
  std::vector<double> v(20481);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) / 3;
  StatOptions o;
  o.sha1 = true;
  TensorStats s = statsOf(DType::kFloat64, v, 0, o);
  std::string hexes =
      sha1Hex(v.data(), 20480 * sizeof(double)) + sha1Hex(v.data() + 20480, sizeof(double));
  EXPECT_EQ(hexOf(s.sha1), sha1Hex(hexes.data(), hexes.size()));
}

// --- (d) int4 hashes cover the unpacked int8 values ---

TEST(StatisticsOrderTest, Int4HashesCoverUnpackedInt8Values) {
  // Low nibble first, sign-extended: 0x7F -> -1, 7; 0x08 -> -8, 0; 0x3A -> -6 (3 is padding).
  std::vector<uint8_t> packed = {0x7F, 0x08, 0x3A};
  const int8_t unpacked[5] = {-1, 7, -8, 0, -6};
  TensorStats s = statsOf(DType::kInt4, packed, 5, hashes());
  EXPECT_EQ(hexOf(s.md5), md5Hex(unpacked, sizeof unpacked));
  EXPECT_EQ(hexOf(s.sha1), sha1Hex(unpacked, sizeof unpacked));
  EXPECT_NE(hexOf(s.md5), md5Hex(packed.data(), packed.size()));
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.min, -8);
  EXPECT_EQ(s.max, 7);
}

TEST(StatisticsOrderTest, Int4Sha1SlicesTheUnpackedValues) {
  const size_t n = 20481 + 100;
  std::vector<uint8_t> packed((n + 1) / 2);
  std::vector<int8_t> unpacked(n);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t i = 0; i < n; ++i) {
    int nibble = (i % 2) ? packed[i / 2] >> 4 : packed[i / 2] & 0xf;
    unpacked[i] = static_cast<int8_t>(nibble >= 8 ? nibble - 16 : nibble);
  }
  TensorStats s = statsOf(DType::kInt4, packed, n, hashes());
  std::string hexes = sha1Hex(unpacked.data(), 20480) + sha1Hex(unpacked.data() + 20480, n - 20480);
  EXPECT_EQ(hexOf(s.sha1), sha1Hex(hexes.data(), hexes.size()));
  EXPECT_EQ(hexOf(s.md5), md5Hex(unpacked.data(), n));
}

// --- (e) NaN anywhere poisons max/min/avg/l2norm; the counts still count ---

TEST(StatisticsOrderTest, NanAnywhereMakesValueStatisticsNan) {
  for (size_t at : {size_t{0}, size_t{3}, size_t{1023}, size_t{1024}, size_t{2999}}) {
    std::vector<float> v(3000, 1.0f);
    v[1] = -2.0f;
    v[2] = 0.0f;
    v[5] = kInfF;
    v[6] = -kInfF;
    v[at] = kNanF;
    TensorStats s = statsOf(DType::kFloat32, v);
    EXPECT_TRUE(std::isnan(s.max)) << at;
    EXPECT_TRUE(std::isnan(s.min)) << at;
    EXPECT_TRUE(std::isnan(s.avg)) << at;
    EXPECT_TRUE(std::isnan(s.l2norm)) << at;
    EXPECT_EQ(s.count, 3000u);
    EXPECT_EQ(s.nan, 1u) << at;
    EXPECT_EQ(s.positive_inf, 1u);
    EXPECT_EQ(s.negative_inf, 1u);
    // The NaN replaced a 1: 2995 ones and +inf are > 0; -2 and -inf < 0.
    EXPECT_EQ(s.positive, 2996u) << at;
    EXPECT_EQ(s.negative, 2u) << at;
    EXPECT_EQ(s.zero, 1u) << at;
  }
}

TEST(StatisticsOrderTest, NanInEveryFloatingType) {
  TensorStats d = statsOf(DType::kFloat64, std::vector<double>{1, kNan, -3});
  TensorStats h = statsOf(DType::kFloat16, std::vector<uint16_t>{0x3C00, 0x7E00, 0xC200});
  TensorStats b = statsOf(DType::kBFloat16, std::vector<uint16_t>{0x3F80, 0x7FC0, 0xC040});
  for (const TensorStats* s : {&d, &h, &b}) {
    EXPECT_TRUE(std::isnan(s->max));
    EXPECT_TRUE(std::isnan(s->min));
    EXPECT_TRUE(std::isnan(s->avg));
    EXPECT_TRUE(std::isnan(s->l2norm));
    EXPECT_EQ(s->nan, 1u);
    EXPECT_EQ(s->positive, 1u);
    EXPECT_EQ(s->negative, 1u);
    EXPECT_EQ(s->count, 3u);
  }
  // A NaN next to zeros: the zero rule does not bring back a zero max/min.
  TensorStats z = statsOf(DType::kFloat32, std::vector<float>{-0.0f, kNanF, 0.0f});
  EXPECT_TRUE(std::isnan(z.max));
  EXPECT_TRUE(std::isnan(z.min));
  EXPECT_EQ(z.zero, 2u);
}

}  // namespace
}  // namespace dumpd::storage
