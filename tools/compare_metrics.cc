#include "tools/compare_metrics.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace dumpd::tools {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Vectors of doubles through GCC's vector extensions: the loops below become vector code
// without -ffast-math (a plain running sum would need reordering into lanes). The kernels are
// templates over the width: two lanes (SSE2 / NEON, every build) and, on x86-64, four lanes
// compiled for AVX2 + FMA and chosen at run time when the CPU has them.
//
// Every function taking or returning a vector is internal and inlined into its caller, so no
// call crosses the ABI that -Wpsabi warns about (the warning fires at the end of the file, so it
// is silenced for the whole file).
#pragma GCC diagnostic ignored "-Wpsabi"
struct Lanes2 {
  typedef double V __attribute__((vector_size(16)));
  typedef uint64_t U __attribute__((vector_size(16)));
  static constexpr size_t kW = 2;
};
struct Lanes4 {
  typedef double V __attribute__((vector_size(32)));
  typedef uint64_t U __attribute__((vector_size(32)));
  static constexpr size_t kW = 4;
};

#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__)
#define DUMPD_AVX2_KERNELS 1
#endif
#define DUMPD_INLINE [[gnu::always_inline]] inline

// relaxed: a test switch, set before the kernels run.
std::atomic<bool> baseline_only{false};

template <typename L>
DUMPD_INLINE typename L::V load(const double* p) {
  typename L::V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename L>
DUMPD_INLINE typename L::V splat(double v) {
  return typename L::V{} + v;
}
template <typename L>
DUMPD_INLINE typename L::V vabs(const typename L::V& v) {
  using V = typename L::V;
  using U = typename L::U;
  return reinterpret_cast<V>(reinterpret_cast<U>(v) & (~0ull >> 1));
}
template <typename V>
DUMPD_INLINE V vmin(const V& a, const V& b) {
  return a < b ? a : b;
}
template <typename V>
DUMPD_INLINE V vmax(const V& a, const V& b) {
  return a > b ? a : b;
}
template <typename L>
DUMPD_INLINE double hsum(const typename L::V& v) {
  double s = v[0];
  for (size_t i = 1; i < L::kW; ++i) s += v[i];
  return s;
}
template <typename L>
DUMPD_INLINE double hmin(const typename L::V& v) {
  double s = v[0];
  for (size_t i = 1; i < L::kW; ++i) s = std::min(s, v[i]);
  return s;
}
template <typename L>
DUMPD_INLINE double hmax(const typename L::V& v) {
  double s = v[0];
  for (size_t i = 1; i < L::kW; ++i) s = std::max(s, v[i]);
  return s;
}

double minOf(double a, double b) { return a < b ? a : b; }
double maxOf(double a, double b) { return a > b ? a : b; }

// Moves the pairs with both values finite to the front; counts the others. Returns how many
// were kept.
size_t compactFinite(double* x, double* y, size_t n, uint64_t* equal, uint64_t* differ) {
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const double a = x[i], b = y[i];
    if (std::isfinite(a) && std::isfinite(b)) {
      x[kept] = a;
      y[kept] = b;
      ++kept;
    } else if ((std::isnan(a) && std::isnan(b)) || a == b) {  // a == b: the same infinity
      if (equal != nullptr) ++*equal;
    } else if (differ != nullptr) {
      ++*differ;
    }
  }
  return kept;
}

// Pass 1, loop A: the sums and extremes that need no mean. Any NaN or infinity makes sum x or
// sum y non-finite, which the caller checks.
struct BlockA {
  double sx, sy, sxy, sxx, syy, min_x, max_x, min_y, max_y;
};
template <typename L>
DUMPD_INLINE BlockA loopA(const double* x, const double* y, size_t n) {
  using V = typename L::V;
  V sx = {}, sy = {}, sxy = {}, sxx = {}, syy = {};
  V mnx = splat<L>(kInf), mny = splat<L>(kInf), mxx = splat<L>(-kInf), mxy = splat<L>(-kInf);
  size_t i = 0;
  for (; i + L::kW <= n; i += L::kW) {
    const V a = load<L>(x + i), b = load<L>(y + i);
    sx += a;
    sy += b;
    sxy += a * b;
    sxx += a * a;
    syy += b * b;
    mnx = vmin(a, mnx);
    mxx = vmax(a, mxx);
    mny = vmin(b, mny);
    mxy = vmax(b, mxy);
  }
  BlockA r{hsum<L>(sx),  hsum<L>(sy),  hsum<L>(sxy), hsum<L>(sxx), hsum<L>(syy),
           hmin<L>(mnx), hmax<L>(mxx), hmin<L>(mny), hmax<L>(mxy)};
  for (; i < n; ++i) {
    const double a = x[i], b = y[i];
    r.sx += a;
    r.sy += b;
    r.sxy += a * b;
    r.sxx += a * a;
    r.syy += b * b;
    r.min_x = minOf(a, r.min_x);
    r.max_x = maxOf(a, r.max_x);
    r.min_y = minOf(b, r.min_y);
    r.max_y = maxOf(b, r.max_y);
  }
  return r;
}

