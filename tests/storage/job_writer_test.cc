#include "storage/writer/job_writer.h"

#include <gtest/gtest.h>
#include <lz4frame.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "storage/fs/credentials.h"
#include "storage/fs/fault_injection.h"
#include "storage/fs/memory_file_system.h"
#include "storage_test_util.h"
#include "tests/storage/writer_fixture.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::makePlan;
using testing::makeTensor;
using testing::OwnedOp;
using testing::parseNpy;

constexpr uint64_t kTs = 1700000000000000;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

OwnedOp specExampleOp(uint64_t ts = kTs) {
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kInput, 0, {2, 3}, {1, 2, 3, 4, 5, 6}, ts));
  op.tensors.push_back(floatTensor(Io::kInput, 1, {2, 3}, {7, 8, 9, 10, 11, 12}, ts + 1));
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 3}, {8, 10, 12, 14, 16, 18}, ts + 2));
  return op;
}

class JobWriterTest : public testing::WriterFixture {
 protected:
  std::vector<std::string> npyFilesIn(const std::string& dir) {
    std::vector<std::string> out;
    for (auto& f : filesIn(dir)) {
      if (f.find(".npy") != std::string::npos) out.push_back(f);
    }
    return out;
  }
};

TEST_F(JobWriterTest, CreateWritesDumpMetadata) {
  config::DumpPlan plan = makePlan();
  JobOptions o;
  o.rank = 3;
  o.device_target = "GPU";
  o.producer_version = "2.3.0";
  auto w = make(plan, o);
  EXPECT_EQ(read("rank_3/.dump_metadata/data_dump.json"), plan.config_text);
  EXPECT_EQ(read("rank_3/.dump_metadata/config.json"),
            "{\"device_target\":\"GPU\",\"ms_version\":\"2.3.0\"}");
}

TEST_F(JobWriterTest, SpecExampleTreeNamesAndStatistics) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op = specExampleOp();
  auto r = w->writeOp(op.record());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r.value().tensors_written, 3u);
  EXPECT_EQ(filesIn("rank_0/Net/0/0"),
            (std::vector<std::string>{
                "Add.Default_Add-op0.0.0.1700000000000000.input.0.DefaultFormat.float32.npy",
                "Add.Default_Add-op0.0.0.1700000000000001.input.1.DefaultFormat.float32.npy",
                "Add.Default_Add-op0.0.0.1700000000000002.output.0.DefaultFormat.float32.npy",
                "statistic.csv"}));
  EXPECT_EQ(read("rank_0/Net/0/0/statistic.csv"),
            "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
            "Max Value,Min Value,L2Norm Value\n"
            "Add,Default/Add-op0,0,0,1700000000000000,input,0,24,float32,\"[2,3]\",6,1,9.53939,\n"
            "Add,Default/Add-op0,0,0,1700000000000001,input,1,24,float32,\"[2,3]\",12,7,23.6432,\n"
            "Add,Default/Add-op0,0,0,1700000000000002,output,0,24,float32,\"[2,3]\",18,8,32.9242,"
            "\n");
  std::string out = read(
      "rank_0/Net/0/0/Add.Default_Add-op0.0.0.1700000000000002.output.0.DefaultFormat.float32.npy");
  auto info = parseNpy(out);
  ASSERT_TRUE(info.ok);
  EXPECT_EQ(info.descr, "<f4");
  EXPECT_EQ(info.shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> values(6);
  std::memcpy(values.data(), out.data() + info.data_offset, 24);
  EXPECT_EQ(values, (std::vector<float>{8, 10, 12, 14, 16, 18}));
  EXPECT_EQ(mem_->fileMode("rank_0/Net/0/0/Add.Default_Add-op0.0.0.1700000000000002.output.0."
                           "DefaultFormat.float32.npy"),
            0400u);
  // Appended to again after a reopen: 0600, not MindSpore's 0400 (docs/compatibility.md).
  EXPECT_EQ(mem_->fileMode("rank_0/Net/0/0/statistic.csv"), 0600u);
  EXPECT_EQ(mem_->fileMode("rank_0/.dump_metadata/config.json"), 0400u);
  auto c = w->counters();
  EXPECT_EQ(c.tensors_written, 3u);
  EXPECT_EQ(c.bytes_written, 3 * out.size());
}

TEST_F(JobWriterTest, GraphAndIterationNameTheDirectories) {
  auto w = make(makePlan(config::SavedData::kTensor));
  OwnedOp op = specExampleOp();
  op.graph = 7;
  op.iteration = 42;
  ASSERT_TRUE(w->writeOp(op.record()));
  EXPECT_EQ(npyFilesIn("rank_0/Net/7/42").size(), 3u);
}

TEST_F(JobWriterTest, InputOutputSelection) {
  config::DumpPlan plan = makePlan(config::SavedData::kFull);
  plan.input_output = config::IoSelect::kInputs;
  {
    auto w = make(plan);
    OwnedOp op = specExampleOp();
    ASSERT_TRUE(w->writeOp(op.record()));
  }
  auto files = npyFilesIn("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 2u);
  for (auto& f : files) EXPECT_NE(f.find(".input."), std::string::npos);
  plan.input_output = config::IoSelect::kOutputs;
  plan.net_name = "Out";
  auto w = make(plan);
  OwnedOp op = specExampleOp();
  ASSERT_TRUE(w->writeOp(op.record()));
  files = npyFilesIn("rank_0/Out/0/0");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find(".output.0."), std::string::npos);
}

