#include "client/finite_copy.h"

#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dumpd::client {
namespace {

// Elements of U bits whose exponent field is all ones: NaN or inf.
template <typename U>
bool scalarCopy(std::byte* dst, const std::byte* src, uint64_t bytes, U exponent) {
  if (bytes == 0) return false;  // the vector steps took it all (or there was nothing)
  std::memcpy(dst, src, bytes);
  const uint64_t n = bytes / sizeof(U);
  constexpr uint64_t kChunk = 4096;  // the chunk's found flag vectorises; test it per chunk
  for (uint64_t start = 0; start < n; start += kChunk) {
    const uint64_t end = start + kChunk < n ? start + kChunk : n;
    U found = 0;
    for (uint64_t i = start; i < end; ++i) {
      U v;
      std::memcpy(&v, dst + i * sizeof(U), sizeof v);
      found |= (v & exponent) == exponent ? U{1} : U{0};
    }
    if (found != 0) {
      return true;
    }
  }
  return false;
}

#if defined(__x86_64__)
template <int kBits>
__attribute__((target("avx2"))) inline __m256i equalLanes(__m256i a, __m256i b) {
  if constexpr (kBits == 16) return _mm256_cmpeq_epi16(a, b);
  if constexpr (kBits == 32) return _mm256_cmpeq_epi32(a, b);
  if constexpr (kBits == 64) return _mm256_cmpeq_epi64(a, b);
}

// 32 bytes a step: a load, a store, and the exponent test on the register in between (an
// array of four registers was spilled through the stack by GCC 12: 3x slower).
template <int kBits>
__attribute__((target("avx2"))) bool avx2Copy(std::byte* dst, const std::byte* src, uint64_t bytes,
                                              uint64_t exponent) {
  __m256i mask;
  if constexpr (kBits == 16) mask = _mm256_set1_epi16(static_cast<int16_t>(exponent));
  if constexpr (kBits == 32) mask = _mm256_set1_epi32(static_cast<int32_t>(exponent));
  if constexpr (kBits == 64) mask = _mm256_set1_epi64x(static_cast<int64_t>(exponent));
  __m256i found = _mm256_setzero_si256();
  uint64_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), v);
    found = _mm256_or_si256(found, equalLanes<kBits>(_mm256_and_si256(v, mask), mask));
  }
  const bool head = !_mm256_testz_si256(found, found);
  using U = std::conditional_t<kBits == 16, uint16_t,
                               std::conditional_t<kBits == 32, uint32_t, uint64_t>>;
  const bool tail = scalarCopy<U>(dst + i, src + i, bytes - i, static_cast<U>(exponent));
  return head || tail;
}

bool hasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

template <int kBits, typename U>
bool copyAs(std::byte* dst, const std::byte* src, uint64_t bytes, U exponent) {
#if defined(__x86_64__)
  if (hasAvx2()) return avx2Copy<kBits>(dst, src, bytes, exponent);
#endif
  return scalarCopy<U>(dst, src, bytes, exponent);
}

}  // namespace

bool copyFindingNonFinite(std::byte* dst, const std::byte* src, uint64_t bytes, DType dtype) {
  if (bytes == 0) return false;  // an empty tensor's pointers may be null: no memcpy of them
  switch (dtype) {
    case DType::kFloat16:
      return copyAs<16>(dst, src, bytes, uint16_t{0x7c00});
    case DType::kBFloat16:
      return copyAs<16>(dst, src, bytes, uint16_t{0x7f80});
    case DType::kFloat32:
    case DType::kComplex64:
      return copyAs<32>(dst, src, bytes, uint32_t{0x7f800000u});
    case DType::kFloat64:
    case DType::kComplex128:
      return copyAs<64>(dst, src, bytes, uint64_t{0x7ff0000000000000ull});
    default:
      std::memcpy(dst, src, bytes);
      return false;
  }
}

}  // namespace dumpd::client