// Pass 1, loop B: the difference sums and the squared deviations from the block's means.
struct BlockB {
  double sad, ssd, mad, say, qx, qy;
};
template <typename L>
DUMPD_INLINE BlockB loopB(const double* x, const double* y, size_t n, double mean_x,
                          double mean_y) {
  using V = typename L::V;
  V sad = {}, ssd = {}, mad = {}, say = {}, qx = {}, qy = {};
  const V mx = splat<L>(mean_x), my = splat<L>(mean_y);
  size_t i = 0;
  for (; i + L::kW <= n; i += L::kW) {
    const V a = load<L>(x + i), b = load<L>(y + i);
    const V d = a - b, ad = vabs<L>(d), da = a - mx, db = b - my;
    sad += ad;
    ssd += d * d;
    mad = vmax(ad, mad);
    say += vabs<L>(b);
    qx += da * da;
    qy += db * db;
  }
  BlockB r{hsum<L>(sad), hsum<L>(ssd), hmax<L>(mad), hsum<L>(say), hsum<L>(qx), hsum<L>(qy)};
  for (; i < n; ++i) {
    const double a = x[i], b = y[i];
    const double d = a - b, da = a - mean_x, db = b - mean_y;
    r.sad += std::fabs(d);
    r.ssd += d * d;
    r.mad = maxOf(std::fabs(d), r.mad);
    r.say += std::fabs(b);
    r.qx += da * da;
    r.qy += db * db;
  }
  return r;
}

