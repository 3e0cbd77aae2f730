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
#include "storage/format/convert.h"
#include "storage/format/stat_values.h"

namespace dumpd::storage {
namespace {

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
  finishStats(s, s.sum_is_average ? s.sum : s.sum / static_cast<double>(s.count), s.sum_squares,
              out);
}

bool hasStatistics(DType dtype) {
  return dtype != DType::kComplex64 && dtype != DType::kComplex128;
}

void computeStats(DType dtype, uint64_t elements, ConstBuffer data, const StatOptions& options,
                  TensorStats& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  if (options.values) {
    statsFromSums(computeValueStats(dtype, elements, p, options.format), out);
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