TEST_F(JobWriterTest, SavedDataTensorWritesNoStatistics) {
  auto w = make(makePlan(config::SavedData::kTensor));
  OwnedOp op = specExampleOp();
  ASSERT_TRUE(w->writeOp(op.record()));
  EXPECT_EQ(filesIn("rank_0/Net/0/0").size(), 3u);
  EXPECT_FALSE(mem_->exists("rank_0/Net/0/0/statistic.csv"));
}

TEST_F(JobWriterTest, SavedDataStatisticWritesOnlyRows) {
  auto w = make(makePlan(config::SavedData::kStatistic));
  OwnedOp op = specExampleOp();
  auto r = w->writeOp(op.record());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r.value().tensors_written, 3u);  // rows
  EXPECT_EQ(r.value().bytes_written, 0u);
  EXPECT_EQ(filesIn("rank_0/Net/0/0"), std::vector<std::string>{"statistic.csv"});
}

TEST_F(JobWriterTest, TransFlagFalseKeepsTheProducersFormat) {
  config::DumpPlan plan = makePlan(config::SavedData::kTensor);
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {1}));
  op.tensors[0].format = "NC1HWC0";
  {
    auto w = make(plan);
    ASSERT_TRUE(w->writeOp(op.record()));
  }
  EXPECT_NE(npyFilesIn("rank_0/Net/0/0")[0].find(".DefaultFormat."), std::string::npos);
  plan.trans_flag = false;
  plan.net_name = "Raw";
  auto w = make(plan);
  ASSERT_TRUE(w->writeOp(op.record()));
  EXPECT_NE(npyFilesIn("rank_0/Raw/0/0")[0].find(".NC1HWC0.float32.npy"), std::string::npos);
}

TEST_F(JobWriterTest, OpTypeAndNameAreSanitizedInFileNamesOnly) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op;
  op.op_type = "../Evil";
  op.op_name = "Default/a b.c\\d";
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {1}));
  ASSERT_TRUE(w->writeOp(op.record()));
  auto files = npyFilesIn("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].substr(0, 25), "___Evil.Default_a_b_c_d.0");
  EXPECT_NE(read("rank_0/Net/0/0/statistic.csv").find("\n../Evil,Default/a b.c\\d,"),
            std::string::npos);
}

TEST_F(JobWriterTest, ZeroElementTensorsWriteNothing) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {0, 3}, {}));
  auto r = w->writeOp(op.record());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r.value().tensors_written, 0u);
  EXPECT_FALSE(mem_->exists("rank_0/Net/0/0"));
}

TEST_F(JobWriterTest, ComplexTensorsGetANpyButNoRow) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op;
  op.tensors.push_back(
      makeTensor(Io::kOutput, 0, DType::kComplex64, {2}, std::vector<float>{1, 2, 3, 4}));
  op.tensors.push_back(floatTensor(Io::kOutput, 1, {1}, {5}));
  ASSERT_TRUE(w->writeOp(op.record()));
  EXPECT_EQ(npyFilesIn("rank_0/Net/0/0").size(), 2u);
  std::string csv = read("rank_0/Net/0/0/statistic.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 2);
  EXPECT_EQ(csv.find("complex64"), std::string::npos);
}

TEST_F(JobWriterTest, Int4RowReportsPackedDataSizeAndLogicalShape) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op;
  op.tensors.push_back(
      makeTensor(Io::kOutput, 0, DType::kInt4, {2, 3}, std::vector<uint8_t>{0x21, 0x43, 0x65}));
  ASSERT_TRUE(w->writeOp(op.record()));
  std::string csv = read("rank_0/Net/0/0/statistic.csv");
  EXPECT_NE(csv.find(",output,0,3,int4,\"[2,3]\",6,1,9.53939,\n"), std::string::npos) << csv;
  auto files = npyFilesIn("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find(".int4.npy"), std::string::npos);
  auto info = parseNpy(read("rank_0/Net/0/0/" + files[0]));
  EXPECT_TRUE(info.ok);
  EXPECT_EQ(info.descr, "|i1");
  EXPECT_EQ(info.shape, (std::vector<int64_t>{2, 3}));
}

TEST_F(JobWriterTest, SampleModeKeepsTheFirstSampleNumElements) {
  config::DumpPlan plan = makePlan(config::SavedData::kFull);
  plan.sample_mode = true;
  plan.sample_num = 100;
  auto w = make(plan);
  std::vector<float> big(1000), small(50);
  for (int i = 0; i < 1000; ++i) big[i] = static_cast<float>(i);
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {10, 100}, big));
  op.tensors.push_back(floatTensor(Io::kOutput, 1, {5, 10}, small));
  ASSERT_TRUE(w->writeOp(op.record()));
  auto files = npyFilesIn("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 2u);
  auto sampled = parseNpy(read("rank_0/Net/0/0/" + files[0]));
  ASSERT_TRUE(sampled.ok);
  EXPECT_EQ(sampled.shape, std::vector<int64_t>{100});
  std::string bytes = read("rank_0/Net/0/0/" + files[0]);
  EXPECT_EQ(0, std::memcmp(bytes.data() + sampled.data_offset, big.data(), 400));
  auto whole = parseNpy(read("rank_0/Net/0/0/" + files[1]));
  EXPECT_EQ(whole.shape, (std::vector<int64_t>{5, 10}));
  // Statistics describe the whole tensor.
  EXPECT_NE(read("rank_0/Net/0/0/statistic.csv").find(",4000,float32,\"[10,100]\",999,0,"),
            std::string::npos);
}

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

