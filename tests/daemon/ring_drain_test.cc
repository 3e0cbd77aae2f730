// RingDrain on its own, the test in the session thread's place: records the client commits
// (tensors, control records, void records) are handed to handle() one by one, and what the
// drain writes lands in a memory file system.
#include "daemon/ring_drain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tests/daemon/ring_drain_fixture.h"

namespace dumpd::daemon::testing {
namespace {

TEST_F(RingDrainTest, AVoidRecordCountsItsTensorsAsFailedAndIsReleased) {
  auto d = make();
  ASSERT_NE(ring_.ring().tryReserve(ipc::RecordKind::kOp, 256), nullptr);
  ring_.ring().voidRecord(ring_.ring().reservedSequence(), /*tensors_lost=*/3);
  ASSERT_TRUE(drainAll(*d));
  EXPECT_EQ(d->counters().records.load(), 1u);
  EXPECT_EQ(d->counters().tensors_received.load(), 3u);
  EXPECT_EQ(d->counters().tensors_failed.load(), 3u);
  EXPECT_EQ(lastWarning(*d), "the client could not fill a record (a device copy failed)");
  EXPECT_EQ(d->doneSequence(), 1u);
  EXPECT_EQ(ring_.ring().usedBytes(), 0u);
}

TEST_F(RingDrainTest, TensorsOfIterationsTheJobSkipsAreFilteredNotWritten) {
  auto d = make(jobConfig("full", "1"));
  ring_.op("early", 0, {1});
  ring_.op("dumped", 1, {2});
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  EXPECT_EQ(d->counters().tensors_filtered.load(), 1u);
  EXPECT_EQ(d->counters().tensors_written.load(), 1u);
  EXPECT_TRUE(filesUnder(*fs_, "rank_0/Net/0/0").empty());
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/1"),
            (std::vector<std::string>{"Add.dumped.0.0.2.output.0.DefaultFormat.float32.npy",
                                      "statistic.csv"}));
  EXPECT_EQ(d->doneSequence(), 2u);
}

TEST_F(RingDrainTest, AControlRecordWithInvalidUtf8IsSkippedNamingTheFieldNotTheSession) {
  // Issue 48: a trigger reason cut inside a character (an older client) ended the session
  // ("control record does not parse"); the job's next call failed with a broken pipe.
  auto d = make();
  ring_.op("before", 0, {1});
  v1::Control ctl;
  ctl.mutable_trigger()->set_reason(std::string("look \xe2\x82", 7));
  ring_.control(ctl);
  ring_.op("after", 0, {2});
  ASSERT_TRUE(drainAll(*d)) << d->error();
  d->finish();
  EXPECT_EQ(lastWarning(*d),
            "control record 2 is skipped: its string field dumpd.v1.Trigger.reason is not valid "
            "UTF-8 (protobuf strings must be)");
  EXPECT_EQ(d->counters().tensors_written.load(), 2u);
  EXPECT_EQ(d->doneSequence(), 3u);
}

TEST_F(RingDrainTest, ControlRecordsWriteTheGraphExecutionOrderAndConstants) {
  auto d = make();
  v1::Control graph;
  graph.mutable_graph()->set_ir_text("graph ir text");
  ring_.control(graph);
  v1::Control order;
  order.mutable_execution_order()->add_op_names("Default/Add-op1");
  order.mutable_execution_order()->add_op_names("Default/Mul-op2");
  ring_.control(order);
  v1::Control constant;
  v1::Constant* c = constant.mutable_constant();
  c->set_data_id("w");
  c->set_dtype(static_cast<uint32_t>(DType::kFloat32));
  c->add_shape(2);
  c->set_timestamp_us(7);
  c->set_data_bytes(8);
  ring_.control(constant, floatBytes({0.5f, 1.5f}));
  ASSERT_TRUE(drainAll(*d));
  d->finish();

  EXPECT_EQ(fs_->readFile("rank_0/graphs/ms_output_trace_code_graph_0.ir"), "graph ir text");
  EXPECT_EQ(fs_->readFile("rank_0/execution_order/ms_execution_order_graph_0.csv"),
            "NodeExecutionOrder-FullNameWithScope\nDefault/Add-op1\nDefault/Mul-op2\n");
  const std::string constant_file = "Parameter.data-w.0.0.7.output.0.DefaultFormat.float32.npy";
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/constants"),
            (std::vector<std::string>{constant_file, "statistic.csv"}));
  EXPECT_TRUE(fs_->readFile("rank_0/Net/0/constants/" + constant_file)
                  .value_or("")
                  .ends_with(floatBytes({0.5f, 1.5f})));
  EXPECT_EQ(d->counters().tensors_written.load(), 1u);
  EXPECT_EQ(lastWarning(*d), "");
  EXPECT_EQ(d->doneSequence(), 3u);
}

