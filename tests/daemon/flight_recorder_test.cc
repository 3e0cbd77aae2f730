// FlightRecorder's policy on its own: what it keeps and hands back, what a trigger writes,
// when it stops recording, the loss trigger, giving ring space back, and the triggers.jsonl
// line. Kept records are identified by their ring slot; their tasks are never looked at.
#include "daemon/flight_recorder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/utf8.h"

namespace dumpd::daemon {
namespace {

using config::RecorderTrigger;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

config::FlightRecorderPlan plan(uint32_t steps = 4, uint64_t max_bytes = 1u << 20) {
  config::FlightRecorderPlan p;
  p.steps = steps;
  p.max_bytes = max_bytes;
  return p;
}

KeptRecord record(uint64_t slot) { return KeptRecord{nullptr, slot}; }

std::vector<uint64_t> slots(const std::vector<KeptRecord>& records) {
  std::vector<uint64_t> out;
  for (const KeptRecord& r : records) out.push_back(r.slot);
  return out;
}

std::vector<uint32_t> numbers(const std::vector<FlightRecorder::Kept::Iteration>& its) {
  std::vector<uint32_t> out;
  for (const auto& it : its) out.push_back(it.number);
  return out;
}

v1::RecorderStatus status(const FlightRecorder& r) {
  v1::RecorderStatus st;
  r.fillStatus(&st);
  return st;
}

TriggerEvent manual(uint32_t iteration) {
  TriggerEvent e;
  e.kind = RecorderTrigger::kManual;
  e.iteration = iteration;
  e.reason = "by hand";
  return e;
}

TEST(FlightRecorder, KeepHandsBackTheRecordsOfIterationsBeyondSteps) {
  FlightRecorder r(plan(/*steps=*/2));
  EXPECT_TRUE(r.keep(1, record(10), 8).empty());
  EXPECT_TRUE(r.keep(1, record(11), 8).empty());
  EXPECT_TRUE(r.keep(2, record(20), 8).empty());
  EXPECT_EQ(slots(r.keep(3, record(30), 8)), (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(r.keptIterations(), 2u);
  ASSERT_NE(r.newest(), nullptr);
  EXPECT_EQ(r.newest()->number, 3u);
  const v1::RecorderStatus st = status(r);
  EXPECT_EQ(st.steps(), 2u);
  EXPECT_EQ(st.kept_iterations(), 2u);
  EXPECT_EQ(st.kept_bytes(), 16u);
  EXPECT_EQ(st.not_kept_whole(), 0u);
}

TEST(FlightRecorder, KeepHandsBackTheOldestRecordsBeyondMaxBytes) {
  FlightRecorder r(plan(/*steps=*/4, /*max_bytes=*/100));
  EXPECT_TRUE(r.keep(1, record(10), 60).empty());
  EXPECT_EQ(slots(r.keep(2, record(20), 60)), (std::vector<uint64_t>{10}));
  // Iteration 2 alone cannot hold a second record: that record comes back at once.
  EXPECT_EQ(slots(r.keep(2, record(21), 60)), (std::vector<uint64_t>{21}));
  const v1::RecorderStatus st = status(r);
  EXPECT_EQ(st.kept_iterations(), 1u);
  EXPECT_EQ(st.kept_bytes(), 60u);
  EXPECT_EQ(st.not_kept_whole(), 1u);
}

TEST(FlightRecorder, WritesNothingBeforeATriggerThenTheKeptIterationsThroughAfterSteps) {
  config::FlightRecorderPlan p = plan(/*steps=*/3);
  p.after_steps = 2;
  FlightRecorder r(p);
  for (uint32_t it = 5; it <= 7; ++it) r.keep(it, record(it), 8);
  for (uint32_t it = 0; it <= 12; ++it) EXPECT_FALSE(r.writes(it)) << it;

  TriggerEvent e = manual(7);
  r.fire(e);
  EXPECT_FALSE(r.writes(4));
  for (uint32_t it = 5; it <= 9; ++it) EXPECT_TRUE(r.writes(it)) << it;
  EXPECT_FALSE(r.writes(10));
}

TEST(FlightRecorder, FireHandsOverTheKeptIterationsOldestFirst) {
  FlightRecorder r(plan(/*steps=*/3));
  r.keep(5, record(50), 8);
  r.keep(5, record(51), 8);
  r.keep(6, record(60), 8);
  r.keep(7, record(70), 8);
  TriggerEvent e = manual(7);
  const std::vector<FlightRecorder::Kept::Iteration> kept = r.fire(e);
  EXPECT_EQ(numbers(kept), (std::vector<uint32_t>{5, 6, 7}));
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(slots(kept[0].items), (std::vector<uint64_t>{50, 51}));
  EXPECT_TRUE(e.written.empty());  // what was written, the drain says (TriggerOutcome)
  EXPECT_EQ(r.keptIterations(), 0u);
  const v1::RecorderStatus st = status(r);
  EXPECT_EQ(st.kept_iterations(), 0u);
  EXPECT_EQ(st.kept_bytes(), 0u);
  EXPECT_EQ(st.triggers(), 1u);
  EXPECT_EQ(st.last_trigger(), "manual at iteration 7: by hand");
}

TEST(FlightRecorder, AFireWithNothingKeptWritesFromTheTriggersIteration) {
  config::FlightRecorderPlan p = plan();
  p.after_steps = 1;
  FlightRecorder r(p);
  TriggerEvent e = manual(3);
  EXPECT_TRUE(r.fire(e).empty());
  EXPECT_TRUE(e.written.empty());
  EXPECT_FALSE(r.writes(2));
  EXPECT_TRUE(r.writes(3));
  EXPECT_TRUE(r.writes(4));
  EXPECT_FALSE(r.writes(5));
}

TEST(FlightRecorder, RecordingStopsAfterMaxTriggers) {
  config::FlightRecorderPlan p = plan();
  p.max_triggers = 2;
  FlightRecorder r(p);
  EXPECT_TRUE(r.recording());
  TriggerEvent first = manual(1);
  r.fire(first);
  EXPECT_TRUE(r.recording());
  EXPECT_TRUE(r.accepts(RecorderTrigger::kManual));
  TriggerEvent second = manual(2);
  r.fire(second);
  EXPECT_FALSE(r.recording());
  EXPECT_FALSE(r.accepts(RecorderTrigger::kManual));
  const v1::RecorderStatus st = status(r);
  EXPECT_FALSE(st.recording());
  EXPECT_EQ(st.triggers(), 2u);
}

TEST(FlightRecorder, MaxTriggersZeroNeverStopsRecording) {
  config::FlightRecorderPlan p = plan();
  p.max_triggers = 0;
  FlightRecorder r(p);
  for (uint32_t i = 0; i < 5; ++i) {
    TriggerEvent e = manual(i);
    r.fire(e);
  }
  EXPECT_TRUE(r.recording());
  EXPECT_EQ(status(r).triggers(), 5u);
}

TEST(FlightRecorder, AcceptsOnlyTheTriggersOfItsBitmask) {
  config::FlightRecorderPlan p = plan();
  p.triggers = (1u << static_cast<unsigned>(RecorderTrigger::kNan)) |
               (1u << static_cast<unsigned>(RecorderTrigger::kManual));
  FlightRecorder r(p);
  EXPECT_TRUE(r.accepts(RecorderTrigger::kNan));
  EXPECT_FALSE(r.accepts(RecorderTrigger::kInf));
  EXPECT_FALSE(r.accepts(RecorderTrigger::kLossSpike));
  EXPECT_FALSE(r.accepts(RecorderTrigger::kCrash));
  EXPECT_TRUE(r.accepts(RecorderTrigger::kManual));
  EXPECT_TRUE(r.checksValues());

  p.triggers = 1u << static_cast<unsigned>(RecorderTrigger::kManual);
  EXPECT_FALSE(FlightRecorder(p).checksValues());
  p.triggers = 1u << static_cast<unsigned>(RecorderTrigger::kInf);
  EXPECT_TRUE(FlightRecorder(p).checksValues());
}

TEST(FlightRecorder, ALossSpikeYieldsAnEventWithTheWindowAndTheNewLoss) {
  config::FlightRecorderPlan p = plan();
  p.loss_window = 3;
  p.loss_factor = 2.0;
  FlightRecorder r(p);
  EXPECT_FALSE(r.onLoss(1, 1.0));
  EXPECT_FALSE(r.onLoss(2, 1.5));
  EXPECT_FALSE(r.onLoss(3, 1.0));
  EXPECT_FALSE(r.onLoss(4, 2.0));  // 2 x median 1.0 is not above it
  std::optional<TriggerEvent> e = r.onLoss(5, 9.0);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, RecorderTrigger::kLossSpike);
  EXPECT_EQ(e->iteration, 5u);
  EXPECT_EQ(e->losses, (std::vector<double>{1.5, 1.0, 2.0, 9.0}));
  EXPECT_EQ(e->reason, "loss 9 > 2 x median 1.5 of the last 3");
}

TEST(FlightRecorder, ANanLossYieldsAnEventAtOnce) {
  config::FlightRecorderPlan p = plan();
  p.loss_window = 3;
  FlightRecorder r(p);
  EXPECT_FALSE(r.onLoss(1, 2.0));
  std::optional<TriggerEvent> e = r.onLoss(2, kNan);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, RecorderTrigger::kLossSpike);
  EXPECT_EQ(e->reason, "loss nan");
  ASSERT_EQ(e->losses.size(), 2u);
  EXPECT_EQ(e->losses[0], 2.0);
  EXPECT_TRUE(std::isnan(e->losses[1]));
}

TEST(FlightRecorder, DiscardForSpaceTakesTheOldestIterationsThenTheCurrentOnesRecords) {
  FlightRecorder r(plan(/*steps=*/4));
  r.keep(1, record(10), 8);
  r.keep(2, record(20), 8);
  r.keep(3, record(30), 8);
  r.keep(3, record(31), 8);
  EXPECT_EQ(slots(r.discardForSpace()), (std::vector<uint64_t>{10}));
  EXPECT_EQ(slots(r.discardForSpace()), (std::vector<uint64_t>{20}));
  v1::RecorderStatus st = status(r);
  EXPECT_EQ(st.discarded_for_space(), 2u);
  EXPECT_EQ(st.not_kept_whole(), 0u);
  EXPECT_EQ(st.kept_iterations(), 1u);

  // Only the current iteration is left: its records go, and it is no longer whole. It is
  // cut short, not discarded (discarded_for_space counts whole iterations).
  EXPECT_EQ(slots(r.discardForSpace()), (std::vector<uint64_t>{30, 31}));
  st = status(r);
  EXPECT_EQ(st.not_kept_whole(), 1u);
  EXPECT_EQ(st.discarded_for_space(), 2u);
  EXPECT_EQ(st.kept_bytes(), 0u);
  EXPECT_TRUE(r.discardForSpace().empty());

  // Its later records are kept again.
  EXPECT_TRUE(r.keep(3, record(32), 8).empty());
  EXPECT_EQ(status(r).kept_bytes(), 8u);
  EXPECT_EQ(slots(r.releaseAll()), (std::vector<uint64_t>{32}));
  EXPECT_EQ(r.keptIterations(), 0u);
}

TEST(FlightRecorder, StatusShowsTheWarning) {
  FlightRecorder r(plan());
  EXPECT_EQ(status(r).warning(), "");
  r.setWarning("the ring cannot hold 4 iterations");
  EXPECT_EQ(status(r).warning(), "the ring cannot hold 4 iterations");
}

TEST(TriggerEvent, AJsonLineNamesTheOpAndTheIterationsWritten) {
  TriggerEvent e;
  e.kind = RecorderTrigger::kNan;
  e.iteration = 17;
  e.reason = "NaN in Default/Mul-op3 output 0";
  e.op_name = "Default/Mul-op3";
  e.tensor = "output 0";
  e.written = {15, 16, 17, 18};
  const nlohmann::json j = nlohmann::json::parse(e.toJsonLine(1234, 2));
  EXPECT_EQ(j["time_us"], 1234);
  EXPECT_EQ(j["rank"], 2);
  EXPECT_EQ(j["kind"], "nan");
  EXPECT_EQ(j["iteration"], 17);
  EXPECT_EQ(j["op"], "Default/Mul-op3");
  EXPECT_EQ(j["tensor"], "output 0");
  EXPECT_EQ(j["reason"], "NaN in Default/Mul-op3 output 0");
  EXPECT_EQ(j["iterations_written"], nlohmann::json({15, 16, 17, 18}));
  EXPECT_FALSE(j.contains("losses"));
  EXPECT_EQ(e.summary(), "nan at iteration 17: Default/Mul-op3 output 0");
}

TEST(TriggerEvent, NonFiniteLossesAreWrittenAsStrings) {
  TriggerEvent e;
  e.kind = RecorderTrigger::kLossSpike;
  e.iteration = 3;
  e.losses = {1.5, kNan, kInf, -kInf};
  const std::string line = e.toJsonLine(0, 0);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["kind"], "loss_spike");
  EXPECT_EQ(j["losses"], nlohmann::json({1.5, "nan", "inf", "-inf"}));
  EXPECT_FALSE(j.contains("op"));
  EXPECT_EQ(j["iterations_written"], nlohmann::json::array());
}

TEST(TriggerEvent, InvalidUtf8InTheReasonIsReplaced) {
  TriggerEvent e = manual(1);
  e.reason = "bad \xff\xfe byte";
  const nlohmann::json j = nlohmann::json::parse(e.toJsonLine(0, 0));
  EXPECT_EQ(j["kind"], "manual");
  EXPECT_EQ(j["reason"], "bad \xef\xbf\xbd\xef\xbf\xbd byte");  // U+FFFD each
}

TEST(TriggerEvent, LongListsAreSummarisedSoALineStaysSmall) {
  TriggerEvent e;
  e.kind = RecorderTrigger::kLossSpike;
  e.iteration = 100000;
  for (int i = 0; i < 100000; ++i) e.losses.push_back(i);
  for (uint32_t i = 0; i < 50000; ++i) e.written.push_back(i < 10 ? i : i + 100);
  const std::string line = e.toJsonLine(0, 0);
  EXPECT_LT(line.size(), 4096u);
  const nlohmann::json j = nlohmann::json::parse(line);
  ASSERT_EQ(j["losses"].size(), 64u);
  EXPECT_EQ(j["losses"].back(), 99999.0);  // the newest, the new loss last
  EXPECT_EQ(j["losses_count"], 100000);
  ASSERT_EQ(j["iterations_written"].size(), 64u);
  EXPECT_EQ(j["iterations_written"][0], 0);
  EXPECT_EQ(j["iterations_written_count"], 50000);
  EXPECT_EQ(j["iterations_written_ranges"], "0-9|110-50099");
}

TEST(FlightRecorder, KeepsAtMostMaxKeptRecordsWhateverTheirBytes) {
  FlightRecorder r(plan(/*steps=*/4, /*max_bytes=*/uint64_t{1} << 40));
  const uint64_t cap = FlightRecorder::kMaxKeptRecords;
  for (uint64_t i = 0; i < cap; ++i) ASSERT_TRUE(r.keep(1, record(i), 1).empty()) << i;
  // One iteration holds the cap: the next record is handed back, the iteration not kept whole.
  EXPECT_EQ(slots(r.keep(1, record(cap), 1)), (std::vector<uint64_t>{cap}));
  EXPECT_EQ(status(r).not_kept_whole(), 1u);
  // A new iteration makes room by discarding the old one.
  EXPECT_EQ(r.keep(2, record(cap + 1), 1).size(), cap);
}

TEST(FlightRecorder, RecordsTheDaemonMemoryBudgetRefusesAreCountedInStatus) {
  ByteBudget budget(1000);
  FlightRecorder a(plan(4)), b(plan(4));
  a.setMemoryBudget(&budget);
  b.setMemoryBudget(&budget);
  EXPECT_TRUE(a.keep(1, record(1), 8, 900).empty());
  EXPECT_EQ(slots(b.keep(1, record(2), 8, 200)), (std::vector<uint64_t>{2}));
  EXPECT_EQ(status(b).refused_for_memory(), 1u);
  EXPECT_EQ(status(a).refused_for_memory(), 0u);
  a.releaseAll();
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_TRUE(b.keep(1, record(3), 8, 200).empty());
}

TEST(FlightRecorder, LastTriggerIsValidUtf8CutBetweenCharacters) {
  FlightRecorder r(plan(4));
  TriggerEvent e = manual(1);
  e.op_name = "op\xff\xfe";
  e.tensor = "output 0";
  r.fire(e);
  EXPECT_EQ(status(r).last_trigger(), "manual at iteration 1: op\xef\xbf\xbd\xef\xbf\xbd output 0");
  TriggerEvent long_reason = manual(2);
  long_reason.reason.clear();
  for (int i = 0; i < 600; ++i) long_reason.reason += "\xc3\xa9";
  FlightRecorder r2(plan(4));
  r2.fire(long_reason);
  const std::string last = status(r2).last_trigger();
  EXPECT_LE(last.size(), 1024u);
  EXPECT_TRUE(isValidUtf8(last));
}

}  // namespace
}  // namespace dumpd::daemon