// log(x) for normal positive finite x: x = 2^e * m with m in [sqrt(1/2), sqrt(2)), f = m - 1
// (exact), s = f / (2 + f), log(1 + f) = 2 atanh(s) = f - (f^2/2 - s (f^2/2 + R(s^2))) with
// R(z) = sum_{k>=1} 2 z^k / (2k + 1), nine terms (|s| <= 0.1716: the tenth is below 2^-56 of
// the result). Branch-free; written once for vectors, the scalar form uses lane 0.
template <typename L>
DUMPD_INLINE typename L::V logPositive(const typename L::V& x) {
  using V = typename L::V;
  const auto bits = reinterpret_cast<typename L::U>(x);
  // The biased exponent as a double without an int -> double conversion (SSE2 has none).
  V e = reinterpret_cast<V>((bits >> 52) | 0x4330000000000000ull) - splat<L>(0x1p52 + 1023.0);
  V m = reinterpret_cast<V>((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
  const auto high = m > splat<L>(1.4142135623730951);
  m = high ? m * 0.5 : m;
  e = high ? e + 1.0 : e;
  const V f = m - 1.0;
  const V s = f / (2.0 + f);
  const V z = s * s;
  // Estrin's scheme: a short dependency chain, so successive elements overlap.
  const V z2 = z * z, z4 = z2 * z2;
  const V p01 = 2.0 / 3 + z * (2.0 / 5), p23 = 2.0 / 7 + z * (2.0 / 9);
  const V p45 = 2.0 / 11 + z * (2.0 / 13), p67 = 2.0 / 15 + z * (2.0 / 17);
  const V p03 = p01 + z2 * p23, p47 = p45 + z2 * p67;
  const V r = z * (p03 + z4 * (p47 + z4 * (2.0 / 19)));
  const V hfsq = 0.5 * f * f;
  // ln 2 split so that e * kLn2Hi is exact for |e| < 2^20.
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  return e * kLn2Hi + ((f - (hfsq - s * (hfsq + r))) + e * kLn2Lo);
}

template <typename L>
DUMPD_INLINE void pairsWith(double* x, double* y, size_t n, PairSums& sums) {
  PairSums block;
  BlockA a = loopA<L>(x, y, n);
  if (!std::isfinite(a.sx) || !std::isfinite(a.sy)) {
    // Rare: some value is NaN or infinite. Leave those pairs out and sum the rest.
    n = compactFinite(x, y, n, &block.nonfinite_equal, &block.nonfinite_differ);
    a = loopA<L>(x, y, n);
  }
  if (n > 0) {
    const double dn = static_cast<double>(n);
    block.counted = n;
    block.mean_x = a.sx / dn;
    block.mean_y = a.sy / dn;
    const BlockB b = loopB<L>(x, y, n, block.mean_x, block.mean_y);
    block.sum_xy = a.sxy;
    block.sum_xx = a.sxx;
    block.sum_yy = a.syy;
    block.min_x = a.min_x;
    block.max_x = a.max_x;
    block.min_y = a.min_y;
    block.max_y = a.max_y;
    block.sum_abs_diff = b.sad;
    block.sum_sq_diff = b.ssd;
    block.max_abs_diff = b.mad;
    block.sum_abs_y = b.say;
    block.m2_x = b.qx;
    block.m2_y = b.qy;
  }
  sums.merge(block);
}

template <typename L>
DUMPD_INLINE void klWith(const KlScale& k, double* x, double* y, size_t n, KlSums& sums) {
  using V = typename L::V;
  if (k.skip_nonfinite) n = compactFinite(x, y, n, nullptr, nullptr);
  // A constant side has inv_range 0 and offset 1: all ones.
  const double off_x = k.inv_range_x == 0 ? 1.0 : 0.0;
  const double off_y = k.inv_range_y == 0 ? 1.0 : 0.0;
  const V eps = splat<L>(kKlEpsilon);
  V sa = {}, sb = {}, sl = {};
  size_t i = 0;
  for (; i + L::kW <= n; i += L::kW) {
    const V a = vmax((load<L>(x + i) - k.min_x) * k.inv_range_x + off_x, eps);
    const V b = vmax((load<L>(y + i) - k.min_y) * k.inv_range_y + off_y, eps);
    sa += a;
    sb += b;
    sl += a * logPositive<L>(a / b);
  }
  double ta = hsum<L>(sa), tb = hsum<L>(sb), tl = hsum<L>(sl);
  for (; i < n; ++i) {  // the last few
    const double a = maxOf((x[i] - k.min_x) * k.inv_range_x + off_x, kKlEpsilon);
    const double b = maxOf((y[i] - k.min_y) * k.inv_range_y + off_y, kKlEpsilon);
    ta += a;
    tb += b;
    tl += a * logPositive<Lanes2>(splat<Lanes2>(a / b))[0];
  }
  sums.sum_a += ta;
  sums.sum_b += tb;
  sums.sum_a_log += tl;
}

#ifdef DUMPD_AVX2_KERNELS
bool avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && !baseline_only.load(std::memory_order_relaxed);
}
__attribute__((target("avx2,fma"))) void pairsAvx2(double* x, double* y, size_t n, PairSums& sums) {
  pairsWith<Lanes4>(x, y, n, sums);
}
__attribute__((target("avx2,fma"))) void klAvx2(const KlScale& k, double* x, double* y, size_t n,
                                                KlSums& sums) {
  klWith<Lanes4>(k, x, y, n, sums);
}
#endif

}  // namespace

void PairSums::merge(const PairSums& o) {
  nonfinite_equal += o.nonfinite_equal;
  nonfinite_differ += o.nonfinite_differ;
  if (o.counted == 0) return;
  const uint64_t total = counted + o.counted;
  const double share = static_cast<double>(o.counted) / static_cast<double>(total);
  const double cross = static_cast<double>(counted) * share;  // counted * o.counted / total
  const double dx = o.mean_x - mean_x, dy = o.mean_y - mean_y;
  mean_x += dx * share;
  mean_y += dy * share;
  m2_x += o.m2_x + dx * dx * cross;
  m2_y += o.m2_y + dy * dy * cross;
  counted = total;
  sum_xy += o.sum_xy;
  sum_xx += o.sum_xx;
  sum_yy += o.sum_yy;
  sum_abs_diff += o.sum_abs_diff;
  sum_sq_diff += o.sum_sq_diff;
  sum_abs_y += o.sum_abs_y;
  max_abs_diff = std::max(max_abs_diff, o.max_abs_diff);
  min_x = std::min(min_x, o.min_x);
  max_x = std::max(max_x, o.max_x);
  min_y = std::min(min_y, o.min_y);
  max_y = std::max(max_y, o.max_y);
}

void accumulatePairs(double* x, double* y, size_t n, PairSums& sums) {
#ifdef DUMPD_AVX2_KERNELS
  if (avx2()) return pairsAvx2(x, y, n, sums);
#endif
  pairsWith<Lanes2>(x, y, n, sums);
}

