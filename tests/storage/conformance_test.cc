// Conformance: real files on a real file system, read back by numpy (/usr/bin/python3),
// the csv module and the lz4 command-line tool.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "storage/fs/file_system.h"
#include "storage/writer/job_writer.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

using nlohmann::json;
using testing::floatTensor;
using testing::makePlan;
using testing::makeTensor;
using testing::OwnedOp;
using testing::readFile;
using testing::TempDir;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

class ConformanceTest : public ::testing::Test {
 protected:
  std::shared_ptr<FileSystem> fs() {
    auto fs = openPosixFileSystem(root_.path());
    EXPECT_TRUE(fs.has_value());
    return fs.value();
  }
  std::unique_ptr<JobWriter> make(const config::DumpPlan& plan, JobOptions options = {}) {
    auto w = JobWriter::create(fs(), plan, std::move(options));
    EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().message);
    return w ? std::move(w.value()) : nullptr;
  }
  std::string path(const std::string& rel) { return root_.path() + "/" + rel; }

  // numpy's view of every .npy beneath `rel`, by path relative to it.
  std::map<std::string, json> load(const std::string& rel) {
    int status = 0;
    std::string out = testing::runNpyCheck("load " + path(rel), &status);
    EXPECT_EQ(status, 0) << out;
    std::map<std::string, json> files;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << line;
      if (!j.is_discarded()) files[j["path"]] = j;
    }
    return files;
  }
  json runJson(const std::string& args) {
    int status = 0;
    std::string out = testing::runNpyCheck(args, &status);
    EXPECT_EQ(status, 0) << out;
    return json::parse(out, nullptr, false);
  }

  TempDir root_;
};

TEST_F(ConformanceTest, NumpyIsInstalledForTheSystemPython) {
  int status = 0;
  std::string out = testing::runCommand("/usr/bin/python3 -c 'import numpy' 2>&1", &status);
  ASSERT_EQ(status, 0) << "the conformance tests need python3-numpy: " << out;
}

TEST_F(ConformanceTest, SpecSection7WorkedExample) {
  auto w = make(makePlan(config::SavedData::kFull));
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kInput, 0, {2, 3}, {1, 2, 3, 4, 5, 6}, 0));
  op.tensors.push_back(floatTensor(Io::kInput, 1, {2, 3}, {7, 8, 9, 10, 11, 12}, 0));
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 3}, {8, 10, 12, 14, 16, 18}, 0));
  ASSERT_TRUE(w->writeOp(op.record()));
  ASSERT_TRUE(w->completeIteration(0, 0));

  auto files = load("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 3u);
  std::regex name_re(
      "Add\\.Default_Add-op0\\.0\\.0\\.(\\d{16})\\.(input|output)\\.([01])\\.DefaultFormat\\."
      "float32\\.npy");
  std::map<std::string, std::string> ts;  // "input.0" -> timestamp
  for (auto& [name, j] : files) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(name, m, name_re)) << name;
    ts[m[2].str() + "." + m[3].str()] = m[1];
    EXPECT_EQ(j["dtype"], "float32");
    EXPECT_EQ(j["shape"], json::parse("[2,3]"));
    EXPECT_EQ(j["mindspore_identical"], true) << name;
    EXPECT_EQ(j["version"], 1);
    struct stat st;
    ASSERT_EQ(::stat(path("rank_0/Net/0/0/" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0400u);
    if (m[2] == "output") {
      EXPECT_EQ(j["values"], json::parse("[[8,10,12],[14,16,18]]"));
    }
  }
  ASSERT_EQ(ts.size(), 3u);
  EXPECT_EQ(readFile(path("rank_0/Net/0/0/statistic.csv")),
            "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
            "Max Value,Min Value,L2Norm Value\n"
            "Add,Default/Add-op0,0,0," +
                ts["input.0"] +
                ",input,0,24,float32,\"[2,3]\",6,1,9.53939,\n"
                "Add,Default/Add-op0,0,0," +
                ts["input.1"] +
                ",input,1,24,float32,\"[2,3]\",12,7,23.6432,\n"
                "Add,Default/Add-op0,0,0," +
                ts["output.0"] + ",output,0,24,float32,\"[2,3]\",18,8,32.9242,\n");
  json parsed = runJson("csv " + path("rank_0/Net/0/0/statistic.csv"));
  ASSERT_EQ(parsed["rows"].size(), 3u);
  EXPECT_EQ(parsed["rows"][0][9], "[2,3]");
  EXPECT_EQ(parsed["rows"][0].size(), 14u);  // the trailing comma adds an empty field
}

