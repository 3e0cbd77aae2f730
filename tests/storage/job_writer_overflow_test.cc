// JobWriter: overflow detection (op_debug_mode 3, overflow_number) and statistics computed on the
// device (StatSums in place of the tensor bytes).
#include "storage/writer/job_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "storage/fs/memory_file_system.h"
#include "tests/storage/job_writer_fixture.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::JobWriterTest;
using testing::makePlan;
using testing::OwnedOp;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

OwnedOp overflowOp(bool nan_in_output, bool nan_in_input, const std::string& name) {
  OwnedOp op;
  op.op_name = name;
  op.tensors.push_back(floatTensor(Io::kInput, 0, {2}, {1, nan_in_input ? kNan : 2}));
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {2}, {3, nan_in_output ? kNan : 4}));
  return op;
}

TEST_F(JobWriterTest, OverflowModeWritesOnlyOpsWithNonFiniteOutputs) {
  config::DumpPlan plan = makePlan(config::SavedData::kFull);
  plan.op_debug_mode = 3;
  auto w = make(plan);
  OwnedOp clean = overflowOp(false, false, "Default/Clean-op0");
  OwnedOp input_only = overflowOp(false, true, "Default/InNan-op1");
  OwnedOp overflow = overflowOp(true, false, "Default/Over-op2");
  EXPECT_EQ(w->writeOp(clean.record()).value().tensors_written, 0u);
  EXPECT_EQ(w->writeOp(input_only.record()).value().tensors_written, 0u);
  EXPECT_EQ(w->writeOp(overflow.record()).value().tensors_written, 2u);  // inputs too
  auto files = npyFilesIn("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 2u);
  for (auto& f : files) EXPECT_NE(f.find("Default_Over-op2"), std::string::npos);
}

// Sums of float32 values the way a device kernel would send them (sequential here).
StatSums sumsOf(const std::vector<float>& values) {
  StatSums s;
  s.count = values.size();
  for (float f : values) {
    const double x = f;
    if (std::isnan(x)) {
      ++s.nan;
      continue;
    }
    s.max = std::max(s.max, x);
    s.min = std::min(s.min, x);
    s.sum += x;
    s.sum_squares += x * x;
    s.negative += x < 0;
    s.positive += x > 0;
    s.zero += x == 0;
    s.negative_inf += x == -std::numeric_limits<double>::infinity();
    s.positive_inf += x == std::numeric_limits<double>::infinity();
  }
  return s;
}

// The same op with every tensor's bytes replaced by its sums.
struct SummedOp {
  OwnedOp op;
  std::vector<StatSums> sums;
  std::vector<TensorView> views;
  OpRecord record() {
    OpRecord r = op.record();
    views.assign(r.tensors.begin(), r.tensors.end());
    for (size_t i = 0; i < views.size(); ++i) {
      views[i].data = {};
      views[i].sums = &sums[i];
    }
    r.tensors = views;
    return r;
  }
};

TEST_F(JobWriterTest, DeviceStatisticsWriteTheRowsTheBytesWould) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> values = {
      {1.5f, -2.25f, 0.0f, -0.0f, 3e7f, 1e-7f},
      {kNan, 1.0f, -inf, 2.0f, kNan, 0.0f},
      {inf, -inf, 5.0f, -5.0f, 0.0f, 1.0f},
  };
  OwnedOp bytes;
  SummedOp summed;
  for (size_t i = 0; i < values.size(); ++i) {
    const Io io = i == 2 ? Io::kOutput : Io::kInput;
    bytes.tensors.push_back(floatTensor(io, static_cast<uint32_t>(i), {2, 3}, values[i]));
    summed.sums.push_back(sumsOf(values[i]));
  }
  summed.op = bytes;
  config::DumpPlan plan = makePlan(config::SavedData::kStatistic);
  plan.statistic_category = testing::valueCategories();
  auto w = make(plan);
  ASSERT_TRUE(w->writeOp(bytes.record()));
  auto other = std::make_shared<MemoryFileSystem>();
  auto w2 = JobWriter::create(other, plan, {});
  ASSERT_TRUE(w2.has_value());
  auto r = w2.value()->writeOp(summed.record());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r.value().tensors_written, 3u);
  const std::string csv = read("rank_0/Net/0/0/statistic.csv");
  EXPECT_EQ(other->readFile("rank_0/Net/0/0/statistic.csv").value_or(""), csv);
  EXPECT_NE(csv.find(",24,float32,"), std::string::npos) << "Data Size is the tensor's bytes";
  EXPECT_NE(csv.find("nan"), std::string::npos);
}

