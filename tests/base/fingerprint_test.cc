// fingerprint: the digest follows the rule written in base/fingerprint.h (checked against a
// word-by-word reading of it here), the SIMD path equals the scalar one for every length and
// offset, pieces add up to the whole, and every single-bit flip changes the digest.
#include "base/fingerprint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <vector>

namespace dumpd {
namespace {

std::vector<std::byte> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::byte> out(n);
  for (std::byte& b : out) b = static_cast<std::byte>(gen() & 0xFF);
  return out;
}

// The header's rule, read literally: little-endian words, zero-padded, weights per index.
uint64_t byTheRule(const std::vector<std::byte>& bytes) {
  uint64_t s = 0;
  for (size_t i = 0; i * 4 < bytes.size(); ++i) {
    uint32_t w = 0;
    for (size_t b = 0; b < 4 && i * 4 + b < bytes.size(); ++b) {
      w |= static_cast<uint32_t>(bytes[i * 4 + b]) << (8 * b);
    }
    const uint32_t k =
        kFingerprintBase[i % 8] + static_cast<uint32_t>(i / 8) * kFingerprintStep[i % 8];
    s += static_cast<uint64_t>(w) * k;
  }
  uint64_t x = s ^ (static_cast<uint64_t>(bytes.size()) * kFingerprintLength);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

TEST(Fingerprint, FollowsTheRuleTheHeaderWrites) {
  for (size_t n : {0, 1, 3, 4, 5, 31, 32, 33, 127, 128, 129, 1000, 4099}) {
    const std::vector<std::byte> b = randomBytes(n, static_cast<uint32_t>(n));
    EXPECT_EQ(fingerprint(b), byTheRule(b)) << n << " bytes";
  }
}

TEST(Fingerprint, TheFastPathEqualsTheScalarOneForEveryLengthAndOffset) {
  const std::vector<std::byte> b = randomBytes(1 << 12, 7);
  for (size_t offset : {0, 1, 2, 3, 4, 7, 32}) {  // unaligned starts
    for (size_t n = 0; n + offset <= 700; ++n) {  // every length around the rounds
      const std::span<const std::byte> s(b.data() + offset, n);
      for (uint64_t first : {uint64_t{0}, uint64_t{8}, uint64_t{8} << 33}) {
        ASSERT_EQ(fingerprintSum(s, first), fingerprintSumScalar(s, first))
            << "offset " << offset << " length " << n << " first word " << first;
      }
    }
  }
}

TEST(Fingerprint, PiecesOfWholeBlocksAddUpToTheWhole) {
  const std::vector<std::byte> b = randomBytes(10000, 3);
  const std::span<const std::byte> all(b);
  for (size_t cut : {32, 64, 4096, 9984}) {
    const uint64_t sum = fingerprintSum(all.first(cut)) + fingerprintSum(all.subspan(cut), cut / 4);
    EXPECT_EQ(fingerprintFinish(sum, b.size()), fingerprint(all)) << "cut at " << cut;
  }
}

TEST(Fingerprint, EverySingleBitFlipChangesIt) {
  std::vector<std::byte> b = randomBytes(1027, 11);  // a partial last word too
  const uint64_t clean = fingerprint(b);
  std::set<uint64_t> seen{clean};
  for (size_t i = 0; i < b.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      b[i] ^= static_cast<std::byte>(1 << bit);
      const uint64_t flipped = fingerprint(b);
      ASSERT_NE(flipped, clean) << "byte " << i << " bit " << bit;
      seen.insert(flipped);
      b[i] ^= static_cast<std::byte>(1 << bit);
    }
  }
  EXPECT_EQ(seen.size(), 1 + 8 * b.size()) << "two single flips gave the same digest";
}

TEST(Fingerprint, TheLengthCountsEvenForZeroBytes) {
  const std::vector<std::byte> three(3, std::byte{0}), four(4, std::byte{0}),
      eight(8, std::byte{0});
  EXPECT_NE(fingerprint(three), fingerprint(four));
  EXPECT_NE(fingerprint(four), fingerprint(eight));
  EXPECT_NE(fingerprint({}), fingerprint(four));
}

TEST(Fingerprint, AFloatAndItsNegativeZeroDiffer) {
  // Replicas are compared bit for bit: +0.0 and -0.0 are different bytes.
  const float plus = 0.0f, minus = -0.0f;
  std::byte a[4], b[4];
  std::memcpy(a, &plus, 4);
  std::memcpy(b, &minus, 4);
  EXPECT_NE(fingerprint(a), fingerprint(b));
}

}  // namespace
}  // namespace dumpd