struct DtypeCase {
  DType dtype;
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape;
  std::string numpy_dtype;
  std::string values;  // JSON
};

std::vector<uint8_t> bytesOf(const auto& values) {
  std::vector<uint8_t> out(values.size() * sizeof(values[0]));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST_F(ConformanceTest, EveryDtypeRoundTripsThroughNumpy) {
  const std::vector<DtypeCase> cases = {
      {DType::kBool, {1, 0, 1}, {3}, "bool", "[true,false,true]"},
      {DType::kInt8, bytesOf(std::vector<int8_t>{-128, 0, 127}), {3}, "int8", "[-128,0,127]"},
      {DType::kInt16,
       bytesOf(std::vector<int16_t>{-32768, 1, 32767}),
       {3},
       "int16",
       "[-32768,1,32767]"},
      {DType::kInt32,
       bytesOf(std::vector<int32_t>{-5, 6, 7, 8}),
       {2, 2},
       "int32",
       "[[-5,6],[7,8]]"},
      {DType::kInt64,
       bytesOf(std::vector<int64_t>{-(int64_t{1} << 62), 9}),
       {2},
       "int64",
       "[-4611686018427387904,9]"},
      {DType::kUInt8, {0, 255}, {2}, "uint8", "[0,255]"},
      {DType::kUInt16, bytesOf(std::vector<uint16_t>{65535}), {1}, "uint16", "[65535]"},
      {DType::kUInt32, bytesOf(std::vector<uint32_t>{4294967295u}), {1}, "uint32", "[4294967295]"},
      {DType::kUInt64,
       bytesOf(std::vector<uint64_t>{18446744073709551615ull}),
       {1},
       "uint64",
       "[18446744073709551615]"},
      {DType::kFloat16,
       bytesOf(std::vector<uint16_t>{0x3C00, 0xC000, 0x7BFF, 0x0001}),
       {4},
       "float16",
       "[1.0,-2.0,65504.0,5.960464477539063e-08]"},
      {DType::kFloat32,
       bytesOf(std::vector<float>{1.5f, -0.25f}),
       {1, 2},
       "float32",
       "[[1.5,-0.25]]"},
      {DType::kFloat64,
       bytesOf(std::vector<double>{3.141592653589793}),
       {},
       "float64",
       "3.141592653589793"},
      {DType::kBFloat16,
       bytesOf(std::vector<uint16_t>{0x3FC0, 0xC000, 0x4049, 0x7F7F}),
       {2, 2},
       "float32",
       "[[1.5,-2.0],[3.140625,3.3895313892515355e+38]]"},
      {DType::kInt4, {0x7F, 0x08, 0x9A}, {5}, "int8", "[-1,7,-8,0,-6]"},
      {DType::kInt4, {0x21, 0x43, 0xF5, 0x87}, {2, 4}, "int8", "[[1,2,3,4],[5,-1,7,-8]]"},
      {DType::kUInt1, {1, 0, 0, 1}, {4}, "uint8", "[1,0,0,1]"},
      {DType::kComplex64,
       bytesOf(std::vector<float>{1, 2, -3, 4}),
       {2},
       "complex64",
       "[[1.0,2.0],[-3.0,4.0]]"},
      {DType::kComplex128,
       bytesOf(std::vector<double>{0.5, -0.5}),
       {1},
       "complex128",
       "[[0.5,-0.5]]"},
  };
  auto w = make(makePlan(config::SavedData::kTensor));
  OwnedOp op;
  for (size_t i = 0; i < cases.size(); ++i) {
    testing::OwnedTensor t;
    t.io = Io::kOutput;
    t.slot = static_cast<uint32_t>(i);
    t.dtype = cases[i].dtype;
    t.shape = cases[i].shape;
    t.bytes.resize(cases[i].bytes.size());
    std::memcpy(t.bytes.data(), cases[i].bytes.data(), t.bytes.size());
    t.timestamp_us = 1700000000000000;
    op.tensors.push_back(t);
  }
  auto r = w->writeOp(op.record());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  auto files = load("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string name = "Add.Default_Add-op0.0.0.1700000000000000.output." + std::to_string(i) +
                       ".DefaultFormat." + std::string(dtypeName(cases[i].dtype)) + ".npy";
    ASSERT_TRUE(files.count(name)) << name;
    const json& j = files[name];
    EXPECT_EQ(j["dtype"], cases[i].numpy_dtype) << name;
    EXPECT_EQ(j["values"], json::parse(cases[i].values)) << name << " " << j["values"].dump();
    EXPECT_EQ(j["mindspore_identical"], true) << name;
  }
}

TEST_F(ConformanceTest, NanAndInfStatisticsWithEveryCategory) {
  config::DumpPlan plan = makePlan(config::SavedData::kFull);
  plan.statistic_category = testing::valueCategories();
  plan.statistic_category.push_back(config::StatCategory::kMd5);
  plan.statistic_category.push_back(config::StatCategory::kSha1);
  auto w = make(plan);
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {7}, {1, kNan, -kInf, kInf, 0.0f, -0.0f, -2}));
  op.tensors.push_back(floatTensor(Io::kOutput, 1, {3}, {kInf, 1, 2}));
  op.tensors.push_back(floatTensor(Io::kOutput, 2, {2}, {1234567, 0.001f}));
  ASSERT_TRUE(w->writeOp(op.record()));
  json csv = runJson("csv " + path("rank_0/Net/0/0/statistic.csv"));
  ASSERT_EQ(csv["header"].size(), 23u);
  EXPECT_EQ(csv["header"][10], "Max Value");
  EXPECT_EQ(csv["header"][22], "SHA1");
  ASSERT_EQ(csv["rows"].size(), 3u);
  auto stats = [&](int row) {
    std::vector<std::string> v;
    for (int i = 10; i < 21; ++i) v.push_back(csv["rows"][row][i]);
    return v;
  };
  EXPECT_EQ(stats(0), (std::vector<std::string>{"nan", "nan", "nan", "7", "2", "2", "1", "1", "1",
                                                "2", "nan"}));
  EXPECT_EQ(stats(1), (std::vector<std::string>{"inf", "1", "inf", "3", "0", "3", "0", "0", "1",
                                                "0", "inf"}));
  EXPECT_EQ(stats(2), (std::vector<std::string>{"1.23457e+06", "0.001", "617284", "2", "0", "2",
                                                "0", "0", "0", "0", "1.23457e+06"}));
  // The hashes are numpy's/hashlib's hashes of the tensor bytes.
  auto files = load("rank_0/Net/0/0");
  for (auto& [name, j] : files) {
    int slot = name.find(".output.0.") != std::string::npos   ? 0
               : name.find(".output.1.") != std::string::npos ? 1
                                                              : 2;
    json h = runJson("hash " + path("rank_0/Net/0/0/" + name));
    EXPECT_EQ(csv["rows"][slot][21], h["md5"]) << name;
    EXPECT_EQ(csv["rows"][slot][22], h["sha1"]) << name;
  }
  EXPECT_EQ(files.size(), 3u);
  EXPECT_EQ(files.begin()->second["values"][1], "nan");
}