TEST_F(RingDrainTest, ARepeatOfATensorTheStepDidNotDumpFailsOnlyThatTensor) {
  auto d = make();
  const ipc::SamePayload same{/*sequence=*/99, /*tensor=*/0, /*reserved=*/0};
  commitOne("again", 1, ipc::PayloadKind::kSame,
            std::string(reinterpret_cast<const char*>(&same), sizeof same));
  ring_.op("next", 0, {1});
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  EXPECT_EQ(d->counters().tensors_failed.load(), 1u);
  EXPECT_EQ(d->counters().tensors_written.load(), 1u);
  EXPECT_EQ(lastWarning(*d),
            "record 1: a tensor of again repeats a tensor this step did not dump (lost, or over "
            "the limit of remembered tensors); it is not written");
}

TEST_F(RingDrainTest, DeviceStatisticsForAJobThatNeedsTheBytesAreRefused) {
  auto d = make(jobConfig("full"));
  commitOne("s", 4, ipc::PayloadKind::kStatistics, std::string(sizeof(ipc::StatsPayload), '\0'));
  EXPECT_FALSE(drainAll(*d));
  EXPECT_EQ(d->error(),
            "record 1: a tensor of s carries device statistics, but the job needs its bytes "
            "(saved_data, statistic_category or dtype)");
}

TEST_F(RingDrainTest, AControlRecordThatDoesNotParseIsRefused) {
  auto d = make();
  std::byte* body = ring_.ring().tryReserve(ipc::RecordKind::kControl, 16);
  ASSERT_NE(body, nullptr);
  const uint32_t len = 8;
  std::memcpy(body, &len, 4);
  std::memset(body + 8, 0xff, 8);  // a varint that never ends
  ring_.ring().commit();
  EXPECT_FALSE(drainAll(*d));
  EXPECT_EQ(d->error(), "control record does not parse");
}

// The flight recorder: the job selects no iteration the tests reach (recorderConfig), so every
// op record is kept in the ring until a trigger writes it or the recorder lets it go.

TEST_F(RingDrainTest, RecordedIterationsAreKeptInTheRingButSettled) {
  auto d = make(recorderConfig(R"({"steps": 3})"));
  ring_.step(0, 1);                             // 1
  ring_.op("a", 1, {1.0f});                     // 2
  ring_.step(0, 2);                             // 3
  const uint64_t b = ring_.op("b", 2, {2.0f});  // 4
  ASSERT_TRUE(drainAll(*d));
  EXPECT_TRUE(filesUnder(*fs_, "rank_0/Net").empty());
  EXPECT_EQ(d->counters().tensors_written.load(), 0u);
  EXPECT_EQ(d->counters().tensors_filtered.load(), 0u);
  // Held: the ring keeps their bytes, but a flush up to b is answered.
  EXPECT_EQ(d->doneSequence(), 1u);
  EXPECT_EQ(d->settledSequence(), b);
  EXPECT_GT(ring_.ring().usedBytes(), 0u);
  EXPECT_TRUE(d->recorderHoldsSpace());
  const v1::RecorderStatus st = recorderStatus(*d);
  EXPECT_TRUE(st.recording());
  EXPECT_EQ(st.kept_iterations(), 2u);
  EXPECT_GT(st.kept_bytes(), 0u);

  // Ending without a trigger writes nothing and gives the ring back.
  d->finish(RingDrain::SessionEnd::kClosed);
  EXPECT_TRUE(filesUnder(*fs_, "rank_0/Net").empty());
  EXPECT_FALSE(fs_->exists("rank_0/.dump_metadata/triggers.jsonl"));
  EXPECT_EQ(d->doneSequence(), b);
  EXPECT_EQ(ring_.ring().usedBytes(), 0u);
  EXPECT_EQ(recorderStatus(*d).kept_iterations(), 0u);
}

