// RingDrain on its own, the test in the session thread's place: records the client commits
// (tensors, control records, void records) are handed to handle() one by one, and what the
// drain writes lands in a memory file system.
#include "daemon/ring_drain.h"

#include <gtest/gtest.h>

#include "tests/daemon/session_fixture.h"

namespace dumpd::daemon::testing {
namespace {

class RingDrainTest : public ::testing::Test {
 protected:
  // A drain of ring_ for `config`, writing into fs_.
  std::shared_ptr<RingDrain> make(const std::string& config = jobConfig()) {
    auto plan = config::parseDumpPlan(config, config::Environment{});
    EXPECT_TRUE(plan.has_value()) << plan.error().message;
    auto filter = config::Filter::create(plan.value());
    auto ring = ipc::RingConsumer::attach(ring_.fd(), ring_.bytes(), 1ull << 30);
    auto writer = storage::JobWriter::create(fs_, plan.value(), storage::JobOptions{});
    return std::make_shared<RingDrain>(/*session_id=*/1, /*rank=*/0, /*device=*/0,
                                       std::move(plan.value()), std::move(filter.value()),
                                       std::move(ring.value()), fs_, std::move(writer.value()),
                                       pool_, nullptr);
  }
  // Hands every committed record to `d`; false at the first one it refuses.
  static bool drainAll(RingDrain& d) {
    for (;;) {
      auto r = d.ring().next();
      EXPECT_TRUE(r.has_value()) << r.error().message;
      if (!r || !r.value()) return r.has_value();
      if (!d.handle(*r.value())) return false;
    }
  }
  // Commits op "Add" `name` with one float32 tensor of `elements` whose payload, of `kind`,
  // is `payload`.
  void commitOne(const std::string& name, int64_t elements, ipc::PayloadKind kind,
                 const std::string& payload) {
    const std::vector<int64_t> shape{elements};
    ipc::TensorSpec t;
    t.dtype = static_cast<uint8_t>(DType::kFloat32);
    t.shape = shape;
    t.payload = kind;
    t.data_bytes = payload.size();
    ipc::OpSpec op;
    op.op_type = "Add";
    op.op_name = name;
    op.tensors = std::span(&t, 1);
    ring_.commit(ring_.reserve(op, {payload}));
  }
  static std::string lastWarning(const RingDrain& d) {
    auto e = d.warnings().lastError();
    return e ? *e : "";
  }

  TestProducer ring_;
  std::shared_ptr<storage::MemoryFileSystem> fs_ = std::make_shared<storage::MemoryFileSystem>();
  storage::WriterPool pool_{2, 64u << 20};
};

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

}  // namespace
}  // namespace dumpd::daemon::testing
