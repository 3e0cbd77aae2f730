#include "storage/statistics.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>

#include "storage/convert.h"

namespace dumpd::storage {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Independent accumulators per lane: a loop over kLanes consecutive elements has no
// dependency between its iterations, so the compiler can keep the lanes in vector registers
// (strict IEEE order forbids it from reassociating one running sum by itself).
constexpr int kLanes = 8;

struct Accumulator {
  double max[kLanes];
  double min[kLanes];
  double sum[kLanes];
  double sq[kLanes];
  uint64_t negative[kLanes];
  uint64_t positive[kLanes];
  uint64_t zero[kLanes];
  uint64_t nan[kLanes];
  uint64_t ninf[kLanes];
  uint64_t pinf[kLanes];

  Accumulator() {
    for (int j = 0; j < kLanes; ++j) {
      max[j] = -kInf;
      min[j] = kInf;
      sum[j] = sq[j] = 0;
      negative[j] = positive[j] = zero[j] = nan[j] = ninf[j] = pinf[j] = 0;
    }
  }
};

// kFloating: the type can hold NaN/inf (integers skip those tests).
template <bool kFloating>
inline void step(Accumulator& a, int j, double x) {
  // NaN compares false: it never replaces max/min; it is counted and applied at the end.
  a.max[j] = x > a.max[j] ? x : a.max[j];
  a.min[j] = x < a.min[j] ? x : a.min[j];
  a.sum[j] += x;
  a.sq[j] += x * x;
  a.negative[j] += x < 0;
  a.positive[j] += x > 0;
  a.zero[j] += x == 0;
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
    s.sum += a.sum[j];
    s.sum_squares += a.sq[j];
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
  switch (dtype) {
    case DType::kBool:
      accumulate<false>(
          n, [p](uint64_t i) { return p[i] != 0 ? 1.0 : 0.0; }, a);
      break;
    case DType::kInt8:
      accumulateAs<int8_t>(p, n, a);
      break;
    case DType::kInt16:
      accumulateAs<int16_t>(p, n, a);
      break;
    case DType::kInt32:
      accumulateAs<int32_t>(p, n, a);
      break;
    case DType::kInt64:
      accumulateAs<int64_t>(p, n, a);
      break;
    case DType::kUInt8:
    case DType::kUInt1:
      accumulateAs<uint8_t>(p, n, a);
      break;
    case DType::kUInt16:
      accumulateAs<uint16_t>(p, n, a);
      break;
    case DType::kUInt32:
      accumulateAs<uint32_t>(p, n, a);
      break;
    case DType::kUInt64:
      accumulateAs<uint64_t>(p, n, a);
      break;
    case DType::kFloat32:
      accumulateAs<float, true>(p, n, a);
      break;
    case DType::kFloat64:
      accumulateAs<double, true>(p, n, a);
      break;
    case DType::kFloat16: {
      // Decode a block into floats first: the decode loop vectorises on its own, fused into
      // the accumulation it does not.
      constexpr uint64_t kBlock = 2048;
      float block[kBlock];
      for (uint64_t start = 0; start < n; start += kBlock) {
        const uint64_t m = std::min(kBlock, n - start);
        const unsigned char* q = p + 2 * start;
        for (uint64_t i = 0; i < m; ++i) block[i] = halfToFloat(loadUnaligned<uint16_t>(q + 2 * i));
        accumulate<true>(
            m, [&block](uint64_t i) { return double{block[i]}; }, a);
      }
      break;
    }
    case DType::kBFloat16:
      accumulate<true>(
          n, [p](uint64_t i) { return double{bf16ToFloat(loadUnaligned<uint16_t>(p + 2 * i))}; },
          a);
      break;
    case DType::kInt4:
      accumulate<false>(
          n,
          [p](uint64_t i) {
            uint8_t b = p[i >> 1];
            return static_cast<double>((i & 1) ? int4High(b) : int4Low(b));
          },
          a);
      break;
    case DType::kComplex64:
    case DType::kComplex128:
      break;
  }
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

template <typename U>
bool anyNonFinite(const unsigned char* p, uint64_t n, U exponent_mask) {
  constexpr uint64_t kChunk = 4096;
  for (uint64_t start = 0; start < n; start += kChunk) {
    uint64_t end = start + kChunk < n ? start + kChunk : n;
    bool found = false;
    for (uint64_t i = start; i < end; ++i) {
      found |= (loadUnaligned<U>(p + i * sizeof(U)) & exponent_mask) == exponent_mask;
    }
    if (found) return true;
  }
  return false;
}

}  // namespace

void statsFromSums(const StatSums& s, TensorStats& out) {
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
  out.avg = nan ? kNan : s.sum / static_cast<double>(s.count);
  out.l2norm = nan ? kNan : std::sqrt(s.sum_squares);
  if (std::isnan(out.avg)) out.avg = kNan;  // inf + -inf: print "nan", never "-nan"
}

bool hasStatistics(DType dtype) {
  return dtype != DType::kComplex64 && dtype != DType::kComplex128;
}

void computeStats(DType dtype, uint64_t elements, ConstBuffer data, const StatOptions& options,
                  TensorStats& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  if (options.values) {
    Accumulator a;
    accumulateValues(dtype, p, elements, a);
    statsFromSums(reduce(a, elements), out);
  } else {
    out.count = elements;
  }
  if (options.md5) digest(md5(), data, out.md5.data());
  if (options.sha1) digest(sha1(), data, out.sha1.data());
}

bool containsNonFinite(DType dtype, ConstBuffer data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  switch (dtype) {
    case DType::kFloat16:
      return anyNonFinite<uint16_t>(p, data.size() / 2, 0x7c00);
    case DType::kBFloat16:
      return anyNonFinite<uint16_t>(p, data.size() / 2, 0x7f80);
    case DType::kFloat32:
    case DType::kComplex64:
      return anyNonFinite<uint32_t>(p, data.size() / 4, 0x7f800000u);
    case DType::kFloat64:
    case DType::kComplex128:
      return anyNonFinite<uint64_t>(p, data.size() / 8, 0x7ff0000000000000ull);
    default:
      return false;
  }
}

void appendHex(std::string& out, std::span<const unsigned char> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (unsigned char b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
}

}  // namespace dumpd::storage
