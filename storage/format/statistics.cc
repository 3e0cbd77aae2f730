#include "storage/format/statistics.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype_visit.h"
#include "storage/format/chunk_sums.h"
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

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

void digest(const EVP_MD* md, ConstBuffer data, unsigned char* out) {
  thread_local std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  unsigned int len = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), out, &len) != 1) {
    // Only an allocation failure inside libcrypto gets here: a broken invariant.
    std::abort();
  }
}

const EVP_MD* md5() {
  // Fetched once: the implicit fetch of EVP_md5() costs a provider lookup per call.
  static const EVP_MD* md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "MD5", nullptr);
    return fetched ? fetched : EVP_md5();
  }();
  return md;
}

const EVP_MD* sha1() {
  static const EVP_MD* md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA1", nullptr);
    return fetched ? fetched : EVP_sha1();
  }();
  return md;
}

// SHA1 as MindSpore's newer writer takes it: of the bytes for up to kSha1SliceElements
// elements; above that, of the concatenated lower-case hex SHA1s of each slice of that many
// elements (the last one shorter).
constexpr uint64_t kSha1SliceElements = 20480;

void slicedSha1(ConstBuffer data, uint64_t elements, unsigned char* out) {
  if (elements <= kSha1SliceElements) {
    digest(sha1(), data, out);
    return;
  }
  const uint64_t slice_bytes = data.size() / elements * kSha1SliceElements;
  thread_local std::string hexes;
  hexes.clear();
  unsigned char d[20];
  for (uint64_t off = 0; off < data.size(); off += slice_bytes) {
    digest(sha1(), data.subspan(off, std::min<uint64_t>(slice_bytes, data.size() - off)), d);
    appendHex(hexes, d);
  }
  digest(sha1(), asBytes(hexes), out);
}

// The flight recorder runs this over every kept byte, on the session thread, competing with
// training for the CPU: it must run at the cache's read rate. The accumulator has the
// element's width so that the loop vectorises (a bool one stays scalar: 8 GB/s against 25
// with SSE2, 40-60 with AVX2, on 16 MiB of float32 here).
template <typename U>
inline bool anyNonFiniteLoop(const unsigned char* p, uint64_t n, U exponent_mask) {
  constexpr uint64_t kChunk = 4096;
  for (uint64_t start = 0; start < n; start += kChunk) {
    const uint64_t end = start + kChunk < n ? start + kChunk : n;
    U found = 0;
    for (uint64_t i = start; i < end; ++i) {
      found |= (loadUnaligned<U>(p + i * sizeof(U)) & exponent_mask) == exponent_mask ? U{1} : U{0};
    }
    if (found != 0) return true;
  }
  return false;
}

#if defined(__x86_64__)
template <typename U>
__attribute__((target("avx2"))) bool anyNonFiniteAvx2(const unsigned char* p, uint64_t n,
                                                      U exponent_mask) {
  return anyNonFiniteLoop<U>(p, n, exponent_mask);
}

bool hasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

template <typename U>
bool anyNonFinite(const unsigned char* p, uint64_t n, U exponent_mask) {
#if defined(__x86_64__)
  if (hasAvx2()) return anyNonFiniteAvx2<U>(p, n, exponent_mask);
#endif
  return anyNonFiniteLoop<U>(p, n, exponent_mask);
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

// out's values from s's counts and extremes and the given average and sum of squares.
void finishStats(const StatSums& s, double avg, double sum_squares, TensorStats& out) {
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  const bool nan = s.nan != 0;
  out.count = s.count;
  out.negative = s.negative;
  out.positive = s.positive;
  out.zero = s.zero;
  out.nan = s.nan;
  out.negative_inf = s.negative_inf;
  out.positive_inf = s.positive_inf;
  out.max = nan ? kNan : s.max;
  out.min = nan ? kNan : s.min;
  out.avg = nan ? kNan : avg;
  out.l2norm = nan ? kNan : std::sqrt(sum_squares);
  if (std::isnan(out.avg)) out.avg = kNan;  // inf + -inf: print "nan", never "-nan"
}

}  // namespace

void statsFromSums(const StatSums& s, TensorStats& out) {
  finishStats(s, s.sum / static_cast<double>(s.count), s.sum_squares, out);
}

bool hasStatistics(DType dtype) {
  return dtype != DType::kComplex64 && dtype != DType::kComplex128;
}

void computeStats(DType dtype, uint64_t elements, ConstBuffer data, const StatOptions& options,
                  TensorStats& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  if (options.values) {
    StatSums sums;
    RuleSums rule;
    if (auto one = onePassStats(options.format, dtype, p, elements)) {
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
                           : ruleSums(options.format, dtype, p, elements, finite);
    }
    if (sums.max == 0 || sums.min == 0) {
      const double zero = firstZeroNegative(dtype, p, elements) ? -0.0 : 0.0;
      if (sums.max == 0) sums.max = zero;
      if (sums.min == 0) sums.min = zero;
    }
    finishStats(sums, rule.avg, rule.sum_squares, out);
  } else {
    out.count = elements;
  }
  if (!options.md5 && !options.sha1) return;
  // int4: the hashes cover the unpacked int8 values (what the .npy file holds), one byte per
  // element. MindSpore's MD5 covers only the first half of them (docs/compatibility.md).
  std::vector<unsigned char> unpacked;
  if (dtype == DType::kInt4) {
    unpacked.resize(elements);
    for (uint64_t i = 0; i < elements; ++i) {
      const uint8_t b = p[i >> 1];
      unpacked[i] = static_cast<unsigned char>((i & 1) ? int4High(b) : int4Low(b));
    }
    data = ConstBuffer(reinterpret_cast<const std::byte*>(unpacked.data()), unpacked.size());
  }
  if (options.md5) digest(md5(), data, out.md5.data());
  if (options.sha1) slicedSha1(data, elements, out.sha1.data());
}

bool containsNonFinite(DType dtype, ConstBuffer data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  // Inf and NaN: every exponent bit set (complex: in either part).
  const auto any = [&]<typename U>(U exponent_mask) {
    return anyNonFinite<U>(p, data.size() / sizeof(U), exponent_mask);
  };
  return visitDType(dtype,
                    Overloaded{
                        [&](Float16Tag) { return any(uint16_t{0x7c00}); },
                        [&](BFloat16Tag) { return any(uint16_t{0x7f80}); },
                        [&](DTypeTag<float>) { return any(uint32_t{0x7f800000u}); },
                        [&](Complex64Tag) { return any(uint32_t{0x7f800000u}); },
                        [&](DTypeTag<double>) { return any(uint64_t{0x7ff0000000000000ull}); },
                        [&](Complex128Tag) { return any(uint64_t{0x7ff0000000000000ull}); },
                        [](auto) { return false; },
                    });
}

void appendHex(std::string& out, std::span<const unsigned char> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (unsigned char b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
}

}  // namespace dumpd::storage
