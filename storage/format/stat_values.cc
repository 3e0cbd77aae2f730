#include "storage/format/stat_values.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/dtype_visit.h"
#include "storage/format/convert.h"

namespace dumpd::storage {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// max, min and the counts have no rounding, so they run in independent lanes the compiler
// keeps in vector registers; the one thing lanes lose, which of two equal extremes came first
// (-0 or 0), is restored at the end (see firstZeroNegative). avg and l2norm are MindSpore's
// chunked sums (chunk_sums.h), a second pass.
constexpr int kLanes = 8;

struct Accumulator {
  double max[kLanes];
  double min[kLanes];
  uint64_t negative[kLanes];
  uint64_t positive[kLanes];
  uint64_t zero[kLanes];
  uint64_t nan[kLanes];
  uint64_t ninf[kLanes];
  uint64_t pinf[kLanes];
  // Unused for the statistics: GCC 12 vectorises the lane loop only with a floating-point
  // reduction in it (without this one the loop ran 2.5x slower, bench BM_Statistics).
  double lane_sum[kLanes];

  Accumulator() {
    for (int j = 0; j < kLanes; ++j) {
      max[j] = -kInf;
      min[j] = kInf;
      negative[j] = positive[j] = zero[j] = nan[j] = ninf[j] = pinf[j] = 0;
      lane_sum[j] = 0;
    }
  }
};

// kFloating: the type can hold NaN/inf (integers skip those tests).
template <bool kFloating>
inline void step(Accumulator& a, int j, double x) {
  // NaN compares false: it never replaces max/min; it is counted and applied at the end.
  a.max[j] = x > a.max[j] ? x : a.max[j];
  a.min[j] = x < a.min[j] ? x : a.min[j];
  a.negative[j] += x < 0;
  a.positive[j] += x > 0;
  a.zero[j] += x == 0;
  a.lane_sum[j] += x;
  if constexpr (kFloating) {
    a.nan[j] += x != x;
    a.ninf[j] += x == -kInf;
    a.pinf[j] += x == kInf;
  }
}

template <bool kFloating, typename Load>
void accumulate(uint64_t n, const Load& load, Accumulator& a) {
  uint64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) step<kFloating>(a, j, load(i + j));
  }
  for (; i < n; ++i) step<kFloating>(a, 0, load(i));
}

StatSums reduce(const Accumulator& a, uint64_t n) {
  StatSums s;
  s.count = n;
  for (int j = 0; j < kLanes; ++j) {
    s.max = a.max[j] > s.max ? a.max[j] : s.max;
    s.min = a.min[j] < s.min ? a.min[j] : s.min;
    s.nan += a.nan[j];
    s.negative += a.negative[j];
    s.positive += a.positive[j];
    s.zero += a.zero[j];
    s.negative_inf += a.ninf[j];
    s.positive_inf += a.pinf[j];
  }
  return s;
}

template <typename T, bool kFloating = false>
void accumulateAs(const unsigned char* p, uint64_t n, Accumulator& a) {
  accumulate<kFloating>(
      n, [p](uint64_t i) { return static_cast<double>(loadUnaligned<T>(p + i * sizeof(T))); }, a);
}

void accumulateValues(DType dtype, const unsigned char* p, uint64_t n, Accumulator& a) {
  visitDType(
      dtype,
      Overloaded{
          [&]<typename T>(DTypeTag<T>) { accumulateAs<T, std::is_floating_point_v<T>>(p, n, a); },
          [&](BoolTag) {
            accumulate<false>(
                n, [p](uint64_t i) { return p[i] != 0 ? 1.0 : 0.0; }, a);
          },
          [&](UInt1Tag) { accumulateAs<uint8_t>(p, n, a); },
          [&](Float16Tag) {
            // Decode a block into floats first: the decode loop vectorises on its own, fused
            // into the accumulation it does not.
            constexpr uint64_t kBlock = 2048;
            float block[kBlock];
            for (uint64_t start = 0; start < n; start += kBlock) {
              const uint64_t m = std::min(kBlock, n - start);
              const unsigned char* q = p + 2 * start;
              for (uint64_t i = 0; i < m; ++i) {
                block[i] = halfToFloat(loadUnaligned<uint16_t>(q + 2 * i));
              }
              accumulate<true>(
                  m, [&block](uint64_t i) { return double{block[i]}; }, a);
            }
          },
          [&](BFloat16Tag) {
            accumulate<true>(
                n,
                [p](uint64_t i) { return double{bf16ToFloat(loadUnaligned<uint16_t>(p + 2 * i))}; },
                a);
          },
          [&](Int4Tag) {
            accumulate<false>(
                n,
                [p](uint64_t i) {
                  uint8_t b = p[i >> 1];
                  return static_cast<double>((i & 1) ? int4High(b) : int4Low(b));
                },
                a);
          },
          []<typename T>(ComplexTag<T>) {},  // no statistics
          [](UnknownDType) {},
      });
}

// Whether the first zero of a floating tensor (in element order) is -0: the max or min that
// sequential code keeps when the extreme is zero. Stops at that zero.
template <typename U>
bool firstZeroNegative(const unsigned char* p, uint64_t n, U sign_bit) {
  for (uint64_t i = 0; i < n; ++i) {
    const U bits = loadUnaligned<U>(p + i * sizeof(U));
    if ((bits & static_cast<U>(~sign_bit)) == 0) return bits != 0;
  }
  return false;
}

bool firstZeroNegative(DType dtype, const unsigned char* p, uint64_t n) {
  return visitDType(
      dtype,
      Overloaded{
          [&](Float16Tag) { return firstZeroNegative<uint16_t>(p, n, 0x8000); },
          [&](BFloat16Tag) { return firstZeroNegative<uint16_t>(p, n, 0x8000); },
          [&](DTypeTag<float>) { return firstZeroNegative<uint32_t>(p, n, 0x80000000u); },
          [&](DTypeTag<double>) { return firstZeroNegative<uint64_t>(p, n, uint64_t{1} << 63); },
          [](auto) { return false; },  // integers and bool have one zero
      });
}

}  // namespace

StatSums computeValueStats(DType dtype, uint64_t elements, const unsigned char* p,
                           config::MsFormat format) {
  StatSums sums;
  RuleSums rule;
  if (auto one = onePassStats(format, dtype, p, elements)) {
    sums.count = elements;
    sums.max = one->max;
    sums.min = one->min;
    sums.negative = one->negative;
    sums.positive = one->positive;
    sums.zero = one->zero;
    rule = one->rule;
  } else {
    Accumulator a;
    accumulateValues(dtype, p, elements, a);
    sums = reduce(a, elements);
    // No element can overflow a running mean: the later chunks' means need not be computed.
    constexpr double kSafe = 0x1p1020;
    const bool finite = sums.nan == 0 && sums.negative_inf == 0 && sums.positive_inf == 0 &&
                        sums.max <= kSafe && sums.min >= -kSafe;
    rule = elements == 0 ? RuleSums{std::numeric_limits<double>::quiet_NaN(), 0}
                         : ruleSums(format, dtype, p, elements, finite);
  }
  if (sums.max == 0 || sums.min == 0) {
    const double zero = firstZeroNegative(dtype, p, elements) ? -0.0 : 0.0;
    if (sums.max == 0) sums.max = zero;
    if (sums.min == 0) sums.min = zero;
  }
  sums.sum = rule.avg;
  sums.sum_squares = rule.sum_squares;
  sums.sum_is_average = true;
  return sums;
}

}  // namespace dumpd::storage
