// Runtime control's selections (daemon/runtime_selection.h): what a change keeps, the limits
// of an iteration list, the journal line, and which generation a client is bound to by when.
#include "daemon/runtime_selection.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace dumpd::daemon {
namespace {

Selection initial(std::string iteration = "0-9") {
  Selection s;
  s.iteration = std::move(iteration);
  return s;
}

v1::ControlChange iterationChange(const std::string& text) {
  v1::ControlChange c;
  c.set_iteration(text);
  return c;
}

v1::ControlChange pauseChange(bool paused) {
  v1::ControlChange c;
  c.set_paused(paused);
  return c;
}

// "0|2|4|..." with `n` separate ranges.
std::string separateRanges(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? "|" : "") + std::to_string(2 * i);
  return s;
}

TEST(RuntimeSelection, AChangeKeepsWhatItDoesNotName) {
  RuntimeSelection r(initial(), /*has_recorder=*/true);
  ASSERT_TRUE(r.change(pauseChange(true), 0, 1));
  auto next = r.change(iterationChange("0-100"), 0, 2);
  ASSERT_TRUE(next);
  EXPECT_TRUE(next.value().paused);  // not mentioned: still paused
  EXPECT_EQ(next.value().iteration, "0-100");
  EXPECT_EQ(next.value().generation, 2u);
  v1::ControlChange off;
  off.set_recorder_on(false);
  next = r.change(off, 0, 3);
  ASSERT_TRUE(next);
  EXPECT_TRUE(next.value().paused);
  EXPECT_EQ(next.value().iteration, "0-100");
  EXPECT_FALSE(next.value().recorder_on);
}

TEST(RuntimeSelection, TheParsedListComesWithTheSelection) {
  RuntimeSelection r(initial(), false);
  auto next = r.change(iterationChange("7 | 3-5"), 0, 1);
  ASSERT_TRUE(next);
  ASSERT_NE(next.value().iterations, nullptr);
  EXPECT_TRUE(next.value().iterations->contains(4));
  EXPECT_FALSE(next.value().iterations->contains(6));
  EXPECT_EQ(next.value().iteration, "3-5|7");
  ASSERT_NE(r.find(0).value().iterations, nullptr);
  EXPECT_TRUE(r.find(0).value().iterations->contains(9));
}

TEST(RuntimeSelection, ListsPastTheLimitsAreRefusedNamingThem) {
  RuntimeSelection r(initial(), false);
  auto many =
      r.change(iterationChange(separateRanges(RuntimeSelection::kMaxIterationRanges + 1)), 0, 1);
  ASSERT_FALSE(many);
  EXPECT_EQ(many.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(many.error().message.find("4097 separate ranges"), std::string::npos);
  EXPECT_NE(many.error().message.find("at most 4096"), std::string::npos);
  const std::string huge(RuntimeSelection::kMaxIterationBytes + 1, '1');
  auto big = r.change(iterationChange(huge), 0, 1);
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message.find("at most 65536"), std::string::npos);
  EXPECT_FALSE(r.changed());
  // At the limit: accepted.
  EXPECT_TRUE(
      r.change(iterationChange(separateRanges(RuntimeSelection::kMaxIterationRanges)), 0, 1));
}

TEST(RuntimeSelection, JournalLinesSummariseLongListsAndNameTheActor) {
  RuntimeSelection r(initial(), true);
  ASSERT_TRUE(r.change(iterationChange(separateRanges(3000)), 1001, 5));
  v1::ControlChange off;
  off.set_recorder_on(false);
  ASSERT_TRUE(r.change(off, std::nullopt, 6, 0, "the flight recorder stopped after max_triggers"));
  const std::vector<std::string> lines = r.takeJournal();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_LT(lines[0].size(), 1024u);
  const auto first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["uid"], 1001);
  EXPECT_EQ(first["old"]["iteration"], "0-9");
  const std::string summary = first["new"]["iteration"];
  EXPECT_EQ(summary.substr(0, 6), "0|2|4|");
  EXPECT_EQ(summary.substr(summary.size() - 4), "|...");
  EXPECT_EQ(first["new"]["iteration_ranges"], 3000);
  EXPECT_EQ(first["new"]["iteration_bytes"], separateRanges(3000).size());
  const auto second = nlohmann::json::parse(lines[1]);
  EXPECT_FALSE(second.contains("uid"));
  EXPECT_EQ(second["by"], "dumpd");
  EXPECT_EQ(second["reason"], "the flight recorder stopped after max_triggers");
  EXPECT_TRUE(r.takeJournal().empty());
}

TEST(RuntimeSelection, QueuedJournalLinesAreBoundedAndTheRestCounted) {
  RuntimeSelection r(initial(), false);
  for (size_t i = 0; i < RuntimeSelection::kMaxQueuedJournalLines + 10; ++i) {
    ASSERT_TRUE(r.change(pauseChange(i % 2 == 0), 0, i));
  }
  const std::vector<std::string> lines = r.takeJournal();
  ASSERT_EQ(lines.size(), RuntimeSelection::kMaxQueuedJournalLines + 1);
  EXPECT_EQ(nlohmann::json::parse(lines.back())["lines_not_journalled"], 10);
}

