#include "base/dtype.h"

#include <gtest/gtest.h>

namespace dumpd {
namespace {

TEST(DTypeTest, NamesAreMindSporeLowerCaseAndRoundTrip) {
  const char* expected[kDTypeCount] = {"bool",      "int8",      "int16",    "int32",  "int64",
                                       "uint8",     "uint16",    "uint32",   "uint64", "float16",
                                       "float32",   "float64",   "bfloat16", "int4",   "uint1",
                                       "complex64", "complex128"};
  for (int i = 0; i < kDTypeCount; ++i) {
    DType t = static_cast<DType>(i);
    EXPECT_EQ(dtypeName(t), expected[i]);
    ASSERT_TRUE(dtypeFromName(expected[i]).has_value());
    EXPECT_EQ(*dtypeFromName(expected[i]), t);
  }
  EXPECT_FALSE(dtypeFromName("float128").has_value());
  EXPECT_FALSE(dtypeFromName("Float32").has_value());
}

TEST(DTypeTest, WireValuesBeyondTheLastAreInvalid) {
  EXPECT_TRUE(dtypeValid(0));
  EXPECT_TRUE(dtypeValid(kDTypeCount - 1));
  EXPECT_FALSE(dtypeValid(kDTypeCount));
  EXPECT_FALSE(dtypeValid(255));
}

TEST(DTypeTest, SourceBytesPacksInt4TwoPerByte) {
  EXPECT_EQ(sourceBytes(DType::kFloat32, 6), 24u);
  EXPECT_EQ(sourceBytes(DType::kComplex128, 2), 32u);
  EXPECT_EQ(sourceBytes(DType::kBFloat16, 3), 6u);
  EXPECT_EQ(sourceBytes(DType::kUInt1, 5), 5u);
  EXPECT_EQ(sourceBytes(DType::kInt4, 4), 2u);
  EXPECT_EQ(sourceBytes(DType::kInt4, 5), 3u);
  EXPECT_EQ(sourceBytes(DType::kInt4, 0), 0u);
  EXPECT_EQ(dtypeSize(DType::kInt4), 0u);
}

TEST(DTypeTest, StoredDTypeConvertsBf16Int4Uint1) {
  EXPECT_EQ(storedDType(DType::kBFloat16), DType::kFloat32);
  EXPECT_EQ(storedDType(DType::kInt4), DType::kInt8);
  EXPECT_EQ(storedDType(DType::kUInt1), DType::kUInt8);
  EXPECT_EQ(storedDType(DType::kFloat16), DType::kFloat16);
}

TEST(DTypeTest, NpyDescrMatchesNumpy) {
  EXPECT_EQ(npyDescr(DType::kBool), "|b1");
  EXPECT_EQ(npyDescr(DType::kInt8), "|i1");
  EXPECT_EQ(npyDescr(DType::kUInt8), "|u1");
  EXPECT_EQ(npyDescr(DType::kInt16), "<i2");
  EXPECT_EQ(npyDescr(DType::kInt32), "<i4");
  EXPECT_EQ(npyDescr(DType::kInt64), "<i8");
  EXPECT_EQ(npyDescr(DType::kUInt16), "<u2");
  EXPECT_EQ(npyDescr(DType::kUInt32), "<u4");
  EXPECT_EQ(npyDescr(DType::kUInt64), "<u8");
  EXPECT_EQ(npyDescr(DType::kFloat16), "<f2");
  EXPECT_EQ(npyDescr(DType::kFloat32), "<f4");
  EXPECT_EQ(npyDescr(DType::kFloat64), "<f8");
  EXPECT_EQ(npyDescr(DType::kComplex64), "<c8");
  EXPECT_EQ(npyDescr(DType::kComplex128), "<c16");
  // A source dtype gives the descr of what is stored for it.
  EXPECT_EQ(npyDescr(DType::kBFloat16), "<f4");
  EXPECT_EQ(npyDescr(DType::kInt4), "|i1");
  EXPECT_EQ(npyDescr(DType::kUInt1), "|u1");
}

}  // namespace
}  // namespace dumpd