TEST_F(JobWriterTest, KernelArgsJsonHasStringValues) {
  config::DumpPlan plan = makePlan();
  plan.save_kernel_args = true;
  auto w = make(plan);
  ASSERT_TRUE(w->writeKernelArgs(0, 2, "MatMul", "Default/MatMul-op3",
                                 {{"transpose_a", "False"}, {"transpose_b", "True"}}));
  // MindSpore's json.dump(4): keys sorted, 4-space indent, no trailing newline; mode 0400.
  EXPECT_EQ(read("rank_0/Net/0/2/MatMul.Default_MatMul-op3.json"),
            "{\n    \"transpose_a\": \"False\",\n    \"transpose_b\": \"True\"\n}");
  EXPECT_EQ(mem_->fileMode("rank_0/Net/0/2/MatMul.Default_MatMul-op3.json"), 0400u);
}

TEST_F(JobWriterTest, KernelArgsFileIsNamedByMindSporesRule) {
  config::DumpPlan plan = makePlan();
  plan.save_kernel_args = true;
  auto w = make(plan);
  // The type comes from the name (its last component cut at the last '-'); only '.' and '/'
  // are replaced in the name part. No args: "null".
  ASSERT_TRUE(
      w->writeKernelArgs(0, 0, "Conv2DFusion", "Default/net.a/conv1-Conv2d b/Conv2D-op12", {}));
  EXPECT_EQ(read("rank_0/Net/0/0/Conv2D.Default_net_a_conv1-Conv2d b_Conv2D-op12.json"), "null");
  // A name without '-' gives its whole last component; an empty one the op type.
  ASSERT_TRUE(w->writeKernelArgs(0, 0, "Add", "Default/Add", {{"b", "1"}, {"a", "2"}}));
  EXPECT_EQ(read("rank_0/Net/0/0/Add.Default_Add.json"),
            "{\n    \"a\": \"2\",\n    \"b\": \"1\"\n}");
  ASSERT_TRUE(w->writeKernelArgs(0, 0, "My.Op", "Default/-op1", {}));
  EXPECT_EQ(read("rank_0/Net/0/0/My_Op.Default_-op1.json"), "null");
}

TEST_F(JobWriterTest, KernelArgsAreSkippedWhenThePlanSaysNo) {
  auto w = make(makePlan());
  ASSERT_TRUE(w->writeKernelArgs(0, 2, "MatMul", "Default/MatMul-op3", {{"a", "b"}}));
  EXPECT_FALSE(mem_->exists("rank_0/Net/0/2"));
}

TEST_F(JobWriterTest, LongNamesGoThroughMappingCsv) {
  auto w = make(makePlan(config::SavedData::kTensor));
  OwnedOp op;
  op.op_name = "Default/" + std::string(300, 'x');
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {1}));
  op.tensors.push_back(floatTensor(Io::kOutput, 1, {1}, {2}));
  ASSERT_TRUE(w->writeOp(op.record()));
  auto files = filesIn("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 3u);
  std::string mapping = read("rank_0/Net/0/0/mapping.csv");
  std::regex line_re(
      "(\\d{16}\\.npy),(Add\\.Default_x{300}\\.0\\.0\\.\\d+\\.output\\.[01]\\."
      "DefaultFormat\\.float32\\.npy)\n");
  auto begin = std::sregex_iterator(mapping.begin(), mapping.end(), line_re);
  int lines = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    ++lines;
    std::string short_name = (*it)[1];
    EXPECT_TRUE(parseNpy(read("rank_0/Net/0/0/" + short_name)).ok) << short_name;
  }
  EXPECT_EQ(lines, 2);
  EXPECT_EQ(mapping.find("Op Type"), std::string::npos);  // no header
}

TEST_F(JobWriterTest, ConstantStatisticsGoToConstantsStatisticCsv) {
  for (auto saved : {config::SavedData::kStatistic, config::SavedData::kFull}) {
    mem_ = std::make_shared<MemoryFileSystem>();
    auto w = make(makePlan(saved, config::MsFormat::k26));
    auto t = floatTensor(Io::kOutput, 0, {2, 1}, {1, 2}, 1700000000000123);
    ASSERT_TRUE(w->writeConstant(4, "7", t.view()));
    auto t2 = floatTensor(Io::kOutput, 0, {}, {-3}, 1700000000000124);
    ASSERT_TRUE(w->writeConstant(4, "8", t2.view()));
    EXPECT_EQ(read("rank_0/Net/4/constants/statistic.csv"),
              "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
              "Max Value,Min Value,L2Norm Value\n"
              "Parameter,data-7,0,0,1700000000000123,output,0,8,float32,\"(2,1)\",2,1,2.23607,\n"
              "Parameter,data-8,0,0,1700000000000124,output,0,4,float32,\"()\",-3,-3,3,\n");
    EXPECT_EQ(filesIn("rank_0/Net/4/constants").size(),
              saved == config::SavedData::kFull ? 3u : 1u);
    EXPECT_EQ(w->counters().tensors_written, 2u);
  }
}

TEST_F(JobWriterTest, ConstantsGoUnderTheGraph) {
  auto w = make(makePlan(config::SavedData::kTensor));
  auto t = floatTensor(Io::kOutput, 0, {2}, {1, 2}, 1700000000000123);
  ASSERT_TRUE(w->writeConstant(4, "7", t.view()));
  EXPECT_EQ(filesIn("rank_0/Net/4/constants"),
            std::vector<std::string>{
                "Parameter.data-7.0.0.1700000000000123.output.0.DefaultFormat.float32.npy"});
}