TEST(RuntimeSelection, AClientIsBoundToTheNewestChangeSentBeforeAPosition) {
  RuntimeSelection r(initial(), false);
  EXPECT_EQ(r.boundBefore(0), 0u);
  ASSERT_TRUE(r.change(pauseChange(true), 0, 1, /*ring_position=*/1000));
  ASSERT_TRUE(r.change(pauseChange(false), 0, 2, /*ring_position=*/5000));
  // A step mark ending at or before where the ring stood when a change was sent may have
  // been written before the client could know it.
  EXPECT_EQ(r.boundBefore(1000), 0u);
  EXPECT_EQ(r.boundBefore(1001), 1u);
  EXPECT_EQ(r.boundBefore(5000), 1u);
  EXPECT_EQ(r.boundBefore(5001), 2u);
}

TEST(RuntimeSelection, TheReplicaPeriodIsKeptCheckedAndJournalled) {
  RuntimeSelection r(initial(), false);
  v1::ControlChange every;
  every.set_replica_every(10);
  auto next = r.change(every, 0, 1);
  ASSERT_TRUE(next);
  EXPECT_EQ(next.value().replica_every, 10u);
  next = r.change(pauseChange(true), 0, 2);  // not named: kept
  ASSERT_TRUE(next);
  EXPECT_EQ(next.value().replica_every, 10u);
  auto same = r.change(every, 0, 3);
  ASSERT_FALSE(same);
  EXPECT_NE(same.error().message.find("replicas are already checked every 10 steps"),
            std::string::npos);
  for (uint32_t bad : {0u, RuntimeSelection::kMaxReplicaEvery + 1}) {
    v1::ControlChange c;
    c.set_replica_every(bad);
    auto refused = r.change(c, 0, 4);
    ASSERT_FALSE(refused) << bad;
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidConfig);
    EXPECT_NE(refused.error().message.find("--replica-every must be 1 .. 1000000"),
              std::string::npos);
  }
  const std::vector<std::string> lines = r.takeJournal();
  ASSERT_EQ(lines.size(), 2u);
  const auto first = nlohmann::json::parse(lines[0]);
  EXPECT_FALSE(first["old"].contains("replica_every"));
  EXPECT_EQ(first["new"]["replica_every"], 10);
}

TEST(RuntimeSelection, NothingToChangeIsRefused) {
  RuntimeSelection r(initial(), false);
  auto none = r.change(v1::ControlChange(), 0, 1);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kInvalidArgument);
  v1::ControlChange on;
  on.set_recorder_on(true);
  auto no_recorder = r.change(on, 0, 1);
  ASSERT_FALSE(no_recorder);
  EXPECT_NE(no_recorder.error().message.find("no flight recorder"), std::string::npos);
}

TEST(RuntimeSelection, AChangeThatChangesNothingIsRefusedSayingWhatHolds) {
  RuntimeSelection r(initial(), true);
  v1::ControlChange resume;
  resume.set_paused(false);
  auto refused = r.change(resume, 1000, 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(refused.error().message,
            "nothing to change: the session is not paused (nothing to resume)");
  EXPECT_EQ(r.current().generation, 0u);
  EXPECT_TRUE(r.takeJournal().empty());  // nothing journalled
  v1::ControlChange same;
  same.set_iteration(r.current().iteration);
  same.set_recorder_on(true);
  auto again = r.change(same, 1000, 2);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("the selection already is iteration"), std::string::npos);
  EXPECT_NE(again.error().message.find("the flight recorder is already on"), std::string::npos);
  // One thing changed is a change.
  v1::ControlChange pause_too = same;
  pause_too.set_paused(true);
  ASSERT_TRUE(r.change(pause_too, 1000, 3));
  auto paused_again = r.change(pause_too, 1000, 4);
  ASSERT_FALSE(paused_again);
  EXPECT_NE(paused_again.error().message.find("already paused"), std::string::npos);
}

TEST(RuntimeSelection, TheSelectionSaysWhoChangedItLast) {
  RuntimeSelection r(initial(), true);
  EXPECT_EQ(r.current().changed_by, "");
  v1::ControlChange pause;
  pause.set_paused(true);
  ASSERT_TRUE(r.change(pause, 1000, 1));
  EXPECT_EQ(r.current().changed_by, "uid 1000");
  v1::ControlChange off;
  off.set_recorder_on(false);
  ASSERT_TRUE(r.change(off, std::nullopt, 2, 0, "the flight recorder stopped after max_triggers"));
  EXPECT_EQ(r.current().changed_by, "dumpd (the flight recorder stopped after max_triggers)");
}

}  // namespace
}  // namespace dumpd::daemon
