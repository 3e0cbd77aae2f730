#include "tools/dump_tree.h"

#include <gtest/gtest.h>
#include <lz4frame.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "storage/format/bin_file.h"
#include "storage/format/npy.h"
#include "storage/format/statistic_csv.h"
#include "tests/tools/tools_test_util.h"

namespace dumpd::tools {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::writeFile;

// An .npy of `stored` elements with `shape`; the data is `elements * size` zero bytes.
std::string npy(DType stored, std::vector<int64_t> shape) {
  std::string out;
  storage::buildNpyHeader(out, stored, shape);
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  out.append(n * dtypeSize(stored), '\0');
  return out;
}

std::string lz4(const std::string& raw) {
  std::string out(LZ4F_compressFrameBound(raw.size(), nullptr), '\0');
  out.resize(LZ4F_compressFrame(out.data(), out.size(), raw.data(), raw.size(), nullptr));
  return out;
}

const std::string kIter = "/rank_3/Net/2/7/";

Result<DumpTree> scan(const TempDir& d) { return scanDumpTree(d.path(), 2); }

TEST(DumpTree, MindSporeNameGivesEveryFieldAndTheHeaderTheShape) {
  TempDir d;
  writeFile(d.path() + kIter + "Add.Default_Add-op0.11.5.1700.input.1.DefaultFormat.float16.npy",
            npy(DType::kFloat16, {2, 3}));
  auto tree = scan(d);
  ASSERT_TRUE(tree) << tree.error().message;
  ASSERT_EQ(tree->entries.size(), 1u);
  const TensorEntry& e = tree->entries[0];
  EXPECT_EQ(e.error, "");
  EXPECT_EQ(e.rank, 3u);
  EXPECT_EQ(e.graph, 2u);
  EXPECT_EQ(e.iteration, 7u);
  EXPECT_EQ(e.location, "");
  EXPECT_EQ(e.op_type, "Add");
  EXPECT_EQ(e.op_name, "Default_Add-op0");
  EXPECT_EQ(e.task_id, 11u);
  EXPECT_EQ(e.stream_id, 5u);
  EXPECT_EQ(e.timestamp, 1700u);
  EXPECT_EQ(e.io, Io::kInput);
  EXPECT_EQ(e.slot, 1u);
  EXPECT_EQ(e.dtype, "float16");
  EXPECT_EQ(shapeText(e), "[2,3]");
  EXPECT_EQ(e.kind, TensorFileKind::kNpy);
}

TEST(DumpTree, ARootInsideTheTreeStillReadsRankGraphIterationFromThePath) {
  TempDir d;
  writeFile(d.path() + kIter + "Add.a.0.0.1.output.0.DefaultFormat.float32.npy",
            npy(DType::kFloat32, {1}));
  auto tree = scanDumpTree(d.path() + kIter, 1);
  ASSERT_TRUE(tree) << tree.error().message;
  ASSERT_EQ(tree->entries.size(), 1u);
  EXPECT_EQ(tree->entries[0].rank, 3u);
  EXPECT_EQ(tree->entries[0].iteration, 7u);
}

TEST(DumpTree, OtherDirectoriesGetZeroAndTheirRelativePath) {
  TempDir d;
  writeFile(d.path() + "/run/a/Mul.m.0.0.5.output.0.DefaultFormat.int32.npy",
            npy(DType::kInt32, {4}));
  auto tree = scan(d);
  ASSERT_TRUE(tree);
  ASSERT_EQ(tree->entries.size(), 1u);
  EXPECT_EQ(tree->entries[0].rank, 0u);
  EXPECT_EQ(tree->entries[0].graph, 0u);
  EXPECT_EQ(tree->entries[0].location, "run/a");
}

TEST(DumpTree, SkipsConstantsDotDirectoriesSymlinksAndOtherFiles) {
  TempDir d;
  const std::string name = "Add.a.0.0.1.output.0.DefaultFormat.float32.npy";
  writeFile(d.path() + kIter + name, npy(DType::kFloat32, {1}));
  writeFile(d.path() +
                "/rank_3/Net/2/constants/Parameter.data-1.0.0.1.output.0.DefaultFormat."
                "float32.npy",
            npy(DType::kFloat32, {1}));
  writeFile(d.path() + "/rank_3/.dump_metadata/" + name, npy(DType::kFloat32, {1}));
  writeFile(d.path() + kIter + "Add.a.json", "{}");
  writeFile(d.path() + "/rank_3/execution_order/ms_execution_order_graph_2.csv", "x\n");
  TempDir outside;
  writeFile(outside.path() + "/rank_3/Net/2/7/" + name, npy(DType::kFloat32, {1}));
  fs::create_directory_symlink(outside.path() + "/rank_3", d.path() + "/rank_4");
  fs::create_symlink(d.path() + kIter + name,
                     d.path() + kIter + "Add.b.0.0.2.output.0.DefaultFormat.float32.npy");
  auto tree = scan(d);
  ASSERT_TRUE(tree);
  ASSERT_EQ(tree->entries.size(), 1u);
  EXPECT_EQ(tree->entries[0].op_name, "a");
}

TEST(DumpTree, ReadsLz4HeadersAndMsaccucmpNames) {
  TempDir d;
  writeFile(d.path() + kIter + "Add.z.0.0.1.output.0.DefaultFormat.bfloat16.npy.lz4",
            lz4(npy(DType::kFloat32, {3, 4})));
  writeFile(d.path() + kIter + "Conv2D.c.1.2.3.input.0.32x4.npy", npy(DType::kFloat16, {32, 4}));
  auto tree = scan(d);
  ASSERT_TRUE(tree);
  ASSERT_EQ(tree->entries.size(), 2u);
  const TensorEntry& z = tree->entries[0];
  EXPECT_EQ(z.kind, TensorFileKind::kNpyLz4);
  EXPECT_EQ(z.dtype, "bfloat16");  // the file name's dtype, stored as float32
  EXPECT_EQ(shapeText(z), "[3,4]");
  const TensorEntry& c = tree->entries[1];
  EXPECT_EQ(c.op_name, "c");
  EXPECT_EQ(c.io, Io::kInput);
  EXPECT_EQ(c.dtype, "float16");  // from the header
  EXPECT_EQ(shapeText(c), "[32,4]");
}

TEST(DumpTree, BinFileGivesOneEntryPerTensorWithItsSlice) {
  TempDir d;
  const int64_t s2[] = {2}, s3[] = {3};
  std::vector<storage::BinTensorSpec> specs = {
      {Io::kInput, DType::kFloat32, s2, "ND", 8},
      {Io::kInput, DType::kBFloat16, s3, "ND", 6},
      {Io::kOutput, DType::kInt4, s3, "ND", 2},
  };
  std::string file;
  storage::buildBinHeader(file, "Default/Mul-op1", 42, specs);
  const size_t header = file.size();
  file.append(16, '\0');
  writeFile(d.path() + kIter + "Mul.Default_Mul-op1.4.0.42", file);
  auto tree = scan(d);
  ASSERT_TRUE(tree);
  ASSERT_EQ(tree->entries.size(), 3u);
  const auto& e = tree->entries;
  EXPECT_EQ(e[0].io, Io::kInput);
  EXPECT_EQ(e[0].slot, 0u);
  EXPECT_EQ(e[0].bin_offset, header);
  EXPECT_EQ(e[1].slot, 1u);
  EXPECT_EQ(e[1].dtype, "bfloat16");
  EXPECT_EQ(e[1].bin_dtype, DType::kBFloat16);
  EXPECT_EQ(e[1].bin_offset, header + 8);
  EXPECT_EQ(e[1].bin_size, 6u);
  EXPECT_EQ(e[2].io, Io::kOutput);
  EXPECT_EQ(e[2].bin_dtype, DType::kInt4);
  EXPECT_EQ(e[2].bin_elements, 3u);
  EXPECT_EQ(e[2].op_name, "Default_Mul-op1");
  EXPECT_EQ(e[2].task_id, 4u);
  EXPECT_EQ(e[2].timestamp, 42u);
  for (const TensorEntry& t : e) EXPECT_EQ(t.kind, TensorFileKind::kBin);
}

TEST(DumpTree, MappingCsvRestoresLongNames) {
  TempDir d;
  const std::string op(300, 'x');
  writeFile(d.path() + kIter + "123.npy", npy(DType::kFloat32, {2}));
  writeFile(d.path() + kIter + "456.npy.lz4", lz4(npy(DType::kFloat32, {5})));
  writeFile(d.path() + kIter + "mapping.csv",
            "123.npy,Add." + op + ".0.0.1.output.0.DefaultFormat.float32.npy\n456.npy,Add." + op +
                ".0.0.2.output.1.DefaultFormat.float32.npy\n");
  auto tree = scan(d);
  ASSERT_TRUE(tree);
  ASSERT_EQ(tree->entries.size(), 2u);
  EXPECT_EQ(tree->entries[0].op_name, op);
  EXPECT_EQ(tree->entries[0].slot, 0u);
  EXPECT_EQ(tree->entries[1].op_name, op);
  EXPECT_EQ(tree->entries[1].slot, 1u);
  EXPECT_EQ(tree->entries[1].kind, TensorFileKind::kNpyLz4);
  EXPECT_EQ(shapeText(tree->entries[1]), "[5]");
}

std::string statisticCsv(config::MsFormat format, bool with_file_row) {
  const config::StatCategory cats[] = {config::StatCategory::kMax, config::StatCategory::kMin,
                                       config::StatCategory::kAvg, config::StatCategory::kL2Norm};
  std::string out = storage::statisticCsvHeader(cats);
  const int64_t shape[] = {2, 3};
  storage::TensorStats stats;
  stats.max = 6;
  stats.min = 1;
  stats.avg = 3.5;
  stats.l2norm = 9.539392;
  storage::StatRow row;
  row.op_type = "Add";
  row.op_name = "Default/Add-op0";
  row.timestamp_us = 100;
  row.io = Io::kOutput;
  row.shape = shape;
  if (with_file_row) storage::appendStatisticRow(out, row, stats, cats, format);
  row.op_name = "Default/network/Sub-op2";
  row.timestamp_us = 200;
  row.io = Io::kInput;
  row.slot = 1;
  stats.max = std::numeric_limits<double>::quiet_NaN();
  storage::appendStatisticRow(out, row, stats, cats, format);
  return out;
}

TEST(DumpTree, StatisticRowsOfBothGenerationsJoinFilesOrStandAlone) {
  for (config::MsFormat format : {config::MsFormat::k26, config::MsFormat::k27}) {
    SCOPED_TRACE(static_cast<int>(format));
    TempDir d;
    writeFile(d.path() + kIter + "Add.Default_Add-op0.0.0.100.output.0.DefaultFormat.float32.npy",
              npy(DType::kFloat32, {2, 3}));
    writeFile(d.path() + kIter + "statistic.csv", statisticCsv(format, true));
    auto tree = scan(d);
    ASSERT_TRUE(tree);
    ASSERT_EQ(tree->entries.size(), 2u);
    const TensorEntry& joined = tree->entries[0];
    EXPECT_EQ(joined.kind, TensorFileKind::kNpy);
    ASSERT_TRUE(joined.statistics);
    EXPECT_EQ(*joined.statistics->max, 6);
    EXPECT_EQ(*joined.statistics->l2norm, 9.53939);
    const TensorEntry& alone = tree->entries[1];
    EXPECT_EQ(alone.kind, TensorFileKind::kNone);
    EXPECT_EQ(alone.op_name, "Default_network_Sub-op2");
    EXPECT_EQ(alone.io, Io::kInput);
    EXPECT_EQ(alone.slot, 1u);
    EXPECT_EQ(alone.dtype, "float32");
    EXPECT_EQ(shapeText(alone), "[2,3]");
    ASSERT_TRUE(alone.statistics);
    EXPECT_TRUE(std::isnan(*alone.statistics->max));
    EXPECT_EQ(*alone.statistics->min, 1);
    EXPECT_EQ(*alone.statistics->avg, 3.5);
  }
}

TEST(DumpTree, UnreadableFilesBecomeErrorEntriesNamingThemAndTheScanGoesOn) {
  TempDir d;
  const std::string bad = d.path() + kIter + "Add.bad.0.0.1.output.0.DefaultFormat.float32.npy";
  writeFile(bad, "not an npy");
  writeFile(d.path() + kIter + "Add.binbad.0.0.2", "garbage!garbage!");
  writeFile(d.path() + kIter + "Add.good.0.0.3.output.0.DefaultFormat.float32.npy",
            npy(DType::kFloat32, {1}));
  writeFile(d.path() + "/rank_3/Net/2/8/statistic.csv",
            "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot\nAdd,x,0,0,5,sideways,0,\n"
            ",,,\n,\n");
  auto tree = scan(d);
  ASSERT_TRUE(tree);
  ASSERT_EQ(tree->entries.size(), 4u);
  EXPECT_NE(tree->entries[0].error.find(bad), std::string::npos);
  EXPECT_EQ(tree->entries[0].op_name, "bad");  // still matchable by its name
  EXPECT_NE(tree->entries[1].error.find("Add.binbad.0.0.2"), std::string::npos);
  EXPECT_EQ(tree->entries[2].error, "");
  // Bad rows fold into one entry (a file of them cannot make a list as long as itself).
  EXPECT_NE(tree->entries[3].error.find("statistic.csv: 3 rows are not statistic rows"),
            std::string::npos)
      << tree->entries[3].error;
  EXPECT_NE(tree->entries[3].error.find("the first on line 2"), std::string::npos);
}

TEST(DumpTree, EntriesComeInExecutionOrder) {
  TempDir d;
  auto put = [&](const std::string& dir, const std::string& name) {
    writeFile(d.path() + dir + name, npy(DType::kFloat32, {1}));
  };
  put("/rank_0/Net/0/1/", "A.late.0.0.1.input.0.F.float32.npy");
  put("/rank_0/Net/0/0/", "A.b.0.0.20.output.0.F.float32.npy");
  put("/rank_0/Net/0/0/", "A.b.0.0.20.input.1.F.float32.npy");
  put("/rank_0/Net/0/0/", "A.b.0.0.20.input.0.F.float32.npy");
  put("/rank_0/Net/0/0/", "A.a.0.0.10.output.0.F.float32.npy");
  auto tree = scan(d);
  ASSERT_TRUE(tree);
  std::vector<std::string> order;
  for (const TensorEntry& e : tree->entries) {
    order.push_back(e.op_name + (e.io == Io::kInput ? ".in" : ".out") + std::to_string(e.slot));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a.out0", "b.in0", "b.in1", "b.out0", "late.in0"}));
}

TEST(DumpTree, AMissingOrNonDirectoryRootFails) {
  TempDir d;
  auto missing = scanDumpTree(d.path() + "/nope", 1);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("nope"), std::string::npos);
  writeFile(d.path() + "/file", "x");
  auto file = scanDumpTree(d.path() + "/file", 1);
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dumpd::tools