TEST_F(JobWriterTest, GraphFiles) {
  auto w = make(makePlan());
  ASSERT_TRUE(w->writeGraph(1, "graph text", "pb bytes"));
  ASSERT_TRUE(w->writeGraph(2, "only ir", {}));
  EXPECT_EQ(read("rank_0/graphs/ms_output_trace_code_graph_1.ir"), "graph text");
  EXPECT_EQ(read("rank_0/graphs/ms_output_trace_code_graph_1.pb"), "pb bytes");
  EXPECT_EQ(read("rank_0/graphs/ms_output_trace_code_graph_2.ir"), "only ir");
  EXPECT_FALSE(mem_->exists("rank_0/graphs/ms_output_trace_code_graph_2.pb"));
}

TEST_F(JobWriterTest, ExecutionOrderFiles) {
  auto w = make(makePlan());
  ASSERT_TRUE(w->writeExecutionOrder(0, {"Default/Add-op0", "Default/Mul-op1"}));
  EXPECT_EQ(read("rank_0/execution_order/ms_execution_order_graph_0.csv"),
            "NodeExecutionOrder-FullNameWithScope\nDefault/Add-op0\nDefault/Mul-op1\n");
  ASSERT_TRUE(w->appendGlobalExecutionOrder(0, 0));
  ASSERT_TRUE(w->appendGlobalExecutionOrder(0, 1));
  ASSERT_TRUE(w->appendGlobalExecutionOrder(0, 5));
  EXPECT_EQ(read("rank_0/execution_order/ms_global_execution_order_graph_0.csv"), "0\n1\n5\n");
}

TEST_F(JobWriterTest, ManifestLinePerCompletedIterationAndIdempotent) {
  auto w = make(makePlan(config::SavedData::kTensor));
  OwnedOp op = specExampleOp();
  auto r = w->writeOp(op.record());
  uint64_t bytes = r.value().bytes_written;
  ASSERT_TRUE(w->completeIteration(0, 0));
  ASSERT_TRUE(w->completeIteration(0, 0));
  ASSERT_TRUE(w->completeIteration(0, 1, 4, "backpressure: ring full"));
  EXPECT_EQ(read("rank_0/.dump_metadata/manifest.jsonl"),
            "{\"graph\":0,\"iteration\":0,\"tensors\":3,\"bytes\":" + std::to_string(bytes) +
                ",\"dropped\":0,\"reasons\":[],\"complete\":true}\n"
                "{\"graph\":0,\"iteration\":1,\"tensors\":0,\"bytes\":0,\"dropped\":4,"
                "\"reasons\":[\"backpressure: ring full\"],\"complete\":true}\n");
  EXPECT_EQ(w->counters().tensors_dropped, 4u);
}

TEST_F(JobWriterTest, FinishCompletesEveryOpenIteration) {
  auto w = make(makePlan(config::SavedData::kTensor));
  for (uint32_t it : {3u, 1u}) {
    OwnedOp op = specExampleOp();
    op.iteration = it;
    ASSERT_TRUE(w->writeOp(op.record()));
  }
  ASSERT_TRUE(w->finish(2));
  std::string manifest = read("rank_0/.dump_metadata/manifest.jsonl");
  EXPECT_NE(manifest.find("\"iteration\":1,\"tensors\":3"), std::string::npos);
  EXPECT_NE(manifest.find("\"iteration\":3,\"tensors\":3,\"bytes\":"), std::string::npos);
  EXPECT_NE(manifest.find("\"dropped\":2,\"reasons\":[\"dropped before storage\"]"),
            std::string::npos);
  ASSERT_TRUE(w->finish());
  EXPECT_EQ(read("rank_0/.dump_metadata/manifest.jsonl"), manifest);
}

TEST_F(JobWriterTest, WritingAfterCompletionReopensTheIteration) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op = specExampleOp();
  ASSERT_TRUE(w->writeOp(op.record()));
  ASSERT_TRUE(w->completeIteration(0, 0));
  OwnedOp late = specExampleOp(kTs + 100);
  ASSERT_TRUE(w->writeOp(late.record()));
  ASSERT_TRUE(w->completeIteration(0, 0));
  std::string manifest = read("rank_0/.dump_metadata/manifest.jsonl");
  EXPECT_EQ(std::count(manifest.begin(), manifest.end(), '\n'), 2);
  std::string csv = read("rank_0/Net/0/0/statistic.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7);  // one header, six rows
}

TEST_F(JobWriterTest, DurabilityNoneLosesUnsyncedDataInACrash) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op = specExampleOp();
  ASSERT_TRUE(w->writeOp(op.record()));
  ASSERT_TRUE(w->completeIteration(0, 0));
  mem_->simulateCrash();
  EXPECT_FALSE(mem_->exists("rank_0/.dump_metadata/manifest.jsonl"));
}

TEST_F(JobWriterTest, DurabilityIterationMakesACompletedIterationSurviveACrash) {
  JobOptions o;
  o.durability = config::Durability::kIteration;
  auto w = make(makePlan(config::SavedData::kFull), o);
  OwnedOp op = specExampleOp();
  ASSERT_TRUE(w->writeOp(op.record()));
  OwnedOp next = specExampleOp();
  next.iteration = 1;
  ASSERT_TRUE(w->writeOp(next.record()));
  ASSERT_TRUE(w->completeIteration(0, 0));
  mem_->simulateCrash();
  EXPECT_EQ(npyFilesIn("rank_0/Net/0/0").size(), 3u);
  for (auto& f : npyFilesIn("rank_0/Net/0/0"))
    EXPECT_TRUE(parseNpy(read("rank_0/Net/0/0/" + f)).ok);
  std::string csv = read("rank_0/Net/0/0/statistic.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  EXPECT_NE(read("rank_0/.dump_metadata/manifest.jsonl").find("\"complete\":true"),
            std::string::npos);
  EXPECT_EQ(read("rank_0/.dump_metadata/data_dump.json"), makePlan().config_text);
  // Iteration 1 was not completed: its files were never synced.
  EXPECT_TRUE(npyFilesIn("rank_0/Net/0/1").empty());
}

