// JobWriter: the tree, file names and contents it writes (tensors and their statistics, kernel
// args, long names, constants, graphs, execution order, lz4-compressed files).
#include "storage/writer/job_writer.h"

#include <gtest/gtest.h>
#include <lz4frame.h>

#include <algorithm>
#include <cstring>
#include <regex>

#include "tests/storage/job_writer_fixture.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::JobWriterTest;
using testing::makePlan;
using testing::makeTensor;
using testing::OwnedOp;
using testing::parseNpy;
using testing::specExampleOp;

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

}  // namespace
}  // namespace dumpd::storage
