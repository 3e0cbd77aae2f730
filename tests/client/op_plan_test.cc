// client/op_plan.h: what an op's record holds, planned from values alone (no ring, no daemon).
#include "client/op_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace dumpd::client {
namespace {

using ::testing::HasSubstr;

const std::array<int64_t, 2> k2x3{2, 3};

Tensor floats(Io io, uint32_t slot, Memory memory = Memory::kHost) {
  Tensor t;
  t.io = io;
  t.slot = slot;
  t.shape = k2x3;
  t.bytes = 6 * 4;
  t.memory = memory;
  return t;
}

OpCall call(std::span<const Tensor> tensors) {
  OpCall op;
  op.op_type = "Add";
  op.op_name = "Default/Add-op1";
  op.tensors = tensors;
  return op;
}

TEST(OpPlan, EachSelectedTensorGetsItsDescriptorInCallOrder) {
  const std::vector<Tensor> ts{floats(Io::kInput, 0), floats(Io::kInput, 1),
                               floats(Io::kOutput, 0)};
  OpPlanSettings s;
  s.timestamp_us = 1234;
  OpPlan plan;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  ASSERT_EQ(plan.specs.size(), 3u);
  EXPECT_EQ(plan.filtered, 0u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.selected[i], &ts[i]);
    EXPECT_EQ(plan.specs[i].slot, ts[i].slot);
    EXPECT_EQ(plan.specs[i].io, static_cast<uint8_t>(ts[i].io));
    EXPECT_EQ(plan.specs[i].data_bytes, 24u);
    EXPECT_EQ(plan.specs[i].timestamp_us, 1234u);
    EXPECT_EQ(plan.specs[i].payload, ipc::PayloadKind::kBytes);
    EXPECT_EQ(std::vector<int64_t>(plan.specs[i].shape.begin(), plan.specs[i].shape.end()),
              std::vector<int64_t>({2, 3}));
  }
}

TEST(OpPlan, InputOutputLeavesTensorsOutAndCountsThem) {
  const std::vector<Tensor> ts{floats(Io::kInput, 0), floats(Io::kOutput, 0),
                               floats(Io::kInput, 1)};
  OpPlanSettings s;
  s.want_inputs = false;
  OpPlan plan;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  ASSERT_EQ(plan.specs.size(), 1u);
  EXPECT_EQ(plan.selected[0], &ts[1]);
  EXPECT_EQ(plan.filtered, 2u);
  // A plan is made afresh each time.
  s.want_inputs = true;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.specs.size(), 3u);
  EXPECT_EQ(plan.filtered, 0u);
}

TEST(OpPlan, CudaTensorsSendStatisticsOrADeferredSnapshotWhenAsked) {
  std::vector<Tensor> ts{floats(Io::kOutput, 0, Memory::kCuda), floats(Io::kOutput, 1)};
  OpPlanSettings s;
  s.device_statistics = true;
  OpPlan plan;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.specs[0].payload, ipc::PayloadKind::kStatistics);
  EXPECT_EQ(plan.specs[0].data_bytes, sizeof(ipc::StatsPayload));
  EXPECT_EQ(plan.specs[1].payload, ipc::PayloadKind::kBytes);  // a host tensor: its bytes
  // complex64 has no statistics row: its bytes go.
  ts[0].dtype = DType::kComplex64;
  ts[0].bytes = 6 * 8;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.specs[0].payload, ipc::PayloadKind::kBytes);
  // Kept on the device for the recorder: a header and the bytes, fetched later.
  s.device_statistics = false;
  s.defer = true;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.specs[0].payload, ipc::PayloadKind::kDeferred);
  EXPECT_EQ(plan.specs[0].data_bytes, ipc::kDeferredHeaderBytes + 48);
  EXPECT_EQ(plan.specs[1].payload, ipc::PayloadKind::kBytes);
}

TEST(OpPlan, HostTensorsSendStatisticsWhenAsked) {
  std::vector<Tensor> ts{floats(Io::kOutput, 0), floats(Io::kOutput, 1, Memory::kCuda),
                         floats(Io::kOutput, 2)};
  OpPlanSettings s;
  s.host_statistics = true;
  OpPlan plan;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.specs[0].payload, ipc::PayloadKind::kStatistics);
  EXPECT_EQ(plan.specs[0].data_bytes, sizeof(ipc::StatsPayload));
  EXPECT_EQ(plan.specs[1].payload, ipc::PayloadKind::kBytes);  // CUDA: device_statistics'
  // A strided view sends its statistics too (computed on a C-ordered copy); complex64 has
  // none, its bytes go.
  const std::array<int64_t, 2> strides{4, 8};  // column-major
  ts[0].strides = strides;
  ts[2].dtype = DType::kComplex64;
  ts[2].bytes = 6 * 8;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.specs[0].payload, ipc::PayloadKind::kStatistics);
  EXPECT_EQ(plan.specs[2].payload, ipc::PayloadKind::kBytes);
  // Above kStridedStatisticsBytes a strided tensor crosses whole (no copy of that size).
  const std::array<int64_t, 2> wide{2, (kStridedStatisticsBytes / 8) + 1};
  const std::array<int64_t, 2> wide_strides{4, 8};
  ts[0].shape = wide;
  ts[0].strides = wide_strides;
  ts[0].bytes = 2 * static_cast<uint64_t>(wide[1]) * 4;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.specs[0].payload, ipc::PayloadKind::kBytes);
  ts[0] = floats(Io::kOutput, 0);
  s.host_statistics = false;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.specs[0].payload, ipc::PayloadKind::kBytes);
}