TEST_F(RingDrainTest, AManualTriggerWritesTheKeptIterationsWithTheRecordersSavedData) {
  // The job saves statistics only; the recorder writes full tensors.
  auto d = make(recorderConfig(R"({"steps": 2, "saved_data": "full", "after_steps": 1})"));
  ring_.step(0, 0);
  ring_.op("a", 0, {0.5f});  // discarded: not among the last 2 iterations at the trigger
  ring_.step(0, 1);
  const uint64_t b = ring_.op("b", 1, {1.5f});
  ring_.step(0, 2);
  const uint64_t c = ring_.op("c", 2, {2.5f});
  v1::Control trigger;
  trigger.mutable_trigger()->set_reason("by hand");
  ring_.control(trigger);
  ring_.step(0, 3);
  const uint64_t e = ring_.op("e", 3, {3.5f});  // after_steps: written as it comes
  ring_.step(0, 4);
  ring_.op("f", 4, {4.5f});  // max_triggers 1: no longer recorded
  ASSERT_TRUE(drainAll(*d));
  d->finish();

  EXPECT_TRUE(filesUnder(*fs_, "rank_0/Net/0/0").empty());
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/1"),
            (std::vector<std::string>{npyName("b", b), "statistic.csv"}));
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/2"),
            (std::vector<std::string>{npyName("c", c), "statistic.csv"}));
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/3"),
            (std::vector<std::string>{npyName("e", e), "statistic.csv"}));
  EXPECT_TRUE(filesUnder(*fs_, "rank_0/Net/0/4").empty());
  EXPECT_TRUE(fs_->readFile("rank_0/Net/0/1/" + npyName("b", b))
                  .value_or("")
                  .ends_with(floatBytes({1.5f})));
  EXPECT_EQ(d->counters().tensors_written.load(), 3u);
  EXPECT_EQ(d->counters().tensors_filtered.load(), 1u);
  EXPECT_EQ(ring_.ring().usedBytes(), 0u);

  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kind"], "manual");
  EXPECT_EQ(lines[0]["reason"], "by hand");
  EXPECT_EQ(lines[0]["iteration"], 2);
  EXPECT_EQ(lines[0]["iterations_written"], nlohmann::json({1, 2, 3}));
  const v1::RecorderStatus st = recorderStatus(*d);
  EXPECT_FALSE(st.recording());
  EXPECT_EQ(st.triggers(), 1u);
  EXPECT_EQ(st.last_trigger(), "manual at iteration 2: by hand");
}

TEST_F(RingDrainTest, ANanInAKeptTensorFiresAtTheEndOfItsStepNamingTheFirstOp) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  auto d = make(recorderConfig(R"({"steps": 2, "saved_data": "full", "after_steps": 0})"));
  ring_.step(0, 1);
  const uint64_t fine = ring_.op("fine", 1, {1.0f, 2.0f});
  const uint64_t bad = ring_.op("bad", 1, {1.0f, kNan});
  const uint64_t worse = ring_.op("worse", 1, {kNan});
  ASSERT_TRUE(drainAll(*d));
  EXPECT_TRUE(triggerLines().empty());  // the step is not over

  ring_.step(0, 2);
  ASSERT_TRUE(drainAll(*d));
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kind"], "nan");
  EXPECT_EQ(lines[0]["iteration"], 1);
  EXPECT_EQ(lines[0]["op"], "bad");
  EXPECT_EQ(lines[0]["tensor"], "output 0");
  EXPECT_EQ(lines[0]["reason"], "NaN in bad output 0");
  EXPECT_EQ(lines[0]["iterations_written"], nlohmann::json({1}));
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/1"),
            (std::vector<std::string>{npyName("bad", bad), npyName("fine", fine),
                                      npyName("worse", worse), "statistic.csv"}));
  d->finish();
}