TEST_F(JobWriterTest, DurabilityFileMakesEachFileSurviveACrash) {
  JobOptions o;
  o.durability = config::Durability::kFile;
  auto w = make(makePlan(config::SavedData::kFull), o);
  OwnedOp op = specExampleOp();
  ASSERT_TRUE(w->writeOp(op.record()));
  mem_->simulateCrash();
  EXPECT_EQ(npyFilesIn("rank_0/Net/0/0").size(), 3u);
  std::string csv = read("rank_0/Net/0/0/statistic.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
}

TEST_F(JobWriterTest, QuotaStopsPayloadsButStatisticsContinue) {
  JobOptions o;
  o.quota_bytes = 300;  // two 152-byte files do not fit
  auto w = make(makePlan(config::SavedData::kFull), o);
  OwnedOp op = specExampleOp();
  auto r = w->writeOp(op.record());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r.value().tensors_written, 1u);
  EXPECT_EQ(r.value().tensors_dropped, 2u);
  EXPECT_EQ(npyFilesIn("rank_0/Net/0/0").size(), 1u);
  std::string csv = read("rank_0/Net/0/0/statistic.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  auto c = w->counters();
  EXPECT_EQ(c.tensors_dropped, 2u);
  EXPECT_NE(c.stop_reason.find("quota of 300 bytes"), std::string::npos) << c.stop_reason;
  ASSERT_TRUE(w->completeIteration(0, 0));
  auto line = nlohmann::json::parse(read("rank_0/.dump_metadata/manifest.jsonl"));
  EXPECT_EQ(line["dropped"], 2);
  EXPECT_EQ(line["reasons"][0], c.stop_reason);
  // Stopped for good: a small tensor that would fit is dropped too.
  OwnedOp small;
  small.iteration = 1;
  small.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {1}));
  EXPECT_EQ(w->writeOp(small.record()).value().tensors_dropped, 1u);
}

TEST_F(JobWriterTest, FreeSpaceWatermarkStopsPayloads) {
  mem_->setCapacity(1600);  // ~1350 bytes free after the metadata files
  JobOptions o;
  o.min_free_bytes = 1500;
  auto w = make(makePlan(config::SavedData::kFull), o);
  OwnedOp op = specExampleOp();
  auto r = w->writeOp(op.record());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r.value().tensors_dropped, 3u);
  auto c = w->counters();
  EXPECT_NE(c.stop_reason.find("free space below"), std::string::npos) << c.stop_reason;
  EXPECT_TRUE(npyFilesIn("rank_0/Net/0/0").empty());
  EXPECT_TRUE(mem_->exists("rank_0/Net/0/0/statistic.csv"));
}

TEST_F(JobWriterTest, FreeSpaceIsNotAskedForEveryTensor) {
  auto fault = std::make_shared<FaultInjectingFileSystem>(mem_);
  JobOptions o;
  o.min_free_bytes = 1;
  auto w = JobWriter::create(fault, makePlan(config::SavedData::kTensor), o);
  ASSERT_TRUE(w.has_value());
  for (int i = 0; i < 20; ++i) {
    OwnedOp op = specExampleOp(kTs + 10 * i);
    ASSERT_TRUE(w.value()->writeOp(op.record()));
  }
  EXPECT_EQ(fault->calls(FsOp::kFreeBytes), 1u);
}

TEST_F(JobWriterTest, IterationDirectoriesAreResolvedOnce) {
  auto fault = std::make_shared<FaultInjectingFileSystem>(mem_);
  auto w = JobWriter::create(fault, makePlan(config::SavedData::kFull), {});
  ASSERT_TRUE(w.has_value());
  uint64_t after_create = fault->calls(FsOp::kOpenDirectory);
  for (int i = 0; i < 10; ++i) {
    OwnedOp op = specExampleOp(kTs + 10 * i);
    ASSERT_TRUE(w.value()->writeOp(op.record()));
  }
  EXPECT_EQ(fault->calls(FsOp::kOpenDirectory), after_create + 1);
  EXPECT_EQ(fault->calls(FsOp::kOpenAppend), 1u);  // statistic.csv, opened once
}

TEST_F(JobWriterTest, NoSpaceErrorNamesTheFileAndLeavesNothingPartial) {
  mem_->setCapacity(1000);
  auto w = make(makePlan(config::SavedData::kTensor));
  std::vector<float> big(1000, 1.0f);
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {1000}, big));
  auto r = w->writeOp(op.record());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kNoSpace);
  EXPECT_NE(r.error().message.find("rank_0/Net/0/0/Add.Default_Add-op0.0.0."), std::string::npos)
      << r.error().message;
  EXPECT_TRUE(filesIn("rank_0/Net/0/0").empty());
  auto c = w->counters();
  EXPECT_EQ(c.write_errors, 1u);
  EXPECT_EQ(c.last_error, r.error().message);
  ASSERT_TRUE(w->completeIteration(0, 0));
  auto line = nlohmann::json::parse(read("rank_0/.dump_metadata/manifest.jsonl"));
  EXPECT_EQ(line["complete"], false);
}

