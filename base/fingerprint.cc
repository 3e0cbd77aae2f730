#include "base/fingerprint.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dumpd {
namespace {

uint32_t loadWord(const std::byte* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);  // little-endian hosts only (x86-64, aarch64)
  return w;
}

// Words [first, first + count) of `p` (p points at word `first`), then the tail bytes.
uint64_t sumWords(const std::byte* p, uint64_t bytes, uint64_t first) {
  uint64_t s = 0;
  const uint64_t words = bytes / 4;
  for (uint64_t i = 0; i < words; ++i) {
    const uint64_t index = first + i;
    const uint32_t k = kFingerprintBase[index % 8] +
                       static_cast<uint32_t>(index / 8) * kFingerprintStep[index % 8];
    s += uint64_t{loadWord(p + 4 * i)} * k;
  }
  if (const uint64_t tail = bytes % 4; tail != 0) {
    std::byte last[4]{};
    std::memcpy(last, p + 4 * words, tail);
    const uint64_t index = first + words;
    const uint32_t k = kFingerprintBase[index % 8] +
                       static_cast<uint32_t>(index / 8) * kFingerprintStep[index % 8];
    s += uint64_t{loadWord(last)} * k;
  }
  return s;
}

#if defined(__x86_64__)
// The weighted words of one vector, in four 64-bit lanes: the even words multiplied in place
// (mul_epu32 reads the low half of each 64-bit lane), the odd ones after a shift.
__attribute__((target("avx2"), always_inline)) inline __m256i term(__m256i v, __m256i k) {
  const __m256i even = _mm256_mul_epu32(v, k);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(v, 32), _mm256_srli_epi64(k, 32));
  return _mm256_add_epi64(even, odd);
}

// 8 words a vector, four vectors a round (independent accumulators for the multipliers'
// latency); each lane's weight advances by its step every 8 words.
__attribute__((target("avx2"))) uint64_t sumAvx2(const std::byte* p, uint64_t bytes,
                                                 uint64_t first) {
  const uint64_t blocks = bytes / 32;
  const uint64_t rounds = blocks / 4;
  __m256i base;
  __m256i step;
  {
    alignas(32) uint32_t k[8];
    alignas(32) uint32_t st[8];
    for (int j = 0; j < 8; ++j) {
      k[j] = kFingerprintBase[j] + static_cast<uint32_t>(first / 8) * kFingerprintStep[j];
      st[j] = kFingerprintStep[j];
    }
    base = _mm256_load_si256(reinterpret_cast<const __m256i*>(k));
    step = _mm256_load_si256(reinterpret_cast<const __m256i*>(st));
  }
  __m256i k0 = base;
  __m256i k1 = _mm256_add_epi32(k0, step);
  __m256i k2 = _mm256_add_epi32(k1, step);
  __m256i k3 = _mm256_add_epi32(k2, step);
  const __m256i step4 = _mm256_slli_epi32(step, 2);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  const auto* v = reinterpret_cast<const __m256i*>(p);
  for (uint64_t r = 0; r < rounds; ++r, v += 4) {
    a0 = _mm256_add_epi64(a0, term(_mm256_loadu_si256(v), k0));
    a1 = _mm256_add_epi64(a1, term(_mm256_loadu_si256(v + 1), k1));
    a2 = _mm256_add_epi64(a2, term(_mm256_loadu_si256(v + 2), k2));
    a3 = _mm256_add_epi64(a3, term(_mm256_loadu_si256(v + 3), k3));
    k0 = _mm256_add_epi32(k0, step4);
    k1 = _mm256_add_epi32(k1, step4);
    k2 = _mm256_add_epi32(k2, step4);
    k3 = _mm256_add_epi32(k3, step4);
  }
  const __m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  const uint64_t done = rounds * 128;
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] +
         sumWords(p + done, bytes - done, first + done / 4);
}

bool hasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

}  // namespace

uint64_t fingerprintSumScalar(std::span<const std::byte> bytes, uint64_t first_word) {
  return sumWords(bytes.data(), bytes.size(), first_word);
}

uint64_t fingerprintSum(std::span<const std::byte> bytes, uint64_t first_word) {
#if defined(__x86_64__)
  if (hasAvx2()) return sumAvx2(bytes.data(), bytes.size(), first_word);
#endif
  return sumWords(bytes.data(), bytes.size(), first_word);
}

}  // namespace dumpd