TEST_F(ConformanceTest, LongNamesAreMappedAndLoadable) {
  auto w = make(makePlan(config::SavedData::kTensor));
  OwnedOp op;
  op.op_name = "Default/" + std::string(250, 'n') + "/Conv2D-op7";
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {2}, {4, 5}));
  ASSERT_TRUE(w->writeOp(op.record()));
  auto mapping = readFile(path("rank_0/Net/0/0/mapping.csv"));
  ASSERT_TRUE(mapping.has_value());
  std::smatch m;
  ASSERT_TRUE(std::regex_match(*mapping, m,
                               std::regex("(\\d{16}\\.npy),(Add\\.Default_n{250}_"
                                          "Conv2D-op7\\.0\\.0\\.\\d+\\.output\\.0\\."
                                          "DefaultFormat\\.float32\\.npy)\n")))
      << *mapping;
  auto files = load("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files.begin()->first, m[1].str());
  EXPECT_EQ(files.begin()->second["values"], json::parse("[4.0,5.0]"));
  EXPECT_GT(m[2].length(), 255);
}

TEST_F(ConformanceTest, OverflowModeWritesOnlyOverflowingOps) {
  config::DumpPlan plan = makePlan(config::SavedData::kTensor);
  plan.op_debug_mode = 3;
  plan.overflow_number = 1;
  auto w = make(plan);
  for (int i = 0; i < 3; ++i) {
    OwnedOp op;
    op.op_name = "Default/Div-op" + std::to_string(i);
    float out = i == 0 ? 1.0f : kInf;  // op 0 is clean, op 1 overflows, op 2 is over the limit
    op.tensors.push_back(floatTensor(Io::kInput, 0, {1}, {0}));
    op.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {out}));
    ASSERT_TRUE(w->writeOp(op.record()));
  }
  auto files = load("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 2u);
  for (auto& [name, j] : files) {
    EXPECT_NE(name.find("Default_Div-op1"), std::string::npos);
    if (name.find(".output.") != std::string::npos) {
      EXPECT_EQ(j["values"][0], "inf");
    }
  }
}