TEST_F(JobWriterTest, MalformedTensorWritesNothing) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op = specExampleOp();
  op.tensors[2].bytes.resize(20);  // 6 float32 need 24
  auto r = w->writeOp(op.record());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("needs 24"), std::string::npos) << r.error().message;
  EXPECT_FALSE(mem_->exists("rank_0/Net/0/0"));
  OwnedOp neg;
  neg.tensors.push_back(floatTensor(Io::kOutput, 0, {-1}, {}));
  EXPECT_FALSE(w->writeOp(neg.record()).has_value());
}

TEST_F(JobWriterTest, HugeShapesCannotWrapTheByteCount) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op;
  // 2^60 complex128 elements would need 2^64 bytes, which wraps to 0 = the empty data given.
  op.tensors.push_back(makeTensor(Io::kOutput, 0, DType::kComplex128,
                                  {int64_t{1} << 30, int64_t{1} << 30}, std::vector<double>{}));
  auto r = w->writeOp(op.record());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("more than 2^56 elements"), std::string::npos);
}

TEST_F(JobWriterTest, MissingTimestampIsFilledWithNow) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {1}, 0));
  ASSERT_TRUE(w->writeOp(op.record()));
  auto files = npyFilesIn("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 1u);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(files[0], m, std::regex("\\.0\\.0\\.(\\d+)\\.output")));
  uint64_t ts = std::stoull(m[1]);
  EXPECT_GT(ts, kTs);
  EXPECT_NE(read("rank_0/Net/0/0/statistic.csv").find("," + m[1].str() + ",output,"),
            std::string::npos);
}

std::string lz4Decompress(const std::string& in) {
  LZ4F_dctx* ctx = nullptr;
  LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION);
  std::string out(1 << 20, '\0');
  size_t dst = out.size(), src = in.size();
  size_t r = LZ4F_decompress(ctx, out.data(), &dst, in.data(), &src, nullptr);
  LZ4F_freeDecompressionContext(ctx);
  if (LZ4F_isError(r) || r != 0) return "<bad frame>";
  out.resize(dst);
  return out;
}

TEST_F(JobWriterTest, Lz4CompressionWritesNpyLz4Files) {
  JobOptions o;
  o.compression = config::Compression::kLz4;
  auto w = make(makePlan(config::SavedData::kTensor), o);
  OwnedOp op = specExampleOp();
  ASSERT_TRUE(w->writeOp(op.record()));
  auto files = filesIn("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 3u);
  for (auto& f : files) {
    EXPECT_EQ(f.substr(f.size() - 8), ".npy.lz4");
    auto info = parseNpy(lz4Decompress(read("rank_0/Net/0/0/" + f)));
    EXPECT_TRUE(info.ok) << f;
  }
}

TEST_F(JobWriterTest, ConcurrentWritersNeverInterleaveRows) {
  auto w = make(makePlan(config::SavedData::kFull));
  constexpr int kThreads = 4, kOps = 150;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        OwnedOp op = specExampleOp(kTs + static_cast<uint64_t>(t * 100000 + i * 10));
        op.op_name = "Default/T" + std::to_string(t) + "-op" + std::to_string(i);
        ASSERT_TRUE(w->writeOp(op.record()));
      }
    });
  }
  for (auto& th : threads) th.join();
  std::string csv = read("rank_0/Net/0/0/statistic.csv");
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("Op Type,", 0), 0u);
  std::regex row(
      "Add,Default/T\\d-op\\d+,0,0,\\d+,(input|output),[01],24,float32,\"\\[2,3\\]\","
      "\\d+,\\d+,[0-9.]+,");
  int rows = 0;
  while (std::getline(in, line)) {
    ++rows;
    EXPECT_TRUE(std::regex_match(line, row)) << line;
  }
  EXPECT_EQ(rows, kThreads * kOps * 3);
  EXPECT_EQ(npyFilesIn("rank_0/Net/0/0").size(), static_cast<size_t>(kThreads * kOps * 3));
  EXPECT_EQ(w->counters().tensors_written, static_cast<uint64_t>(kThreads * kOps * 3));
}

// --- Bounded open directories (JobOptions::max_open_directories) ---

// Descriptors open in this process now.
size_t openFdCount() {
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd");
       it != std::filesystem::directory_iterator(); ++it) {
    ++n;
  }
  return n;
}

size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(JobWriterTest, TenThousandOpenIterationsKeepAtMostTheCapOpenAndLoseNothing) {
  constexpr uint32_t kIterations = 10000;
  constexpr uint64_t kCap = 64;
  ASSERT_EQ(JobOptions{}.max_open_directories, kCap);  // the default
  auto w = make(makePlan(config::SavedData::kFull));
  uint64_t most_dirs = 0, most_fds = 0;
  auto write = [&](uint32_t iteration, uint64_t ts) {
    OwnedOp op = specExampleOp(ts);
    op.iteration = iteration;
    ASSERT_TRUE(w->writeOp(op.record()));
    JobCounters c = w->counters();
    most_dirs = std::max(most_dirs, c.open_directories);
    most_fds = std::max(most_fds, c.open_fds);
  };
  for (uint32_t i = 0; i < kIterations; ++i) write(i, kTs);
  // Back to iterations closed long ago: reopened, their rows appended after the old ones.
  for (uint32_t i = 0; i < kIterations; i += 1000) write(i, kTs + 100);
  EXPECT_EQ(most_dirs, kCap);
  EXPECT_LE(most_fds, 2 * kCap);            // each open iteration directory holds its statistic.csv
  std::map<std::string, size_t> npy_files;  // by directory; one walk of the whole tree
  for (const auto& e : mem_->list()) {
    if (e.path.ends_with(".npy")) ++npy_files[e.path.substr(0, e.path.rfind('/'))];
  }
  for (uint32_t i = 0; i < kIterations; ++i) {
    const size_t ops = i % 1000 == 0 ? 2 : 1;
    const std::string dir = "rank_0/Net/0/" + std::to_string(i);
    ASSERT_EQ(npy_files[dir], 3 * ops) << dir;
    std::string csv = read(dir + "/statistic.csv");
    ASSERT_EQ(countOf(csv, "\n"), 1 + 3 * ops) << dir;
    ASSERT_EQ(countOf(csv, "Op Type,"), 1u) << dir;  // no second header after a reopen
  }
  for (uint32_t i = 0; i < kIterations; ++i) ASSERT_TRUE(w->completeIteration(0, i));
  std::istringstream manifest(read("rank_0/.dump_metadata/manifest.jsonl"));
  std::string line;
  uint32_t lines = 0;
  while (std::getline(manifest, line)) {
    auto j = nlohmann::json::parse(line);
    const uint32_t i = j["iteration"];
    EXPECT_EQ(i, lines);
    EXPECT_EQ(j["tensors"], i % 1000 == 0 ? 6u : 3u) << line;
    EXPECT_EQ(j["complete"], true) << line;
    ++lines;
  }
  EXPECT_EQ(lines, kIterations);
  // Completed iterations hold nothing: the metadata directory and manifest.jsonl remain.
  EXPECT_EQ(w->counters().open_directories, 1u);
  EXPECT_EQ(w->counters().open_fds, 2u);
}

