// TriggerOutcome: a trigger's triggers.jsonl line lists exactly the iterations written, and
// each one it was to write but did not, with why (issue 38).
#include "daemon/trigger_outcome.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dumpd::daemon {
namespace {

TriggerEvent manualAt(uint32_t iteration) {
  TriggerEvent e;
  e.kind = config::RecorderTrigger::kManual;
  e.iteration = iteration;
  return e;
}

std::vector<std::tuple<uint32_t, uint32_t, std::string>> missed(const TriggerEvent& e) {
  std::vector<std::tuple<uint32_t, uint32_t, std::string>> out;
  for (const auto& n : e.not_written) out.emplace_back(n.first, n.last, n.why);
  return out;
}

TEST(TriggerOutcome, ACloseBeforeTheLastIterationListsOnlyWhatWasWritten) {
  // A trigger at 7 writing 3 more; the job closes after 9: 10 never existed.
  TriggerOutcome o(manualAt(7), 10);
  o.kept(5, 3, 3, true);
  o.kept(6, 3, 3, true);
  o.kept(7, 1, 1, true);
  for (uint32_t i : {7u, 8u, 9u}) o.wrote(i);
  for (uint32_t i : {7u, 8u}) o.stepDone(i);
  const TriggerEvent e = o.close(9, "the job closed its session first");
  EXPECT_EQ(e.written, (std::vector<uint32_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(missed(e), (decltype(missed(e)){{10, 10, "the job closed its session first"}}));
  EXPECT_TRUE(e.not_whole.empty());
}

TEST(TriggerOutcome, ACrashAfterAStepMarkDoesNotListTheIterationWithNoRecord) {
  // Kept 22-24, then the step mark of 25 and a SIGKILL: 25 has no record.
  TriggerOutcome o(manualAt(25), 25);
  for (uint32_t i : {22u, 23u, 24u}) o.kept(i, 4, 4, true);
  const TriggerEvent e = o.close(25, "the job went away first");
  EXPECT_EQ(e.written, (std::vector<uint32_t>{22, 23, 24}));
  EXPECT_EQ(missed(e), (decltype(missed(e)){{25, 25, "the job went away first"}}));
}

TEST(TriggerOutcome, AnIterationDiscardedForSpaceIsNotWrittenAndSaysWhy) {
  // The current iteration's records were discarded to free ring space: 18-19 on disk.
  TriggerOutcome o(manualAt(20), 20);
  o.kept(18, 5, 5, true);
  o.kept(19, 2, 2, false);
  o.kept(20, 0, 0, false);
  o.stepDone(20);
  const TriggerEvent e = o.close(20, "");
  EXPECT_EQ(e.written, (std::vector<uint32_t>{18, 19}));
  ASSERT_EQ(e.not_written.size(), 1u);
  EXPECT_EQ(e.not_written[0].first, 20u);
  EXPECT_NE(e.not_written[0].why.find("discarded to make room"), std::string::npos);
  ASSERT_EQ(e.not_whole.size(), 1u);
  EXPECT_EQ(e.not_whole[0].iteration, 19u);
}

TEST(TriggerOutcome, IterationsTheJobSkippedOrFilteredOutAreToldApart) {
  // A window of 10-1000010: 10 written, 11 ran with nothing selected, the job jumped from 11
  // to 15, 15 written, then it closed. Ranges keep the line small however wide the window.
  TriggerOutcome o(manualAt(10), 1000010);
  o.wrote(10);
  o.stepDone(10);
  o.stepDone(11);
  o.wrote(15);
  const TriggerEvent e = o.close(15, "the job closed its session first");
  EXPECT_EQ(e.written, (std::vector<uint32_t>{10, 15}));
  const auto m = missed(e);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0], std::make_tuple(11u, 11u, std::string("no op of it passed the job's filters")));
  EXPECT_EQ(std::get<0>(m[1]), 12u);
  EXPECT_EQ(std::get<1>(m[1]), 14u);
  EXPECT_NE(std::get<2>(m[1]).find("did not run it"), std::string::npos);
  EXPECT_EQ(m[2], std::make_tuple(16u, 1000010u, std::string("the job closed its session first")));
}

TEST(TriggerOutcome, TheJournalLineAndTheLogSayBoth) {
  TriggerOutcome o(manualAt(7), 10);
  o.kept(6, 1, 1, false);
  o.wrote(7);
  const TriggerEvent e = o.close(7, "the job went away first");
  const auto j = nlohmann::json::parse(e.toJsonLine(1, 0));
  EXPECT_EQ(j["iterations_written"], nlohmann::json({6, 7}));
  ASSERT_EQ(j["iterations_not_written"].size(), 1u);
  EXPECT_EQ(j["iterations_not_written"][0]["first"], 8);
  EXPECT_EQ(j["iterations_not_written"][0]["last"], 10);
  EXPECT_EQ(j["iterations_not_whole"][0]["iteration"], 6);
  EXPECT_EQ(e.outcomeSummary(),
            "wrote iterations 6-7; not written: 8-10 (the job went away first); 1 written in "
            "part (first: 6)");
}

TEST(TriggerOutcome, TensorsLostOnTheClientsDeviceAreNotCalledFiltered) {
  // Kept 6-7 on the device: 6 lost whole, 7 in part; 9 came after the trigger, still on the
  // device, and was lost too. Nothing of it "passed no filter".
  TriggerOutcome o(manualAt(8), 9);
  o.kept(6, 3, 0, true);
  o.kept(7, 3, 1, true);
  o.kept(8, 2, 2, true);
  o.stepDone(8);
  o.lost(9);
  o.stepDone(9);
  const TriggerEvent e = o.close(9, "");
  EXPECT_EQ(e.written, (std::vector<uint32_t>{7, 8}));
  const auto m = missed(e);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(std::get<0>(m[0]), 6u);
  EXPECT_NE(std::get<2>(m[0]).find("client's device"), std::string::npos);
  EXPECT_EQ(std::get<0>(m[1]), 9u);
  EXPECT_NE(std::get<2>(m[1]).find("client's device"), std::string::npos);
  ASSERT_EQ(e.not_whole.size(), 1u);
  EXPECT_EQ(e.not_whole[0].iteration, 7u);
}

TEST(TriggerOutcome, AnIterationWrittenInPartSaysWhyForItsManifestLine) {
  TriggerOutcome o(manualAt(8), 9);
  o.kept(6, 3, 3, false);  // some records discarded for room
  o.kept(7, 3, 1, true);   // some tensors lost on the device
  o.kept(8, 2, 2, true);
  EXPECT_NE(o.cutShort(6).find("discarded to make room"), std::string::npos);
  EXPECT_NE(o.cutShort(7).find("client's device"), std::string::npos);
  EXPECT_EQ(o.cutShort(8), "");
  o.wrote(9);
  o.lost(9);
  EXPECT_NE(o.cutShort(9).find("client's device"), std::string::npos);
}

TEST(TriggerOutcome, NothingWrittenIsSaid) {
  TriggerOutcome o(manualAt(3), 3);
  const TriggerEvent e = o.close(std::nullopt, "the job closed its session first");
  EXPECT_TRUE(e.written.empty());
  EXPECT_EQ(missed(e), (decltype(missed(e)){{3, 3, "the job closed its session first"}}));
  EXPECT_EQ(e.outcomeSummary().rfind("wrote no iteration", 0), 0u);
}

TEST(TriggerOutcome, IterationsOutsideTheWindowAreNotRemembered) {
  // Issue 48: a manual trigger near the top of the iteration space, then step marks of many
  // distinct lower iterations: the old outcome remembered each one (about 50 MB/s of daemon
  // heap). Only the window's iterations (and the kept ones) are remembered.
  const uint32_t at = 4294960000u;
  TriggerOutcome o(manualAt(at), at + 1024);
  o.kept(at - 1, 2, 2, true);
  for (uint32_t i = 0; i < 200000; ++i) {
    o.stepDone(i);
    o.wrote(i);
    o.lost(i);
  }
  EXPECT_EQ(o.remembered(), 1u);  // the kept iteration
  for (uint32_t i = at; i <= at + 1024; ++i) o.stepDone(i);
  EXPECT_EQ(o.remembered(), 1u + 1025u);
  const TriggerEvent e = o.close(at + 1024, "");
  EXPECT_EQ(e.written, (std::vector<uint32_t>{at - 1}));
  ASSERT_EQ(e.not_written.size(), 1u);  // every window iteration ran with nothing selected
  EXPECT_EQ(e.not_written[0].first, at);
  EXPECT_EQ(e.not_written[0].last, at + 1024);
}

TEST(TriggerOutcome, AnIterationGivenUpForMemoryIsListedWithWhy) {
  // Issue 48: an iteration the recorder discarded for recorder_memory_bytes was counted
  // nowhere: the trigger listed neither it nor why.
  TriggerOutcome o(manualAt(12), 12);
  o.givenUpForMemory(9);
  o.kept(10, 2, 2, true);
  o.kept(11, 2, 2, true);
  o.kept(12, 1, 1, true);
  o.stepDone(12);
  const TriggerEvent e = o.close(12, "");
  EXPECT_EQ(e.written, (std::vector<uint32_t>{10, 11, 12}));
  ASSERT_EQ(e.not_written.size(), 1u);
  EXPECT_EQ(e.not_written[0].first, 9u);
  EXPECT_NE(e.not_written[0].why.find("recorder_memory_bytes was used up"), std::string::npos)
      << e.not_written[0].why;
}

}  // namespace
}  // namespace dumpd::daemon