TEST(OpPlan, GivenStatisticsStandInForTheTensorOnlyWhereTheJobTakesThem) {
  ipc::StatsPayload given{};
  given.count = 6;
  std::vector<Tensor> ts{floats(Io::kOutput, 0, Memory::kCuda)};
  ts[0].statistics = &given;
  OpPlanSettings s;
  s.given_statistics = true;
  OpPlan plan;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.specs[0].payload, ipc::PayloadKind::kStatistics);
  EXPECT_EQ(plan.specs[0].data_bytes, sizeof(ipc::StatsPayload));

  given.count = 5;  // the shape holds 6
  auto e = planOp(call(ts), s, plan);
  ASSERT_FALSE(e);
  EXPECT_THAT(e.error().message, HasSubstr("tensor slot 0 of Default/Add-op1: the statistics "
                                           "count 5 elements, the shape holds 6"));
  given.count = 6;
  given.flags = ipc::kStatsAverage;  // only plain sums come from outside
  e = planOp(call(ts), s, plan);
  ASSERT_FALSE(e);
  EXPECT_THAT(e.error().message, HasSubstr("flags must be 0"));
  given.flags = 0;
  ts[0].dtype = DType::kComplex64;
  ts[0].bytes = 6 * 8;
  e = planOp(call(ts), s, plan);
  ASSERT_FALSE(e);
  EXPECT_THAT(e.error().message, HasSubstr("complex64 has no statistics"));
  ts[0] = floats(Io::kOutput, 0);
  ts[0].statistics = &given;
  s.given_statistics = false;  // the job writes bytes, or the call is a reserveOp
  e = planOp(call(ts), s, plan);
  ASSERT_FALSE(e);
  EXPECT_THAT(e.error().message, HasSubstr("statistics were given in place of the tensor"));
}

TEST(OpPlan, MalformedTensorsAreNamedByOpAndSlot) {
  OpPlan plan;
  const OpPlanSettings s;
  std::vector<Tensor> ts{floats(Io::kInput, 0), floats(Io::kOutput, 7)};
  ts[1].bytes = 20;
  auto bad = planOp(call(ts), s, plan);
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message,
              HasSubstr("tensor slot 7 of Default/Add-op1: 20 bytes given, shape and float32 "
                        "need 24"));

  const std::array<int64_t, 2> negative{2, -3};
  ts[1] = floats(Io::kOutput, 7);
  ts[1].shape = negative;
  EXPECT_THAT(planOp(call(ts), s, plan).error().message, HasSubstr("a dimension is negative"));

  const std::array<int64_t, 1> one_stride{4};
  ts[1] = floats(Io::kOutput, 7);
  ts[1].strides = one_stride;
  EXPECT_THAT(planOp(call(ts), s, plan).error().message,
              HasSubstr("1 strides given for 2 dimensions"));

  const std::array<int64_t, 2> transposed{4, 8};  // a .T of a 3x2 array
  ts[1] = floats(Io::kOutput, 7, Memory::kCuda);
  ts[1].strides = transposed;
  EXPECT_THAT(planOp(call(ts), s, plan).error().message, HasSubstr("strides are for host tensors"));
  // The same strides on a host tensor are a plan, not an error.
  ts[1].memory = Memory::kHost;
  ASSERT_TRUE(planOp(call(ts), s, plan));
  EXPECT_TRUE(isStrided(ts[1]));
}

TEST(OpPlan, AnErrorStillCountsWhatWasLeftOutBeforeIt) {
  std::vector<Tensor> ts{floats(Io::kInput, 0), floats(Io::kOutput, 1)};
  ts[1].bytes = 1;
  OpPlanSettings s;
  s.want_inputs = false;
  OpPlan plan;
  ASSERT_FALSE(planOp(call(ts), s, plan));
  EXPECT_EQ(plan.filtered, 1u);
}

}  // namespace
}  // namespace dumpd::client