TEST_F(RingDrainTest, AnInfinityFiresOnlyTheTriggersTheRecorderTakes) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  auto d = make(recorderConfig(R"({"triggers": ["inf"], "after_steps": 0})"));
  ring_.step(0, 1);
  ring_.op("nan_only", 1, {kNan});
  ring_.op("big", 1, {-kInf});
  ring_.step(0, 2);
  ASSERT_TRUE(drainAll(*d));
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kind"], "inf");
  EXPECT_EQ(lines[0]["op"], "big");
  EXPECT_EQ(lines[0]["reason"], "an infinity in big output 0");
  d->finish();
}

// The check once kept only the first non-finite view of a record: a NaN input hid the
// infinity of its output from a recorder that triggers on infinities only.
TEST_F(RingDrainTest, AnInfinityAfterANanInTheSameRecordFiresAnInfOnlyRecorder) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  auto d = make(recorderConfig(R"({"triggers": ["inf"], "after_steps": 0})"));
  ring_.step(0, 1);
  const std::vector<int64_t> shape{1};
  ipc::TensorSpec t[2];
  t[0].io = static_cast<uint8_t>(Io::kInput);
  t[1].io = static_cast<uint8_t>(Io::kOutput);
  for (ipc::TensorSpec& s : t) {
    s.dtype = static_cast<uint8_t>(DType::kFloat32);
    s.shape = shape;
    s.data_bytes = sizeof(float);
  }
  ipc::OpSpec op;
  op.iteration = 1;
  op.op_type = "Add";
  op.op_name = "mixed";
  op.tensors = std::span(t, 2);
  ring_.commit(ring_.reserve(op, {floatBytes({kNan}), floatBytes({kInf})}));
  ring_.step(0, 2);
  ASSERT_TRUE(drainAll(*d));
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u) << "the infinity in output 0 was missed";
  EXPECT_EQ(lines[0]["kind"], "inf");
  EXPECT_EQ(lines[0]["op"], "mixed");
  EXPECT_EQ(lines[0]["tensor"], "output 0");
  d->finish();
}

// Iterations 1 and 2 with op "fine" and a loss of 1, then iteration 3 begins with "fine".
class RingDrainLossTest : public RingDrainTest {
 protected:
  void twoCalmStepsThenIteration3() {
    for (uint32_t it = 1; it <= 2; ++it) {
      ring_.step(0, it);
      ring_.op("fine", it, {1.0f});
      reportLoss(it, 1.0);
    }
    ring_.step(0, 3);
    ring_.op("fine", 3, {1.0f});
  }
};

TEST_F(RingDrainLossTest, WhateverFiresFirstTheTriggerNamesTheFirstNonFiniteOp) {
  // A loss spike fires during iteration 3 before its NaN check would (max_triggers 1): the
  // trigger still names the first NaN in the kept iterations, op and tensor.
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  auto d = make(recorderConfig(
      R"({"triggers": ["loss_spike", "nan", "inf"], "saved_data": "full", "after_steps": 0,
          "loss_spike": {"window": 2, "factor": 2.0}})"));
  twoCalmStepsThenIteration3();
  ring_.op("first_bad", 3, {kNan});
  ring_.op("later_bad", 3, {kNan});
  reportLoss(3, 50.0);
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kind"], "loss_spike");
  EXPECT_EQ(lines[0]["first_nonfinite"],
            nlohmann::json::parse(
                R"({"iteration": 3, "op": "first_bad", "tensor": "output 0", "value": "nan"})"));
  EXPECT_NE(recorderStatus(*d).last_trigger().find("first NaN: first_bad output 0 at iteration 3"),
            std::string::npos)
      << recorderStatus(*d).last_trigger();
}

