#include "base/element_count.h"

#include <gtest/gtest.h>

#include <vector>

namespace dumpd {
namespace {

TEST(ElementCount, ScalarIsOneElement) { EXPECT_EQ(elementCount({}), 1u); }

TEST(ElementCount, MultipliesDimensions) {
  const std::vector<int64_t> s = {2, 3, 4};
  EXPECT_EQ(elementCount(s), 24u);
  const std::vector<int64_t> z = {5, 0, 7};
  EXPECT_EQ(elementCount(z), 0u);
}

TEST(ElementCount, RefusesNegativeDimensions) {
  const std::vector<int64_t> s = {2, -1};
  EXPECT_FALSE(elementCount(s).has_value());
}

TEST(ElementCount, RefusesMoreThanTheCap) {
  const std::vector<int64_t> at = {int64_t{1} << 28, int64_t{1} << 28};
  EXPECT_EQ(elementCount(at), kMaxElements);
  const std::vector<int64_t> over = {(int64_t{1} << 28) + 1, int64_t{1} << 28};
  EXPECT_FALSE(elementCount(over).has_value());
  // Wraps to a small number in 64 bits; still refused.
  const std::vector<int64_t> wrap = {int64_t{1} << 32, int64_t{1} << 32, 2};
  EXPECT_FALSE(elementCount(wrap).has_value());
}

}  // namespace
}  // namespace dumpd