TEST_F(JobWriterTest, ConcurrentWritersOverMoreDirectoriesThanTheCapLoseNothing) {
  JobOptions o;
  o.max_open_directories = 3;  // fewer than the threads: pinned directories exceed it a while
  auto w = make(makePlan(config::SavedData::kFull), o);
  constexpr int kThreads = 4, kOps = 200, kIterations = 10;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        OwnedOp op = specExampleOp(kTs + static_cast<uint64_t>(t * 100000 + i * 10));
        op.op_name = "Default/T" + std::to_string(t) + "-op" + std::to_string(i);
        op.iteration = static_cast<uint32_t>(i % kIterations);
        ASSERT_TRUE(w->writeOp(op.record()));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(w->counters().open_directories, 3u);
  ASSERT_TRUE(w->finish());
  for (int i = 0; i < kIterations; ++i) {
    std::string csv = read("rank_0/Net/0/" + std::to_string(i) + "/statistic.csv");
    EXPECT_EQ(countOf(csv, "\n"), 1u + kThreads * kOps / kIterations * 3) << i;
    EXPECT_EQ(countOf(csv, "Op Type,"), 1u) << i;
  }
  EXPECT_EQ(countOf(read("rank_0/.dump_metadata/manifest.jsonl"),
                    "\"tensors\":" + std::to_string(kThreads * kOps / kIterations * 3)),
            static_cast<size_t>(kIterations));
  EXPECT_EQ(w->counters().open_fds, 2u);  // the metadata directory and manifest.jsonl
}

TEST_F(JobWriterTest, DurabilityIterationSyncsFilesOfADirectoryClosedMeanwhile) {
  JobOptions o;
  o.durability = config::Durability::kIteration;
  o.max_open_directories = 1;
  auto w = make(makePlan(config::SavedData::kFull), o);
  for (uint32_t it : {0u, 1u}) {  // writing iteration 1 closes iteration 0
    OwnedOp op = specExampleOp();
    op.iteration = it;
    ASSERT_TRUE(w->writeOp(op.record()));
  }
  ASSERT_TRUE(w->completeIteration(0, 0));
  mem_->simulateCrash();
  EXPECT_EQ(npyFilesIn("rank_0/Net/0/0").size(), 3u);
  EXPECT_EQ(countOf(read("rank_0/Net/0/0/statistic.csv"), "\n"), 4u);
}

TEST(JobWriterPosixTest, OpenDescriptorsOnARealFileSystemMatchTheCounterAndStayBounded) {
  // tmpfs where there is one: 10,000 mkdirs on a disk of a busy CI machine take minutes.
  testing::TempDir root(std::filesystem::is_directory("/dev/shm")
                            ? std::string("/dev/shm")
                            : std::filesystem::temp_directory_path().string());
  auto fs = openPosixFileSystem(root.path());
  ASSERT_TRUE(fs.has_value());
  constexpr uint32_t kIterations = 10000;
  constexpr uint64_t kCap = 16;
  JobOptions o;
  o.max_open_directories = kCap;
  const size_t baseline = openFdCount();
  auto w = JobWriter::create(fs.value(), makePlan(config::SavedData::kStatistic), o);
  ASSERT_TRUE(w.has_value()) << w.error().message;
  size_t most = 0;
  for (uint32_t i = 0; i < kIterations; ++i) {
    OwnedOp op = specExampleOp();
    op.iteration = i;
    ASSERT_TRUE(w.value()->writeOp(op.record()));
    if (i % 10 == 0) {
      const size_t held = openFdCount() - baseline;
      ASSERT_EQ(held, w.value()->counters().open_fds) << "after iteration " << i;
      most = std::max(most, held);
    }
  }
  EXPECT_LE(most, 2 * kCap);
  EXPECT_LE(w.value()->counters().open_directories, kCap);
  ASSERT_TRUE(w.value()->finish());
  for (uint32_t i = 0; i < kIterations; ++i) {
    auto csv =
        testing::readFile(root.path() + "/rank_0/Net/0/" + std::to_string(i) + "/statistic.csv");
    ASSERT_TRUE(csv.has_value()) << i;
    ASSERT_EQ(countOf(*csv, "\n"), 4u) << i;
  }
  auto manifest = testing::readFile(root.path() + "/rank_0/.dump_metadata/manifest.jsonl");
  ASSERT_TRUE(manifest.has_value());
  EXPECT_EQ(countOf(*manifest, "\n"), kIterations);
  EXPECT_EQ(countOf(*manifest, "\"tensors\":3,"), kIterations);
  w.value().reset();
  EXPECT_EQ(openFdCount(), baseline);
}

