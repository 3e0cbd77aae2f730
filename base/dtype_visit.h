// The one dispatch on DType: visitDType(t, f) calls f with a tag type naming t's element layout,
// so code that handles every dtype is one call plus a body per layout rather than a switch.
//
//   visitDType(t, Overloaded{
//       [&](auto tag) { use<typename decltype(tag)::type>(); },  // DTypeTag<T>: one T
//       [&](Float16Tag) { ... },                                  // the special layouts
//       ...});
//
// Header-only and C++17 (client/*.cu includes it; nvcc builds those as C++17): constexpr, and
// __host__ __device__ under nvcc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/dtype.h"

// Under nvcc visitDType is __host__ __device__: callable from a kernel with a __device__
// visitor, and from host code with a host one (the execution-space check, which would refuse
// one or the other, is off for it as it is for Thrust's function templates).
#if defined(__CUDACC__)
#define DUMPD_HOST_DEVICE __host__ __device__
#define DUMPD_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define DUMPD_HOST_DEVICE
#define DUMPD_EXEC_CHECK_DISABLE
#endif

namespace dumpd {

namespace dtype_visit_detail {

// The dtype whose element is one T: by signedness and width (float and double by width).
template <typename T>
constexpr DType plainDType() {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool> && sizeof(T) <= 8 &&
                    (std::is_integral_v<T> || sizeof(T) >= 4),
                "DTypeTag: no plain dtype has this type");
  constexpr int kWidth = sizeof(T) == 1 ? 0 : sizeof(T) == 2 ? 1 : sizeof(T) == 4 ? 2 : 3;
  constexpr DType kSigned[] = {DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64};
  constexpr DType kUnsigned[] = {DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64};
  if (std::is_floating_point_v<T>) return sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64;
  return std::is_signed_v<T> ? kSigned[kWidth] : kUnsigned[kWidth];
}

}  // namespace dtype_visit_detail

// The plain dtypes, where one element is one little-endian T read as it is: int8..int64,
// uint8..uint64, float32, float64. `type` is T.
template <typename T>
struct DTypeTag {
  using type = T;
  static constexpr DType dtype = dtype_visit_detail::plainDType<T>();
  static constexpr size_t size = sizeof(T);
};

// Whether Tag is a DTypeTag<T> (for `if constexpr` in a visitor taking `auto`).
template <typename Tag>
inline constexpr bool kIsPlainDType = false;
template <typename T>
inline constexpr bool kIsPlainDType<DTypeTag<T>> = true;

// The special dtypes: no C++ type reads them as values, so each has a tag of its own. `word`
// is the unsigned word an element is stored in (its bit pattern); `size` is dtypeSize().
struct BoolTag {  // one byte: 0 is false, anything else true
  using word = uint8_t;
  static constexpr DType dtype = DType::kBool;
  static constexpr size_t size = 1;
};
struct UInt1Tag {  // one byte per element holding 0 or 1, read as the uint8 it is
  using word = uint8_t;
  static constexpr DType dtype = DType::kUInt1;
  static constexpr size_t size = 1;
};
struct Float16Tag {  // IEEE binary16
  using word = uint16_t;
  static constexpr DType dtype = DType::kFloat16;
  static constexpr size_t size = 2;
};
struct BFloat16Tag {  // the upper half of a float32
  using word = uint16_t;
  static constexpr DType dtype = DType::kBFloat16;
  static constexpr size_t size = 2;
};
struct Int4Tag {  // two per byte, low nibble first, two's complement; size 0 (see sourceBytes)
  using word = uint8_t;
  static constexpr DType dtype = DType::kInt4;
  static constexpr size_t size = 0;
};
// Complex: a (real, imaginary) pair of T, `type` (float or double).
template <typename T>
struct ComplexTag {
  using type = T;
  static constexpr DType dtype = sizeof(T) == 4 ? DType::kComplex64 : DType::kComplex128;
  static constexpr size_t size = 2 * sizeof(T);
};
using Complex64Tag = ComplexTag<float>;
using Complex128Tag = ComplexTag<double>;

// A value that is no DType (a wire byte >= kDTypeCount, see dtypeValid).
struct UnknownDType {};

// Every dtype's tag, in wire-value order: the one table visitDType reads. A dtype added to the
// enum without its tag here fails the static_asserts below.
template <typename... Tags>
struct DTypeTags {};
using AllDTypeTags =
    DTypeTags<BoolTag, DTypeTag<int8_t>, DTypeTag<int16_t>, DTypeTag<int32_t>, DTypeTag<int64_t>,
              DTypeTag<uint8_t>, DTypeTag<uint16_t>, DTypeTag<uint32_t>, DTypeTag<uint64_t>,
              Float16Tag, DTypeTag<float>, DTypeTag<double>, BFloat16Tag, Int4Tag, UInt1Tag,
              Complex64Tag, Complex128Tag>;

namespace dtype_visit_detail {

// f(tag) with the tag at position `wire - I` of the list; f(UnknownDType{}) past its end.
DUMPD_EXEC_CHECK_DISABLE
template <int I, typename F, typename Tag, typename... Rest>
DUMPD_HOST_DEVICE constexpr decltype(auto) visitFrom(int wire, F& f, DTypeTags<Tag, Rest...>) {
  if (wire == I) return f(Tag{});
  if constexpr (sizeof...(Rest) == 0) {
    return f(UnknownDType{});
  } else {
    return visitFrom<I + 1>(wire, f, DTypeTags<Rest...>{});
  }
}

template <typename... Tags>
constexpr int count(DTypeTags<Tags...>) {
  return sizeof...(Tags);
}

}  // namespace dtype_visit_detail

static_assert(dtype_visit_detail::count(AllDTypeTags{}) == kDTypeCount,
              "AllDTypeTags: one tag per dtype");

// Calls f(tag) with the tag of `t`: DTypeTag<T>, one of the special tags above, or UnknownDType
// for a value outside the enum. Every call of f must return the same type; visitDType
// returns what f returns.
DUMPD_EXEC_CHECK_DISABLE
template <typename F>
DUMPD_HOST_DEVICE constexpr decltype(auto) visitDType(DType t, F&& f) {
  return dtype_visit_detail::visitFrom<0>(static_cast<int>(t), f, AllDTypeTags{});
}

// One callable from several lambdas, one per tag (the usual overload set):
// visitDType(t, Overloaded{[](BoolTag) {...}, [](auto) {...}}).
template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

namespace dtype_visit_detail {

struct TagDType {
  template <typename Tag>
  DUMPD_HOST_DEVICE constexpr int operator()(Tag) const {
    return static_cast<int>(Tag::dtype);
  }
  DUMPD_HOST_DEVICE constexpr int operator()(UnknownDType) const { return -1; }
};

// Every value of the enum reaches the tag of that very dtype (AllDTypeTags is in wire order),
// and only those values do.
DUMPD_HOST_DEVICE constexpr bool everyDTypeHasItsTag() {
  for (int i = 0; i < 256; ++i) {
    const int want = i < kDTypeCount ? i : -1;
    if (visitDType(static_cast<DType>(i), TagDType{}) != want) return false;
  }
  return true;
}
static_assert(everyDTypeHasItsTag(), "visitDType: a dtype reaches another dtype's tag");

}  // namespace dtype_visit_detail

}  // namespace dumpd