TEST_F(RingDrainLossTest, WithoutANanTriggerTheWritersNameTheFirstNonFiniteOp) {
  // Issue 48: a job with triggers ["loss_spike"] whose loss turned NaN got no
  // first_nonfinite: only a nan or inf trigger checked the kept records. The writers check
  // what a trigger writes, kept iterations and those after it, in execution order.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  auto d = make(recorderConfig(
      R"({"triggers": ["loss_spike"], "saved_data": "full", "after_steps": 1,
          "loss_spike": {"window": 2, "factor": 2.0}})"));
  twoCalmStepsThenIteration3();
  ring_.op("first_bad", 3, {1.0f, kInf});
  ring_.op("later_bad", 3, {kNan});
  reportLoss(3, std::numeric_limits<double>::quiet_NaN());
  ring_.step(0, 4);
  ring_.op("after", 4, {kNan});
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kind"], "loss_spike");
  EXPECT_EQ(lines[0]["iterations_written"], nlohmann::json({1, 2, 3, 4}));
  EXPECT_EQ(lines[0]["first_nonfinite"],
            nlohmann::json::parse(
                R"({"iteration": 3, "op": "first_bad", "tensor": "output 0", "value": "inf"})"));
}

TEST_F(RingDrainTest, ALossSpikeWritesTheKeptIterations) {
  auto d = make(recorderConfig(
      R"({"triggers": ["loss_spike"], "saved_data": "full", "after_steps": 0,
          "loss_spike": {"window": 2, "factor": 2.0}})"));
  std::vector<uint64_t> seq;
  for (uint32_t it = 1; it <= 3; ++it) {
    ring_.step(0, it);
    seq.push_back(ring_.op("x", it, {static_cast<float>(it)}));
    reportLoss(it, it == 3 ? 5.0 : 1.0);
  }
  ASSERT_TRUE(drainAll(*d));
  // Journalled once iteration 3, its last, is done: here when the session ends.
  EXPECT_TRUE(triggerLines().empty());
  d->finish();
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kind"], "loss_spike");
  EXPECT_EQ(lines[0]["iteration"], 3);
  EXPECT_EQ(lines[0]["losses"], nlohmann::json({1.0, 1.0, 5.0}));
  EXPECT_EQ(lines[0]["reason"], "loss 5 > 2 x median 1 of the last 2");
  EXPECT_EQ(lines[0]["iterations_written"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(lines[0]["iterations_not_written"], nlohmann::json::array());
  for (uint32_t it = 1; it <= 3; ++it) {
    EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/" + std::to_string(it)),
              (std::vector<std::string>{npyName("x", seq[it - 1]), "statistic.csv"}));
  }
}

TEST_F(RingDrainTest, ALostProducerWritesTheKeptIterationsAsACrash) {
  auto d = make(recorderConfig(R"({"steps": 2, "saved_data": "full", "after_steps": 0})"));
  ring_.step(0, 1);
  const uint64_t a = ring_.op("a", 1, {1.0f});
  ring_.step(0, 2);
  const uint64_t b = ring_.op("b", 2, {2.0f});
  ASSERT_TRUE(drainAll(*d));
  d->finish(RingDrain::SessionEnd::kProducerLost);
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/1"),
            (std::vector<std::string>{npyName("a", a), "statistic.csv"}));
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/2"),
            (std::vector<std::string>{npyName("b", b), "statistic.csv"}));
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kind"], "crash");
  EXPECT_EQ(lines[0]["iteration"], 2);
  EXPECT_EQ(lines[0]["iterations_written"], nlohmann::json({1, 2}));
  EXPECT_EQ(ring_.ring().usedBytes(), 0u);
}

