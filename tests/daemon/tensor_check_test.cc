// checkTensor: a tensor of an op record is refused, naming the record, the op and the
// problem, when its dtype, size or payload kind does not fit the job; what passes carries
// its payload copied out of the record (the client may change the ring meanwhile).
#include "daemon/tensor_check.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ipc/op_codec.h"

namespace dumpd::daemon {
namespace {

// One op "Add" "a" of iteration 3 with one float32 tensor of `elements`, encoded and decoded
// as the drain sees it.
class OneTensor {
 public:
  OneTensor(ipc::PayloadKind kind, uint64_t data_bytes, int64_t elements = 4,
            DType dtype = DType::kFloat32) {
    shape_ = {elements};
    ipc::TensorSpec t;
    t.dtype = static_cast<uint8_t>(dtype);
    t.shape = shape_;
    t.payload = kind;
    t.data_bytes = data_bytes;
    ipc::OpSpec op;
    op.iteration = 3;
    op.op_type = "Add";
    op.op_name = "a";
    op.tensors = std::span(&t, 1);
    body_.resize(ipc::opBodyBytes(op) / sizeof(uint64_t) + 1);
    std::byte* payload = nullptr;
    ipc::writeOpDescriptors(bytes(), op, std::span(&payload, 1));
    payload_ = payload;
    EXPECT_TRUE(ipc::decodeOp(bytes(), ipc::opBodyBytes(op), op_).has_value());
  }
  std::byte* bytes() { return reinterpret_cast<std::byte*>(body_.data()); }
  std::byte* payload() { return payload_; }
  Result<CheckedTensor> check(const TensorRules& rules) {
    return checkTensor(/*sequence=*/7, op_, op_.tensors[0], rules);
  }

 private:
  std::vector<int64_t> shape_;
  std::vector<uint64_t> body_;  // 8-byte aligned, as the ring's records are
  std::byte* payload_ = nullptr;
  ipc::DecodedOp op_;
};

std::string errorOf(const Result<CheckedTensor>& r) {
  return r.has_value() ? std::string("(accepted)") : r.error().message;
}

ipc::StatsPayload statsOf(uint64_t elements) {
  ipc::StatsPayload s{};
  s.count = elements;
  s.positive = elements;
  s.max = 1;
  s.min = 1;
  s.sum = static_cast<double>(elements);
  s.sum_squares = static_cast<double>(elements);
  return s;
}

TEST(TensorCheck, BytesThatMatchTheShapePassAndAnyOtherSizeIsRefused) {
  OneTensor ok(ipc::PayloadKind::kBytes, 16);
  Result<CheckedTensor> c = ok.check({});
  ASSERT_TRUE(c.has_value()) << errorOf(c);
  EXPECT_EQ(c.value().elements, 4u);
  EXPECT_EQ(c.value().dtype, DType::kFloat32);
  OneTensor short_by_one(ipc::PayloadKind::kBytes, 12);
  EXPECT_EQ(errorOf(short_by_one.check({})),
            "record 7: a tensor of a has 12 bytes, which does not match its shape and dtype");
}

TEST(TensorCheck, ARepeatIsRefusedInOverflowModeAndItsReservedFieldMustBeZero) {
  OneTensor t(ipc::PayloadKind::kSame, sizeof(ipc::SamePayload));
  const ipc::SamePayload same{/*sequence=*/5, /*tensor=*/1, /*reserved=*/0};
  std::memcpy(t.payload(), &same, sizeof same);
  Result<CheckedTensor> c = t.check({});
  ASSERT_TRUE(c.has_value()) << errorOf(c);
  EXPECT_EQ(c.value().same.sequence, 5u);
  EXPECT_EQ(c.value().same.tensor, 1u);
  TensorRules overflow;
  overflow.overflow_dump = true;
  EXPECT_NE(errorOf(t.check(overflow)).find("overflow mode needs every tensor's bytes"),
            std::string::npos);
  const ipc::SamePayload bad{5, 1, 9};
  std::memcpy(t.payload(), &bad, sizeof bad);
  EXPECT_EQ(errorOf(t.check({})),
            "record 7: a repeated tensor of a is corrupt: its payload has a non-zero reserved "
            "field");
}

TEST(TensorCheck, DeviceStatisticsNeedAJobThatTakesThemAndMustCountTheShape) {
  OneTensor t(ipc::PayloadKind::kStatistics, sizeof(ipc::StatsPayload));
  const ipc::StatsPayload four = statsOf(4);
  std::memcpy(t.payload(), &four, sizeof four);
  EXPECT_NE(errorOf(t.check({})).find("carries device statistics, but the job needs its bytes"),
            std::string::npos);
  TensorRules sums;
  sums.statistics_from_sums = true;
  Result<CheckedTensor> c = t.check(sums);
  ASSERT_TRUE(c.has_value()) << errorOf(c);
  EXPECT_EQ(c.value().stats.count, 4u);
  // The copy is what was checked: changing the record afterwards does not change it.
  const ipc::StatsPayload five = statsOf(5);
  std::memcpy(t.payload(), &five, sizeof five);
  EXPECT_EQ(c.value().stats.count, 4u);
  EXPECT_NE(errorOf(t.check(sums)).find("the device statistics of a tensor of a are corrupt"),
            std::string::npos);
}

TEST(TensorCheck, ATensorKeptOnTheDeviceNeedsARecordedIterationAndItsWholeRoom) {
  const uint64_t room = ipc::kDeferredHeaderBytes + 16;
  OneTensor t(ipc::PayloadKind::kDeferred, room);
  const ipc::StatsPayload four = statsOf(4);
  std::memcpy(t.payload(), &four, sizeof four);
  EXPECT_EQ(errorOf(t.check({})),
            "record 7: a tensor of a is kept on the client's device, but the job has no flight "
            "recorder");
  TensorRules recorded;
  recorded.has_recorder = true;
  TensorRules dumped = recorded;
  dumped.iteration_dumped = true;
  EXPECT_EQ(errorOf(t.check(dumped)),
            "record 7: a tensor of a is kept on the client's device, but iteration 3 is dumped, "
            "not recorded");
  Result<CheckedTensor> c = t.check(recorded);
  ASSERT_TRUE(c.has_value()) << errorOf(c);
  EXPECT_EQ(c.value().stats.count, 4u);
  OneTensor short_room(ipc::PayloadKind::kDeferred, room - 4);
  EXPECT_NE(errorOf(short_room.check(recorded)).find("do not match its shape and dtype"),
            std::string::npos);
}

TEST(TensorCheck, AnUnknownDtypeIsNamed) {
  const ipc::DecodedOp op;
  ipc::DecodedTensor bad{};
  bad.dtype = 250;
  bad.payload = ipc::PayloadKind::kBytes;
  EXPECT_EQ(errorOf(checkTensor(9, op, bad, {})), "record 9 has unknown dtype 250");
}

}  // namespace
}  // namespace dumpd::daemon