// --- Leftover temporary files ---

// Plants a file named `name` in directory `dir` of the in-memory tree.
void plant(MemoryFileSystem& fs, const std::string& dir, const std::string& name) {
  auto d = fs.openDirectory(dir, {.create = true});
  ASSERT_TRUE(d.has_value());
  auto f = d.value()->openAppend(name);
  ASSERT_TRUE(f.has_value());
  ASSERT_TRUE(f.value()->append("partial"));
}

TEST_F(JobWriterTest, StaleTemporaryFilesAreRemovedWhenTheIterationIsFirstOpened) {
  const std::string dir = "rank_0/Net/0/5";
  const std::string ours = temporaryName();  // a file this process is writing
  for (const char* stale : {".dumpd-tmp-999999-0badf00d-1", ".dumpd-tmp-999998-12345678-2"}) {
    plant(*mem_, dir, stale);
  }
  plant(*mem_, dir, ours);
  JobOptions o;
  o.max_open_directories = 1;
  auto w = make(makePlan(config::SavedData::kFull), o);
  EXPECT_EQ(w->counters().stale_temporaries_removed, 0u);
  OwnedOp op = specExampleOp();
  op.iteration = 5;
  ASSERT_TRUE(w->writeOp(op.record()));
  EXPECT_FALSE(mem_->exists(dir + "/.dumpd-tmp-999999-0badf00d-1"));
  EXPECT_FALSE(mem_->exists(dir + "/.dumpd-tmp-999998-12345678-2"));
  EXPECT_TRUE(mem_->exists(dir + "/" + ours));
  EXPECT_EQ(npyFilesIn(dir).size(), 3u);
  EXPECT_EQ(w->counters().stale_temporaries_removed, 2u);

  // Closed (cap 1) and reopened: cleaned only the first time in this writer.
  plant(*mem_, dir, ".dumpd-tmp-999997-00000000-3");
  op.iteration = 6;
  ASSERT_TRUE(w->writeOp(op.record()));
  op.iteration = 5;
  ASSERT_TRUE(w->writeOp(op.record()));
  EXPECT_TRUE(mem_->exists(dir + "/.dumpd-tmp-999997-00000000-3"));
  EXPECT_EQ(w->counters().stale_temporaries_removed, 2u);
}

TEST_F(JobWriterTest, StaleTemporaryFilesAreRemovedFromEveryDirectoryTheWriterUses) {
  const char* stale = ".dumpd-tmp-999999-0badf00d-1";
  for (const char* dir : {"rank_0/.dump_metadata", "rank_0/graphs", "rank_0/execution_order",
                          "rank_0/Net/0/constants"}) {
    plant(*mem_, dir, stale);
  }
  auto w = make(makePlan(config::SavedData::kFull));
  EXPECT_FALSE(mem_->exists(std::string("rank_0/.dump_metadata/") + stale));
  ASSERT_TRUE(w->writeGraph(0, "ir", {}));
  ASSERT_TRUE(w->writeExecutionOrder(0, {"Default/Add-op0"}));
  auto t = floatTensor(Io::kOutput, 0, {1}, {1});
  ASSERT_TRUE(w->writeConstant(0, "w", t.view()));
  for (const char* dir : {"rank_0/graphs", "rank_0/execution_order", "rank_0/Net/0/constants"}) {
    EXPECT_FALSE(mem_->exists(std::string(dir) + "/" + stale)) << dir;
  }
  EXPECT_EQ(w->counters().stale_temporaries_removed, 4u);
}

// --- Acting as the client ---

TEST(JobWriterPosixTest, EveryEntryOfTheJobBelongsToTheClient) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: acts as the real uid 1234";
  testing::TempDir base;
  ASSERT_EQ(::chmod(base.path().c_str(), 0755), 0);
  const std::string root = base.path() + "/dumps";
  ASSERT_EQ(::mkdir(root.c_str(), 0700), 0);
  ASSERT_EQ(::chown(root.c_str(), 1234, 1234), 0);
  PosixOptions po;
  po.act_as = Credentials{1234, 1234, {}};
  auto fs = openPosixFileSystem(root, po);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  JobOptions o;
  o.durability = config::Durability::kIteration;
  auto w = JobWriter::create(fs.value(), makePlan(config::SavedData::kFull), o);
  ASSERT_TRUE(w.has_value()) << w.error().message;
  OwnedOp op = specExampleOp();
  op.op_name = std::string(300, 'n');  // a mapped name: mapping.csv too
  ASSERT_TRUE(w.value()->writeOp(op.record()));
  ASSERT_TRUE(w.value()->writeGraph(0, "ir", "pb"));
  ASSERT_TRUE(w.value()->appendGlobalExecutionOrder(0, 0));
  ASSERT_TRUE(w.value()->completeIteration(0, 0));
  EXPECT_EQ(currentThreadCredentials().uid, 0u);  // every call gave the credentials back
  size_t entries = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    struct stat st;
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1234u) << e.path();
    EXPECT_EQ(st.st_gid, 1234u) << e.path();
    ++entries;
  }
  EXPECT_GE(entries, 14u);  // 4 directories down to the iteration, 3 npy, 2 csv, metadata...
}

}  // namespace
}  // namespace dumpd::storage