TEST_F(RingDrainTest, ATriggerNearTheEndListsOnlyTheIterationsWrittenAndSaysWhyNotTheRest) {
  // A trigger during 2 that writes 3 more iterations; the job closes after 3.
  auto d = make(recorderConfig(R"({"steps": 2, "saved_data": "full", "after_steps": 3})"));
  ring_.step(0, 1);
  ring_.op("a", 1, {1.0f});
  ring_.step(0, 2);
  ring_.op("b", 2, {2.0f});
  v1::Control trigger;
  trigger.mutable_trigger()->set_reason("by hand");
  ring_.control(trigger);
  ring_.step(0, 3);
  ring_.op("c", 3, {3.0f});
  ASSERT_TRUE(drainAll(*d));
  EXPECT_TRUE(triggerLines().empty());  // 4 and 5 may still come
  d->finish();
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["iterations_written"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(lines[0]["iterations_not_written"],
            nlohmann::json::parse(
                R"([{"first": 4, "last": 5, "why": "the job closed its session first"}])"));
  EXPECT_TRUE(filesUnder(*fs_, "rank_0/Net/0/4").empty());
}

TEST_F(RingDrainTest, ACrashRightAfterAStepMarkDoesNotListTheIterationItStarted) {
  auto d = make(recorderConfig(R"({"steps": 3, "saved_data": "full", "after_steps": 0})"));
  ring_.step(0, 1);
  ring_.op("a", 1, {1.0f});
  ring_.step(0, 2);
  ring_.op("b", 2, {2.0f});
  ring_.step(0, 3);  // then killed: no record of 3
  ASSERT_TRUE(drainAll(*d));
  d->finish(RingDrain::SessionEnd::kProducerLost);
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kind"], "crash");
  EXPECT_EQ(lines[0]["iteration"], 3);
  EXPECT_EQ(lines[0]["iterations_written"], nlohmann::json({1, 2}));
  EXPECT_EQ(
      lines[0]["iterations_not_written"],
      nlohmann::json::parse(R"([{"first": 3, "last": 3, "why": "the job went away first"}])"));
  EXPECT_TRUE(filesUnder(*fs_, "rank_0/Net/0/3").empty());
}

TEST_F(RingDrainTest, FreeingRecorderSpaceReleasesTheOldestIterationFirst) {
  auto d = make(recorderConfig(R"({"steps": 3})"));
  ring_.step(0, 1);                             // 1
  ring_.op("a", 1, {1.0f});                     // 2
  ring_.step(0, 2);                             // 3
  const uint64_t b = ring_.op("b", 2, {2.0f});  // 4
  ASSERT_TRUE(drainAll(*d));
  const uint64_t used = ring_.ring().usedBytes();
  ASSERT_TRUE(d->recorder()->freeSpace(/*producer_waits=*/false));
  EXPECT_EQ(d->doneSequence(), 3u);
  EXPECT_LT(ring_.ring().usedBytes(), used);
  EXPECT_EQ(recorderStatus(*d).discarded_for_space(), 1u);
  // Then the records of the iteration being recorded.
  ASSERT_TRUE(d->recorder()->freeSpace(/*producer_waits=*/false));
  EXPECT_EQ(d->doneSequence(), b);
  EXPECT_EQ(ring_.ring().usedBytes(), 0u);
  EXPECT_EQ(recorderStatus(*d).not_kept_whole(), 1u);
  // Nothing is held now: the drain loop must not wake for a waiting producer.
  EXPECT_FALSE(d->recorder()->freeSpace(/*producer_waits=*/false));
  EXPECT_FALSE(d->recorderHoldsSpace());
  d->finish();
  EXPECT_TRUE(filesUnder(*fs_, "rank_0/Net").empty());
}

TEST_F(RingDrainTest, TrainingThatWaitsForRecorderSpaceIsCountedAndSaysTheRingThatAvoidsIt) {
  auto d = make(recorderConfig(R"({"steps": 3})"));
  ring_.step(0, 1);
  ring_.op("a", 1, {1.0f});
  ring_.step(0, 2);
  ring_.op("b", 2, {2.0f});
  ASSERT_TRUE(drainAll(*d));
  ASSERT_TRUE(d->recorder()->freeSpace(/*producer_waits=*/true));
  ASSERT_TRUE(d->recorder()->freeSpace(/*producer_waits=*/true));
  const v1::RecorderStatus st = recorderStatus(*d);
  EXPECT_EQ(st.producer_waits(), 2u);
  EXPECT_NE(st.warning().find("training waited for ring space the recorder held"),
            std::string::npos)
      << st.warning();
  EXPECT_NE(st.warning().find("a ring_bytes of "), std::string::npos) << st.warning();
  // Nothing held: a wait is not the recorder's doing, and is not counted.
  EXPECT_FALSE(d->recorder()->freeSpace(/*producer_waits=*/true));
  EXPECT_EQ(recorderStatus(*d).producer_waits(), 2u);
  d->finish();
}

}  // namespace
}  // namespace dumpd::daemon::testing
