#include "base/dtype_visit.h"

#include <gtest/gtest.h>

#include <string>
#include <type_traits>

namespace dumpd {
namespace {

// What a visit saw: the tag's dtype and size, and for the plain tags sizeof their type.
struct Seen {
  int dtype = -2;
  size_t size = 0;
  size_t type_size = 0;  // DTypeTag<T>: sizeof(T)
  std::string kind;
};

Seen see(DType t) {
  return visitDType(t, Overloaded{
                           [](UnknownDType) {
                             return Seen{-1, 0, 0, "unknown"};
                           },
                           [](auto tag) {
                             using Tag = decltype(tag);
                             Seen s{static_cast<int>(Tag::dtype), Tag::size, 0, "special"};
                             if constexpr (kIsPlainDType<Tag>) {
                               s.type_size = sizeof(typename Tag::type);
                               s.kind = "plain";
                             }
                             return s;
                           },
                       });
}

TEST(DTypeVisitTest, EveryDTypeReachesItsOwnTagOnceWithItsSize) {
  int visits[kDTypeCount] = {};
  for (int i = 0; i < kDTypeCount; ++i) {
    const DType t = static_cast<DType>(i);
    visitDType(t, [&](auto tag) {
      if constexpr (!std::is_same_v<decltype(tag), UnknownDType>) {
        ++visits[static_cast<int>(decltype(tag)::dtype)];
      }
    });
    const Seen s = see(t);
    EXPECT_EQ(s.dtype, i) << dtypeName(t);
    EXPECT_EQ(s.size, dtypeSize(t)) << dtypeName(t);
    if (s.kind == "plain") {
      EXPECT_EQ(s.type_size, dtypeSize(t)) << dtypeName(t);
    }
  }
  for (int i = 0; i < kDTypeCount; ++i) EXPECT_EQ(visits[i], 1) << i;
}

TEST(DTypeVisitTest, PlainTagsCarryTheStorageType) {
  EXPECT_EQ(see(DType::kFloat32).kind, "plain");
  EXPECT_EQ(see(DType::kUInt64).kind, "plain");
  static_assert(kIsPlainDType<DTypeTag<int64_t>> && !kIsPlainDType<Complex64Tag>);
  static_assert(std::is_same_v<DTypeTag<float>::type, float>);
  static_assert(DTypeTag<int16_t>::dtype == DType::kInt16);
  static_assert(DTypeTag<uint8_t>::dtype == DType::kUInt8);
  static_assert(Complex64Tag::dtype == DType::kComplex64 && Complex64Tag::size == 8);
  static_assert(Complex128Tag::dtype == DType::kComplex128 && Complex128Tag::size == 16);
}

TEST(DTypeVisitTest, PackedAndSpecialDTypesTakeTheirOwnPath) {
  for (DType t : {DType::kBool, DType::kUInt1, DType::kFloat16, DType::kBFloat16, DType::kInt4,
                  DType::kComplex64, DType::kComplex128}) {
    EXPECT_EQ(see(t).kind, "special") << dtypeName(t);
  }
  // The words the special layouts are stored in.
  static_assert(sizeof(BoolTag::word) == 1 && sizeof(UInt1Tag::word) == 1);
  static_assert(sizeof(Float16Tag::word) == 2 && sizeof(BFloat16Tag::word) == 2);
  static_assert(sizeof(Int4Tag::word) == 1 && Int4Tag::size == 0);  // two elements a word
  // uint1 is one byte per element, but not uint8's tag: it has a path of its own.
  int uint1 = 0;
  visitDType(DType::kUInt1, Overloaded{[&](UInt1Tag) { ++uint1; }, [](auto) {}});
  EXPECT_EQ(uint1, 1);
}

TEST(DTypeVisitTest, ValuesOutsideTheEnumReachUnknownDType) {
  for (int i = kDTypeCount; i < 256; ++i) {
    EXPECT_EQ(see(static_cast<DType>(i)).kind, "unknown") << i;
  }
}

TEST(DTypeVisitTest, ReturnsWhatTheVisitorReturnsAndWorksInConstantExpressions) {
  constexpr size_t kSize = visitDType(DType::kFloat64, [](auto tag) -> size_t {
    if constexpr (std::is_same_v<decltype(tag), UnknownDType>) {
      return 0;
    } else {
      return decltype(tag)::size;
    }
  });
  static_assert(kSize == 8);
  EXPECT_EQ(kSize, 8u);
}

}  // namespace
}  // namespace dumpd