TEST_F(JobWriterTest, DeviceStatisticsThatDisagreeWithTheShapeOrPlanAreRefused) {
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {4}, {1, 2, 3, 4}));
  SummedOp wrong_count{op, {sumsOf({1, 2, 3})}, {}};
  auto w = make(makePlan(config::SavedData::kStatistic));
  auto r = w->writeOp(wrong_count.record());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("device statistics count 3"), std::string::npos);

  SummedOp fine{op, {sumsOf({1, 2, 3, 4})}, {}};
  auto full = JobWriter::create(std::make_shared<MemoryFileSystem>(),
                                makePlan(config::SavedData::kFull), {});
  ASSERT_TRUE(full.has_value());
  r = full.value()->writeOp(fine.record());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("saves tensors"), std::string::npos) << r.error().message;
}

TEST_F(JobWriterTest, OverflowModeDecidesFromDeviceStatistics) {
  config::DumpPlan plan = makePlan(config::SavedData::kStatistic);
  plan.op_debug_mode = 3;
  auto w = make(plan);
  SummedOp clean{overflowOp(false, true, "Default/InNan-op0"), {}, {}};
  clean.sums = {sumsOf({1, kNan}), sumsOf({3, 4})};
  SummedOp over{overflowOp(true, false, "Default/Over-op1"), {}, {}};
  over.sums = {sumsOf({1, 2}), sumsOf({3, kNan})};
  EXPECT_EQ(w->writeOp(clean.record()).value().tensors_written, 0u);
  EXPECT_EQ(w->writeOp(over.record()).value().tensors_written, 2u);
  const std::string csv = read("rank_0/Net/0/0/statistic.csv");
  EXPECT_EQ(csv.find("InNan"), std::string::npos);
  EXPECT_NE(csv.find("Default/Over-op1"), std::string::npos);
}

// Forged counts whose sum wraps to 0 (2^63 + 2^63) still say the output overflowed.
TEST_F(JobWriterTest, OverflowFromDeviceStatisticsLooksAtEachCountNotTheirSum) {
  config::DumpPlan plan = makePlan(config::SavedData::kStatistic);
  plan.op_debug_mode = 3;
  auto w = make(plan);
  SummedOp forged{overflowOp(false, false, "Default/Forged-op0"), {}, {}};
  forged.sums = {sumsOf({1, 2}), sumsOf({3, 4})};
  forged.sums[1].nan = uint64_t{1} << 63;
  forged.sums[1].negative_inf = uint64_t{1} << 63;
  ASSERT_EQ(forged.sums[1].nan + forged.sums[1].negative_inf + forged.sums[1].positive_inf, 0u);
  auto r = w->writeOp(forged.record());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r.value().tensors_written, 2u);
  EXPECT_NE(read("rank_0/Net/0/0/statistic.csv").find("Forged-op0"), std::string::npos);
}

TEST_F(JobWriterTest, OverflowNumberStopsAfterNOps) {
  config::DumpPlan plan = makePlan(config::SavedData::kTensor);
  plan.op_debug_mode = 3;
  plan.overflow_number = 1;
  auto w = make(plan);
  OwnedOp first = overflowOp(true, false, "Default/A-op0");
  OwnedOp second = overflowOp(true, false, "Default/B-op1");
  EXPECT_EQ(w->writeOp(first.record()).value().tensors_written, 2u);
  auto r = w->writeOp(second.record());
  EXPECT_EQ(r.value().tensors_written, 0u);
  EXPECT_EQ(r.value().tensors_dropped, 2u);
  EXPECT_EQ(npyFilesIn("rank_0/Net/0/0").size(), 2u);
  ASSERT_TRUE(w->completeIteration(0, 0));
  auto line = nlohmann::json::parse(read("rank_0/.dump_metadata/manifest.jsonl"));
  EXPECT_EQ(line["dropped"], 2);
  EXPECT_EQ(line["reasons"][0], "overflow_number 1 reached");
}

}  // namespace
}  // namespace dumpd::storage
