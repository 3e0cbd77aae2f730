// The comparison of gathered replica digests (client/replicas.h): which tensors differ, which
// ranks differ from the majority, and every rank named when there is none.
#include "client/replicas.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "base/fingerprint.h"

namespace dumpd::client {
namespace {

using ::testing::ElementsAre;

TEST(CompareReplicas, EqualColumnsAreNotReported) {
  const std::vector<uint64_t> table = {1, 2, 3, 1, 2, 3, 1, 2, 3};  // 3 ranks x 3 tensors
  auto v = compareReplicas(table, 3, 3);
  ASSERT_TRUE(v);
  EXPECT_TRUE(v.value().empty());
}

TEST(CompareReplicas, TheRankThatDiffersFromTheMajorityIsNamed) {
  // 4 ranks x 2 tensors; rank 3 differs in tensor 1, ranks 0 and 2 in tensor 0 of 5 ranks.
  const std::vector<uint64_t> table = {7, 10, 7, 10, 7, 10, 7, 11};
  auto v = compareReplicas(table, 4, 2);
  ASSERT_TRUE(v);
  ASSERT_EQ(v.value().size(), 1u);
  EXPECT_EQ(v.value()[0].tensor, 1u);
  EXPECT_TRUE(v.value()[0].majority);
  EXPECT_EQ(v.value()[0].majority_digest, 10u);
  EXPECT_THAT(v.value()[0].ranks, ElementsAre(3u));
  const std::vector<uint64_t> five = {4, 9, 4, 9, 4};  // 5 ranks x 1 tensor: 3 of 5 hold 4
  v = compareReplicas(five, 5, 1);
  ASSERT_TRUE(v);
  ASSERT_EQ(v.value().size(), 1u);
  EXPECT_EQ(v.value()[0].majority_digest, 4u);
  EXPECT_THAT(v.value()[0].ranks, ElementsAre(1u, 3u));
}

TEST(CompareReplicas, WithoutAMajorityEveryRankIsNamed) {
  // Two replicas that differ; then 4 ranks split 2-2 (the vote's candidate is not a majority).
  for (const auto& [table, ranks] : {std::pair{std::vector<uint64_t>{5, 6}, size_t{2}},
                                     std::pair{std::vector<uint64_t>{5, 5, 6, 6}, size_t{4}},
                                     std::pair{std::vector<uint64_t>{1, 2, 3}, size_t{3}}}) {
    auto v = compareReplicas(table, ranks, 1);
    ASSERT_TRUE(v);
    ASSERT_EQ(v.value().size(), 1u);
    EXPECT_FALSE(v.value()[0].majority);
    EXPECT_EQ(v.value()[0].ranks.size(), ranks);
  }
}

TEST(CompareReplicas, ATableOfTheWrongSizeIsRefused) {
  const std::vector<uint64_t> table = {1, 2, 3};
  auto v = compareReplicas(table, 2, 2);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(v.error().message, "the digest table has 3 digests, not 2 ranks x 2 tensors");
  EXPECT_FALSE(compareReplicas(table, SIZE_MAX, 3));  // the product would wrap
  EXPECT_FALSE(compareReplicas(table, 3, 0));
  auto none = compareReplicas({}, 5, 0);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none.value().empty());
}

TEST(ReplicaDigest, IsTheFingerprintOfTheBytes) {
  std::array<float, 33> values{};
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i);
  const uint64_t d = replicaDigest(values.data(), sizeof values);
  EXPECT_EQ(d, fingerprint(std::as_bytes(std::span(values))));
  uint32_t bits;
  std::memcpy(&bits, &values[17], 4);
  bits ^= 1u << 3;
  std::memcpy(&values[17], &bits, 4);
  EXPECT_NE(replicaDigest(values.data(), sizeof values), d);
}

}  // namespace
}  // namespace dumpd::client
