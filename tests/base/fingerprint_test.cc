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

namespace dumpd {
namespace {

// The device kernel's arithmetic (client/device_fingerprint.cu), run on the host: `grid`
// threads each sum whole 32-byte blocks with a grid stride (fingerprintBlockSum), the first
// threads add the tail's bytes (fingerprintByteTerm), and the thread sums are added in any
// order; an unaligned tensor is summed byte by byte. Both must give fingerprint().
uint64_t kernelModel(const std::vector<std::byte>& data, uint64_t grid, bool aligned) {
  const uint64_t bytes = data.size();
  std::vector<uint64_t> threads(grid, 0);
  if (aligned) {
    const uint64_t blocks = bytes / 32;
    for (uint64_t t = 0; t < grid; ++t) {
      for (uint64_t b = t; b < blocks; b += grid) {
        uint32_t w[8];
        std::memcpy(w, data.data() + 32 * b, 32);
        threads[t] += fingerprintBlockSum(w, b);
      }
    }
    for (uint64_t t = 0; t < bytes - blocks * 32; ++t) {  // the kernel: block 0's threads
      threads[t % grid] +=
          fingerprintByteTerm(static_cast<uint8_t>(data[blocks * 32 + t]), blocks * 32 + t);
    }
  } else {
    for (uint64_t t = 0; t < grid; ++t) {
      for (uint64_t o = t; o < bytes; o += grid) {
        threads[t] += fingerprintByteTerm(static_cast<uint8_t>(data[o]), o);
      }
    }
  }
  uint64_t sum = 0;
  for (auto it = threads.rbegin(); it != threads.rend(); ++it) sum += *it;  // any order
  return fingerprintFinish(sum, bytes);
}

TEST(DeviceFingerprintArithmetic, BlocksAndTailBytesGiveTheHostDigest) {
  std::mt19937_64 rng(51);
  for (const size_t n : {0, 1, 3, 31, 32, 33, 64, 100, 1000, 4096, 70001}) {
    std::vector<std::byte> data(n);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    const uint64_t want = fingerprint(data);
    for (const uint64_t grid : {1, 7, 256}) {
      EXPECT_EQ(kernelModel(data, grid, /*aligned=*/true), want) << n << " bytes, " << grid;
      EXPECT_EQ(kernelModel(data, grid, /*aligned=*/false), want) << n << " bytes, " << grid;
    }
  }
}

TEST(DeviceFingerprintArithmetic, TheSharedRuleIsTheHeadersRule) {
  for (unsigned j = 0; j < 8; ++j) {
    EXPECT_EQ(fingerprintWeight(j), kFingerprintBase[j]);
    EXPECT_EQ(fingerprintWeight(8 + j), kFingerprintBase[j] + kFingerprintStep[j]);
  }
  // Byte 6 is the third byte of word 1: its value lands at bit 16, weighted by k_1.
  EXPECT_EQ(fingerprintByteTerm(0xAB, 6), (uint64_t{0xAB} << 16) * kFingerprintBase[1]);
}

}  // namespace
}  // namespace dumpd
