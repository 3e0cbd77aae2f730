#include "storage/format/stat_lanes.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <cstring>

namespace dumpd::storage {

#if defined(__x86_64__)
namespace {

#define DUMPD_AVX2 __attribute__((target("avx2,f16c")))

template <LaneType T>
DUMPD_AVX2 inline __m256 load8(const unsigned char* p, uint64_t i) {
  if constexpr (T == LaneType::kFloat32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p + 4 * i));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
    if constexpr (T == LaneType::kFloat16) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

template <LaneType T>
DUMPD_AVX2 inline float load1(const unsigned char* p, uint64_t i) {
  if constexpr (T == LaneType::kFloat32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    if constexpr (T == LaneType::kFloat16) {
      return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
    } else {
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
  }
}

// r[j] holds 8 elements of chunk j; afterwards r[t] holds element t of chunks 0..7.
DUMPD_AVX2 inline void transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);
  const __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
  const __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]);
  const __m256 t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]);
  const __m256 t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44);
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44);
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44);
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44);
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

struct Lanes {
  __m256 max;
  __m256 min;
  __m256i negative;  // per lane, minus the count (compare masks are -1)
  __m256i positive;
  __m256i special;  // exponent bits all set somewhere: NaN or inf
  __m256d sum_lo, sum_hi, sq_lo, sq_hi;
};

// One element of each of the eight chunks, in their element order.
DUMPD_AVX2 inline void step(Lanes& a, __m256 x) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256i exponent = _mm256_set1_epi32(0x7f800000);
  a.max = _mm256_max_ps(x, a.max);
  a.min = _mm256_min_ps(x, a.min);
  a.negative =
      _mm256_add_epi32(a.negative, _mm256_castps_si256(_mm256_cmp_ps(x, zero, _CMP_LT_OQ)));
  a.positive =
      _mm256_add_epi32(a.positive, _mm256_castps_si256(_mm256_cmp_ps(x, zero, _CMP_GT_OQ)));
  const __m256i e = _mm256_and_si256(_mm256_castps_si256(x), exponent);
  a.special = _mm256_or_si256(a.special, _mm256_cmpeq_epi32(e, exponent));
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
  // A product, then a sum: two roundings, as MindSpore's loop (no FMA).
  a.sum_lo = _mm256_add_pd(a.sum_lo, lo);
  a.sum_hi = _mm256_add_pd(a.sum_hi, hi);
  a.sq_lo = _mm256_add_pd(a.sq_lo, _mm256_mul_pd(lo, lo));
  a.sq_hi = _mm256_add_pd(a.sq_hi, _mm256_mul_pd(hi, hi));
}

template <LaneType T>
DUMPD_AVX2 inline void advance(const unsigned char* p, RunningMean& m, uint64_t steps) {
  double mean = m.mean;
  uint64_t count = m.count;
  const uint64_t stop = m.next + steps < m.end ? m.next + steps : m.end;
  for (uint64_t i = m.next; i < stop; ++i) {
    ++count;
    mean += (static_cast<double>(load1<T>(p, i)) - mean) / static_cast<double>(count);
  }
  m.mean = mean;
  m.count = count;
  m.next = stop;
}

DUMPD_AVX2 inline uint64_t laneTotal(__m256i minus_counts) {
  alignas(32) int32_t v[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), minus_counts);
  uint64_t total = 0;
  for (int32_t x : v) total += static_cast<uint64_t>(-static_cast<int64_t>(x));
  return total;
}

template <LaneType T>
DUMPD_AVX2 LaneCounts run(const unsigned char* p, uint64_t size, uint64_t groups, double* sums,
                          double* squares, RunningMean* mean) {
  Lanes a;
  a.max = _mm256_set1_ps(-__builtin_inff());
  a.min = _mm256_set1_ps(__builtin_inff());
  a.special = _mm256_setzero_si256();
  LaneCounts out;
  const uint64_t mean_steps = (8 + groups - 1) / groups;
  for (uint64_t g = 0; g < groups; ++g) {
    a.negative = a.positive = _mm256_setzero_si256();
    a.sum_lo = a.sum_hi = a.sq_lo = a.sq_hi = _mm256_setzero_pd();
    uint64_t first[8];
    for (int j = 0; j < 8; ++j) first[j] = (g * 8 + j) * size;
    uint64_t i = 0;
    for (; i + 8 <= size; i += 8) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = load8<T>(p, first[j] + i);
      transpose8(r);
      for (int t = 0; t < 8; ++t) step(a, r[t]);
      if (mean != nullptr) advance<T>(p, *mean, mean_steps);
    }
    for (; i < size; ++i) {
      alignas(32) float x[8];
      for (int j = 0; j < 8; ++j) x[j] = load1<T>(p, first[j] + i);
      step(a, _mm256_load_ps(x));
    }
    _mm256_storeu_pd(sums + 8 * g, a.sum_lo);
    _mm256_storeu_pd(sums + 8 * g + 4, a.sum_hi);
    _mm256_storeu_pd(squares + 8 * g, a.sq_lo);
    _mm256_storeu_pd(squares + 8 * g + 4, a.sq_hi);
    out.negative += laneTotal(a.negative);
    out.positive += laneTotal(a.positive);
  }
  if (mean != nullptr) advance<T>(p, *mean, mean->end - mean->next);
  alignas(32) float mx[8];
  alignas(32) float mn[8];
  _mm256_store_ps(mx, a.max);
  _mm256_store_ps(mn, a.min);
  out.max = mx[0];
  out.min = mn[0];
  for (int j = 1; j < 8; ++j) {
    out.max = mx[j] > out.max ? mx[j] : out.max;
    out.min = mn[j] < out.min ? mn[j] : out.min;
  }
  out.non_finite = !_mm256_testz_si256(a.special, a.special);
  return out;
}

}  // namespace

bool lanePassAvailable() {
  // F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know "f16c").
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) != 0 &&
           (c & bit_F16C) != 0;
  }();
  return ok;
}

LaneCounts lanePass(LaneType type, const unsigned char* data, uint64_t size, uint64_t groups,
                    double* sums, double* squares, RunningMean* mean) {
  switch (type) {
    case LaneType::kFloat32:
      return run<LaneType::kFloat32>(data, size, groups, sums, squares, mean);
    case LaneType::kBFloat16:
      return run<LaneType::kBFloat16>(data, size, groups, sums, squares, mean);
    case LaneType::kFloat16:
      return run<LaneType::kFloat16>(data, size, groups, sums, squares, mean);
  }
  return {};
}

#else

bool lanePassAvailable() { return false; }

LaneCounts lanePass(LaneType, const unsigned char*, uint64_t, uint64_t, double*, double*,
                    RunningMean*) {
  return {};
}

#endif

}  // namespace dumpd::storage
