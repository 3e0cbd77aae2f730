// ReplicaReports: a client's report that replicas differ is checked for bounds (its word is
// untrusted), the majority digest and the differing ranks are what the journal shows, and
// status keeps the count and the last one.
#include "daemon/replica_reports.h"

#include <gtest/gtest.h>

#include <vector>

#include "ipc/ring_format.h"

namespace dumpd::daemon {
namespace {

v1::ReplicaMismatch report(std::vector<uint32_t> ranks, std::vector<uint64_t> digests,
                           uint32_t group_size) {
  v1::ReplicaMismatch m;
  m.set_iteration(30);
  m.set_tensor("param:fc1.weight");
  for (uint32_t r : ranks) m.add_ranks(r);
  for (uint64_t d : digests) m.add_digests(d);
  m.set_group_size(group_size);
  return m;
}

std::string errorOf(const Result<TriggerEvent::Replicas>& r) {
  return r.has_value() ? "(accepted)" : r.error().message;
}

TEST(ReplicaReports, TheMajorityAndTheDifferingRanksAreWhatTheJournalShows) {
  auto r = ReplicaReports::check(report({3}, {7, 7, 7, 0xFFFFFFFFFFFFFFF9ull}, 4));
  ASSERT_TRUE(r.has_value()) << errorOf(r);
  EXPECT_EQ(r.value().majority, 7u);
  ASSERT_EQ(r.value().differing.size(), 1u);
  EXPECT_EQ(r.value().differing[0].first, 3u);
  EXPECT_EQ(r.value().text(), "param:fc1.weight at iteration 30: rank 3 of 4 differs");
  const nlohmann::json j = r.value().toJson();
  EXPECT_EQ(j["majority_digest"], "0000000000000007");
  // Hex strings: a JSON number would lose the low bits of this digest.
  EXPECT_EQ(j["differing"][0]["digest"], "fffffffffffffff9");
  EXPECT_EQ(j["group_size"], 4);
}

TEST(ReplicaReports, AMalformedReportIsRefusedNamingWhy) {
  EXPECT_NE(
      errorOf(ReplicaReports::check(report({1}, {1, 2}, 3))).find("2 digests for a group of 3"),
      std::string::npos);
  EXPECT_NE(errorOf(ReplicaReports::check(report({}, {1, 2}, 2))).find("0 differing ranks"),
            std::string::npos);
  EXPECT_NE(errorOf(ReplicaReports::check(report({2}, {1, 2}, 2))).find("rank 2 is outside"),
            std::string::npos);
  EXPECT_NE(errorOf(ReplicaReports::check(report({0}, {}, 0))).find("its group has 0 ranks"),
            std::string::npos);
  v1::ReplicaMismatch huge = report({0}, {}, static_cast<uint32_t>(ipc::kMaxReplicaGroup + 1));
  EXPECT_NE(errorOf(ReplicaReports::check(huge)).find("ranks (1 to 65536)"), std::string::npos);
}

TEST(ReplicaReports, ALongListOfDifferingRanksIsCountedNotListed) {
  std::vector<uint32_t> ranks;
  std::vector<uint64_t> digests(200, 5);
  for (uint32_t r = 0; r < 100; ++r) {
    ranks.push_back(r);
    digests[r] = 1000 + r;
  }
  auto r = ReplicaReports::check(report(ranks, digests, 200));
  ASSERT_TRUE(r.has_value()) << errorOf(r);
  EXPECT_EQ(r.value().differing.size(), TriggerEvent::kMaxDifferingListed);
  EXPECT_EQ(r.value().differing_count, 100u);
  EXPECT_EQ(r.value().toJson()["differing_count"], 100);
  EXPECT_EQ(r.value().text(), "param:fc1.weight at iteration 30: 100 of 200 ranks differ");
}

TEST(ReplicaReports, StatusKeepsTheCountAndTheLast) {
  ReplicaReports reports;
  EXPECT_EQ(reports.count(), 0u);
  EXPECT_EQ(reports.last(), nullptr);
  reports.record(ReplicaReports::check(report({1}, {4, 9}, 2)).value());
  reports.record(ReplicaReports::check(report({0}, {4, 9, 9}, 3)).value());
  EXPECT_EQ(reports.count(), 2u);
  ASSERT_NE(reports.last(), nullptr);
  EXPECT_EQ(*reports.last(), "param:fc1.weight at iteration 30: rank 0 of 3 differs");
}

}  // namespace
}  // namespace dumpd::daemon
