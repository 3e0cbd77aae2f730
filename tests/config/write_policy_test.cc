#include "config/write_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/config/config_test_util.h"

namespace dumpd::config {
namespace {

using testing::errorOf;
using ::testing::HasSubstr;

TEST(WritePolicyTest, NamesRoundTrip) {
  for (auto d : {Durability::kNone, Durability::kIteration, Durability::kFile}) {
    EXPECT_EQ(*parseDurability(durabilityName(d)), d);
  }
  for (auto c : {Compression::kNone, Compression::kLz4}) {
    EXPECT_EQ(*parseCompression(compressionName(c)), c);
  }
  EXPECT_FALSE(parseDurability(""));
  EXPECT_THAT(errorOf(parseCompression("LZ4\n")), HasSubstr("but got: LZ4\\x0a"));
}

}  // namespace
}  // namespace dumpd::config