TEST_F(ConformanceTest, SampleModeShape) {
  config::DumpPlan plan = makePlan(config::SavedData::kTensor);
  plan.sample_mode = true;
  plan.sample_num = 4;
  auto w = make(plan);
  OwnedOp op;
  op.tensors.push_back(makeTensor(Io::kOutput, 0, DType::kInt4, {3, 4},
                                  std::vector<uint8_t>{0x21, 0x43, 0x65, 0x87, 0, 0}));
  ASSERT_TRUE(w->writeOp(op.record()));
  auto files = load("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files.begin()->second["shape"], json::parse("[4]"));
  EXPECT_EQ(files.begin()->second["values"], json::parse("[1,2,3,4]"));
}

TEST_F(ConformanceTest, MetadataAndExecutionOrderFiles) {
  config::DumpPlan plan = makePlan();
  JobOptions o;
  o.rank = 1;
  o.device_target = "CPU";
  o.producer_version = "dumpd-test \"1\"";
  auto w = make(plan, o);
  ASSERT_TRUE(w->writeExecutionOrder(0, {"Default/Add-op0", "Default/Mul-op1"}));
  ASSERT_TRUE(w->appendGlobalExecutionOrder(0, 0));
  ASSERT_TRUE(w->appendGlobalExecutionOrder(0, 1));
  ASSERT_TRUE(w->writeGraph(0, "# IR\n", {}));
  auto constant = floatTensor(Io::kOutput, 0, {2}, {1, 2}, 1700000000000001);
  ASSERT_TRUE(w->writeConstant(0, "3", constant.view()));
  EXPECT_EQ(readFile(path("rank_1/.dump_metadata/data_dump.json")), plan.config_text);
  json config = json::parse(readFile(path("rank_1/.dump_metadata/config.json")).value());
  EXPECT_EQ(config["device_target"], "CPU");
  EXPECT_EQ(config["ms_version"], "dumpd-test \"1\"");
  EXPECT_EQ(readFile(path("rank_1/execution_order/ms_execution_order_graph_0.csv")),
            "NodeExecutionOrder-FullNameWithScope\nDefault/Add-op0\nDefault/Mul-op1\n");
  EXPECT_EQ(readFile(path("rank_1/execution_order/ms_global_execution_order_graph_0.csv")),
            "0\n1\n");
  EXPECT_EQ(readFile(path("rank_1/graphs/ms_output_trace_code_graph_0.ir")), "# IR\n");
  auto constants = load("rank_1/Net/0/constants");
  ASSERT_EQ(constants.size(), 1u);
  EXPECT_EQ(constants.begin()->first,
            "Parameter.data-3.0.0.1700000000000001.output.0.DefaultFormat.float32.npy");
  ASSERT_TRUE(w->finish());  // no iteration was opened: no manifest line
  EXPECT_FALSE(readFile(path("rank_1/.dump_metadata/manifest.jsonl")).has_value());
}

TEST_F(ConformanceTest, Lz4CommandLineRestoresTheExactNpy) {
  JobOptions o;
  o.compression = config::Compression::kLz4;
  config::DumpPlan plan = makePlan(config::SavedData::kTensor);
  std::vector<uint16_t> big(200000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint16_t>(0x3F80 + i % 64);
  auto make_op = [&] {
    OwnedOp op;
    op.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 3}, {1, 2, 3, 4, 5, 6}));
    op.tensors.push_back(makeTensor(Io::kOutput, 1, DType::kBFloat16, {200000}, big));
    return op;
  };
  {
    auto packed = make(plan, o);
    OwnedOp op = make_op();
    ASSERT_TRUE(packed->writeOp(op.record()));
  }
  plan.net_name = "Plain";
  auto plain = make(plan);
  OwnedOp op = make_op();
  ASSERT_TRUE(plain->writeOp(op.record()));
  for (const char* name :
       {"Add.Default_Add-op0.0.0.1700000000000000.output.0.DefaultFormat.float32.npy",
        "Add.Default_Add-op0.0.0.1700000000000000.output.1.DefaultFormat.bfloat16.npy"}) {
    std::string lz4 = path("rank_0/Net/0/0/") + name + ".lz4";
    ASSERT_TRUE(readFile(lz4).has_value()) << lz4;
    std::string restored = root_.path() + "/restored.npy";
    int status = 0;
    std::string out =
        testing::runCommand("lz4 -d -q -f '" + lz4 + "' '" + restored + "' 2>&1", &status);
    ASSERT_EQ(status, 0) << out;
    EXPECT_EQ(readFile(restored), readFile(path("rank_0/Plain/0/0/") + name)) << name;
    json j = runJson("file " + restored);
    EXPECT_EQ(j["mindspore_identical"], true);
    ::unlink(restored.c_str());
  }
}

