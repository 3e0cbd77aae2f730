// RingDrain and a client's report that replicas differ (docs/replicas.md): journalled in
// replicas.jsonl with or without a flight recorder, a "replica_mismatch" trigger when the
// recorder takes it, and a malformed report skipped with a warning, the session going on.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/ring_drain.h"
#include "tests/daemon/ring_drain_fixture.h"

namespace dumpd::daemon::testing {
namespace {

class RingDrainReplicaTest : public RingDrainTest {
 protected:
  void reportMismatch(uint32_t iteration, std::vector<uint32_t> ranks,
                      std::vector<uint64_t> digests) {
    v1::Control ctl;
    v1::ReplicaMismatch* m = ctl.mutable_replica_mismatch();
    m->set_iteration(iteration);
    m->set_tensor("param:fc1.weight");
    for (uint32_t r : ranks) m->add_ranks(r);
    for (uint64_t d : digests) m->add_digests(d);
    m->set_group_size(static_cast<uint32_t>(digests.size()));
    ring_.control(ctl);
  }
  std::vector<nlohmann::json> replicaLines() const { return journalLines("replicas.jsonl"); }
};

TEST_F(RingDrainReplicaTest, AMismatchFiresTheRecorderAndIsJournalled) {
  auto d = make(recorderConfig(R"({"saved_data": "full", "after_steps": 0})"));
  ring_.step(0, 4);
  const uint64_t kept = ring_.op("x", 4, {1.0f});
  ring_.step(0, 5);
  reportMismatch(4, {3}, {8, 8, 8, 9});
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  const std::vector<nlohmann::json> lines = replicaLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["tensor"], "param:fc1.weight");
  EXPECT_EQ(lines[0]["iteration"], 4);
  EXPECT_EQ(lines[0]["differing"][0]["rank"], 3);
  const std::vector<nlohmann::json> triggers = triggerLines();
  ASSERT_EQ(triggers.size(), 1u);
  EXPECT_EQ(triggers[0]["kind"], "replica_mismatch");
  EXPECT_EQ(triggers[0]["iteration"], 5) << "fired during the step the report came in";
  EXPECT_EQ(triggers[0]["reason"], "param:fc1.weight at iteration 4: rank 3 of 4 differs");
  EXPECT_EQ(triggers[0]["replicas"]["majority_digest"], "0000000000000008");
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/4"),
            (std::vector<std::string>{npyName("x", kept), "statistic.csv"}))
      << "the kept iteration is written";
  EXPECT_EQ(d->replicaReports().count(), 1u);
}

TEST_F(RingDrainReplicaTest, WithoutARecorderTheMismatchIsStillJournalledAndCounted) {
  auto d = make();
  ring_.step(0, 1);
  reportMismatch(1, {0}, {1, 2, 2});
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  EXPECT_EQ(replicaLines().size(), 1u);
  EXPECT_TRUE(triggerLines().empty());
  ASSERT_NE(d->replicaReports().last(), nullptr);
  EXPECT_EQ(*d->replicaReports().last(), "param:fc1.weight at iteration 1: rank 0 of 3 differs");
}

TEST_F(RingDrainReplicaTest, AMalformedReportIsSkippedAndTheSessionGoesOn) {
  auto d = make(recorderConfig(R"({"saved_data": "full", "after_steps": 0})"));
  ring_.step(0, 1);
  reportMismatch(1, {7}, {1, 2});  // rank 7 of a group of 2
  const uint64_t after = ring_.op("x", 1, {1.0f});
  ASSERT_TRUE(drainAll(*d)) << d->error();
  d->finish();
  EXPECT_NE(lastWarning(*d).find("rank 7 is outside its group"), std::string::npos)
      << lastWarning(*d);
  EXPECT_TRUE(replicaLines().empty());
  EXPECT_TRUE(triggerLines().empty());
  EXPECT_EQ(d->replicaReports().count(), 0u);
  EXPECT_GT(after, 0u);
}

TEST_F(RingDrainReplicaTest, ARecorderWithoutTheTriggerOnlyJournals) {
  auto d = make(recorderConfig(R"({"saved_data": "full", "triggers": ["manual"]})"));
  ring_.step(0, 1);
  reportMismatch(1, {1}, {5, 6});
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  EXPECT_EQ(replicaLines().size(), 1u);
  EXPECT_TRUE(triggerLines().empty());
}

}  // namespace
}  // namespace dumpd::daemon::testing
