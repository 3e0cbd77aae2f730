#include "storage/format/names.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace dumpd::storage {
namespace {

TEST(NamesTest, SanitizeReplacesSlashBackslashDotSpace) {
  EXPECT_EQ(sanitizeName("Default/Add-op0"), "Default_Add-op0");
  EXPECT_EQ(sanitizeName("a\\b.c d"), "a_b_c_d");
  EXPECT_EQ(sanitizeName("Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d/Conv2D-op12"),
            "Default_network-WithLossCell__backbone-AlexNet_conv3-Conv2d_Conv2D-op12");
}

TEST(NamesTest, SanitizeNeverYieldsEmptyDotOrDotDot) {
  EXPECT_EQ(sanitizeName(""), "_");
  EXPECT_EQ(sanitizeName("."), "_");
  EXPECT_EQ(sanitizeName(".."), "__");
}

TEST(NamesTest, SanitizeReplacesControlBytes) {
  EXPECT_EQ(sanitizeName(std::string("a\0b", 3)), "a_b");
  EXPECT_EQ(sanitizeName("a\nb\x7f"), "a_b_");
}

TEST(NamesTest, TensorFileNameFollowsMindSporePattern) {
  std::string out;
  appendTensorFileName(out, {"Add", "Default/Add-op0", 0, 0, 1700000000123456, Io::kInput, 1,
                             "DefaultFormat", DType::kFloat32});
  EXPECT_EQ(out, "Add.Default_Add-op0.0.0.1700000000123456.input.1.DefaultFormat.float32.npy");
}

TEST(NamesTest, TensorFileNameSanitizesTypeAndFormat) {
  std::string out;
  appendTensorFileName(out, {"My.Op", "x", 7, 3, 5, Io::kOutput, 0, "NC1HWC0/x", DType::kBFloat16});
  EXPECT_EQ(out, "My_Op.x.7.3.5.output.0.NC1HWC0_x.bfloat16.npy");
}

TEST(NamesTest, ShapeHasNoSpacesAndScalarIsEmpty) {
  std::string out;
  std::vector<int64_t> shape = {2, 3};
  appendShape(out, shape);
  EXPECT_EQ(out, "[2,3]");
  out.clear();
  appendShape(out, {});
  EXPECT_EQ(out, "[]");
}

std::string ostreamText(double v) {
  std::ostringstream ss;
  ss << v;
  return ss.str();
}

std::string statText(double v) {
  std::string out;
  appendStatNumber(out, v);
  return out;
}

TEST(NamesTest, StatNumberMatchesSpecExamples) {
  EXPECT_EQ(statText(9.539392), "9.53939");
  EXPECT_EQ(statText(1.0), "1");
  EXPECT_EQ(statText(1234567), "1.23457e+06");
  EXPECT_EQ(statText(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(statText(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(statText(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(statText(-std::numeric_limits<double>::quiet_NaN()), "nan");
}

TEST(NamesTest, StatNumberMatchesOstreamForManyValues) {
  const double samples[] = {
      0.0,     -0.0,  1e-300,  5e-324,           0.1,       0.5,       123456, 1234567, 999999.5,
      9999995, 1e100, -2.5e-7, 3.14159265358979, 23.643181, 32.924155, 0.0001, 0.00001, 100000,
      1e6,     -1e21, 65504,   1.0 / 3.0};
  for (double v : samples) EXPECT_EQ(statText(v), ostreamText(v)) << v;
  // Plus a sweep over many magnitudes.
  for (int e = -40; e <= 40; ++e) {
    for (double m : {1.0, 1.234565, 9.9999995, 4.0000005, 7.77777777}) {
      double v = m * std::pow(10.0, e);
      EXPECT_EQ(statText(v), ostreamText(v)) << v;
      EXPECT_EQ(statText(-v), ostreamText(-v)) << -v;
    }
  }
}

TEST(NamesTest, RandomDigitsAreSixteenDigitsAndVary) {
  std::string a = randomDigits();
  std::string b = randomDigits();
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a.find_first_not_of("0123456789"), std::string::npos);
  EXPECT_NE(a, b);
}

// parseTensorFileName reads back what appendTensorFileName writes, dotted op names included.
TEST(NamesTest, TensorFileNamesParseBack) {
  std::string name;
  appendTensorFileName(name, {.op_type = "MatMul",
                              .op_name = "Default/net.fc1/MatMul-op3",
                              .task_id = 4,
                              .stream_id = 1,
                              .timestamp_us = 99,
                              .io = Io::kOutput,
                              .slot = 2,
                              .format = "DefaultFormat",
                              .dtype = DType::kBFloat16});
  for (std::string suffix : {"", ".lz4"}) {
    auto f = parseTensorFileName(name + suffix);
    ASSERT_TRUE(f) << name + suffix;
    EXPECT_EQ(f->kind, suffix.empty() ? TensorFileKind::kNpy : TensorFileKind::kNpyLz4);
    EXPECT_EQ(f->op_type, "MatMul");
    EXPECT_EQ(f->op_name, sanitizeName("Default/net.fc1/MatMul-op3"));
    EXPECT_EQ(f->task_id, 4u);
    EXPECT_EQ(f->stream_id, 1u);
    EXPECT_EQ(f->timestamp, 99u);
    EXPECT_EQ(f->io, Io::kOutput);
    EXPECT_EQ(f->slot, 2u);
    EXPECT_EQ(f->dtype, "bfloat16");
  }
  // msaccucmp's names end in the shape instead of format and dtype.
  auto m = parseTensorFileName("Add.Default_Add-op0.1.2.3.input.0.2x3.npy");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->io, Io::kInput);
  EXPECT_EQ(m->dtype, "");
  EXPECT_FALSE(parseTensorFileName("Add.x.1.2.3.sideways.0.F.float32.npy"));
  EXPECT_FALSE(parseTensorFileName("notes.txt"));
}

TEST(NamesTest, ShapeTextParsesBothGenerationsAndRefusesNegatives) {
  std::string a, b;
  const std::vector<int64_t> shape = {2, 3};
  appendShape(a, shape);
  appendShapeParenthesized(b, shape);
  EXPECT_EQ(parseShapeText(a), shape);
  EXPECT_EQ(parseShapeText(b), shape);
  EXPECT_EQ(parseShapeText("(3,)"), std::vector<int64_t>{3});
  EXPECT_EQ(parseShapeText("[]"), std::vector<int64_t>{});
  EXPECT_FALSE(parseShapeText("[2,-1]"));
  EXPECT_FALSE(parseShapeText("2,3"));
}

}  // namespace
}  // namespace dumpd::storage