TEST_F(ConformanceTest, SymlinkEscapesAreRefused) {
  TempDir outside;
  ASSERT_EQ(::symlink(outside.path().c_str(), path("rank_0").c_str()), 0);
  auto w = JobWriter::create(fs(), makePlan(), {});
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.error().code, ErrorCode::kPermission);
  EXPECT_NE(w.error().message.find("rank_0"), std::string::npos) << w.error().message;
  EXPECT_TRUE(testing::listFiles(outside.path()).empty());

  // A link planted inside the tree after the job started.
  auto w2 = make(makePlan(config::SavedData::kFull), JobOptions{.rank = 1});
  ASSERT_TRUE(std::filesystem::create_directories(path("rank_1/Net/0")));
  ASSERT_EQ(::symlink(outside.path().c_str(), path("rank_1/Net/0/5").c_str()), 0);
  OwnedOp op;
  op.iteration = 5;
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {1}));
  auto r = w2->writeOp(op.record());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kPermission);
  EXPECT_NE(r.error().message.find("rank_1/Net/0/5"), std::string::npos) << r.error().message;
  EXPECT_TRUE(testing::listFiles(outside.path()).empty());

  // A statistic.csv planted as a link to a file outside.
  std::string victim = outside.path() + "/victim";
  ASSERT_TRUE(std::ofstream(victim) << "keep");
  ASSERT_TRUE(std::filesystem::create_directories(path("rank_1/Net/0/6")));
  ASSERT_EQ(::symlink(victim.c_str(), path("rank_1/Net/0/6/statistic.csv").c_str()), 0);
  op.iteration = 6;
  r = w2->writeOp(op.record());
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("rank_1/Net/0/6/statistic.csv"), std::string::npos);
  EXPECT_EQ(readFile(victim), "keep");
  EXPECT_EQ(w2->counters().write_errors, 2u);
}

TEST_F(ConformanceTest, ConcurrentWritersKeepCsvRowsIntact) {
  auto w = make(makePlan(config::SavedData::kFull));
  constexpr int kThreads = 4, kOps = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        OwnedOp op;
        op.op_name = "Default/T" + std::to_string(t) + "/Add-op" + std::to_string(i);
        uint64_t ts = 1700000000000000 + static_cast<uint64_t>(t) * 1000000 + i;
        op.tensors.push_back(floatTensor(Io::kInput, 0, {2, 3}, {1, 2, 3, 4, 5, 6}, ts));
        op.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 3}, {8, 10, 12, 14, 16, 18}, ts));
        ASSERT_TRUE(w->writeOp(op.record()));
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(w->completeIteration(0, 0));
  json csv = runJson("csv " + path("rank_0/Net/0/0/statistic.csv"));
  ASSERT_EQ(csv["rows"].size(), static_cast<size_t>(kThreads * kOps * 2));
  for (const json& row : csv["rows"]) {
    ASSERT_EQ(row.size(), 14u) << row.dump();
    EXPECT_EQ(row[9], "[2,3]");
    EXPECT_TRUE(row[10] == "6" || row[10] == "18") << row.dump();
  }
  EXPECT_EQ(load("rank_0/Net/0/0").size(), static_cast<size_t>(kThreads * kOps * 2));
  json manifest = json::parse(readFile(path("rank_0/.dump_metadata/manifest.jsonl")).value());
  EXPECT_EQ(manifest["tensors"], kThreads * kOps * 2);
}

}  // namespace
}  // namespace dumpd::storage