KlScale klScale(const PairSums& sums) {
  KlScale k;
  const bool zeros_x = sums.min_x == 0 && sums.max_x == 0;
  const bool zeros_y = sums.min_y == 0 && sums.max_y == 0;
  k.defined = sums.counted > 0 && !zeros_x && !zeros_y;
  k.skip_nonfinite = sums.nonfinite_equal + sums.nonfinite_differ > 0;
  k.min_x = sums.min_x;
  k.min_y = sums.min_y;
  // A constant side: inv_range 0, and accumulateKl adds 1 (all ones).
  k.inv_range_x = sums.max_x > sums.min_x ? 1.0 / (sums.max_x - sums.min_x) : 0.0;
  k.inv_range_y = sums.max_y > sums.min_y ? 1.0 / (sums.max_y - sums.min_y) : 0.0;
  return k;
}

void KlSums::merge(const KlSums& o) {
  sum_a += o.sum_a;
  sum_b += o.sum_b;
  sum_a_log += o.sum_a_log;
}

void accumulateKl(const KlScale& k, double* x, double* y, size_t n, KlSums& sums) {
#ifdef DUMPD_AVX2_KERNELS
  if (avx2()) return klAvx2(k, x, y, n, sums);
#endif
  klWith<Lanes2>(k, x, y, n, sums);
}

PairMetrics finishMetrics(const PairSums& s, const KlScale& scale, const KlSums& kl) {
  PairMetrics m;
  if (s.counted == 0) return nanMetrics();
  const double n = static_cast<double>(s.counted);
  // sqrt(a * b) keeps identical sides at exactly 1 (sqrt(s * s) == s); the split form only
  // where the product would overflow or underflow.
  const double product = s.sum_xx * s.sum_yy;
  m.cosine = std::isnormal(product) ? s.sum_xy / std::sqrt(product)
                                    : s.sum_xy / (std::sqrt(s.sum_xx) * std::sqrt(s.sum_yy));
  if (!std::isnan(m.cosine)) m.cosine = std::clamp(m.cosine, -1.0, 1.0);
  m.max_absolute_error = s.max_abs_diff;
  m.accumulated_relative_error = s.sum_abs_diff / s.sum_abs_y;
  m.relative_euclidean = std::sqrt(s.sum_sq_diff) / std::sqrt(s.sum_yy);
  m.kl_divergence = scale.defined ? kl.sum_a_log / kl.sum_a + std::log(kl.sum_b / kl.sum_a) : kNaN;
  m.left_mean = s.mean_x;
  m.left_std = std::sqrt(s.m2_x / n);
  m.right_mean = s.mean_y;
  m.right_std = std::sqrt(s.m2_y / n);
  m.mean_absolute_error = s.sum_abs_diff / n;
  m.root_mean_square_error = std::sqrt(s.sum_sq_diff / n);
  return m;
}

PairSums sumPairs(const TensorData& x, const TensorData& y, uint64_t begin, uint64_t end) {
  alignas(64) double bx[kMetricBlock];
  alignas(64) double by[kMetricBlock];
  PairSums sums;
  for (uint64_t at = begin; at < end; at += kMetricBlock) {
    const auto n = static_cast<size_t>(std::min<uint64_t>(kMetricBlock, end - at));
    x.decode(at, n, bx);
    y.decode(at, n, by);
    accumulatePairs(bx, by, n, sums);
  }
  return sums;
}

KlSums sumKl(const KlScale& scale, const TensorData& x, const TensorData& y, uint64_t begin,
             uint64_t end) {
  alignas(64) double bx[kMetricBlock];
  alignas(64) double by[kMetricBlock];
  KlSums sums;
  for (uint64_t at = begin; at < end; at += kMetricBlock) {
    const auto n = static_cast<size_t>(std::min<uint64_t>(kMetricBlock, end - at));
    x.decode(at, n, bx);
    y.decode(at, n, by);
    accumulateKl(scale, bx, by, n, sums);
  }
  return sums;
}

PairMetrics comparePair(const TensorData& x, const TensorData& y, PairSums* sums_out) {
  const uint64_t n = std::min(x.values(), y.values());
  const PairSums sums = sumPairs(x, y, 0, n);
  const KlScale scale = klScale(sums);
  const KlSums kl = scale.defined ? sumKl(scale, x, y, 0, n) : KlSums{};
  if (sums_out != nullptr) *sums_out = sums;
  return finishMetrics(sums, scale, kl);
}

double vectorLog(double x) { return logPositive<Lanes2>(splat<Lanes2>(x))[0]; }

void useBaselineKernels(bool yes) { baseline_only.store(yes, std::memory_order_relaxed); }

}  // namespace dumpd::tools
