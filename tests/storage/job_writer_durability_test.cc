// JobWriter: the manifest of completed iterations, durability across a simulated crash, the
// quota and free-space limits, and write errors that leave nothing partial.
#include "storage/writer/job_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>

#include "storage/fs/fault_injection.h"
#include "tests/storage/job_writer_fixture.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::JobWriterTest;
using testing::kTs;
using testing::makePlan;
using testing::makeTensor;
using testing::OwnedOp;
using testing::parseNpy;
using testing::specExampleOp;

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
                ",\"dropped\":0,\"reasons\":[],\"whole\":true,\"writes_ok\":true,"
                "\"complete\":true}\n"
                // Tensors dropped: no write failed, but the iteration is not whole.
                "{\"graph\":0,\"iteration\":1,\"tensors\":0,\"bytes\":0,\"dropped\":4,"
                "\"reasons\":[\"backpressure: ring full\"],\"whole\":false,\"writes_ok\":true,"
                "\"complete\":false}\n");
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

TEST_F(JobWriterTest, AnIterationTheSessionEndedDuringIsNotWholeAndSaysWhy) {
  auto w = make(makePlan(config::SavedData::kTensor));
  for (uint32_t it : {1u, 2u}) {
    OwnedOp op = specExampleOp();
    op.iteration = it;
    ASSERT_TRUE(w->writeOp(op.record()));
  }
  ASSERT_TRUE(w->completeIteration(0, 1));
  ASSERT_TRUE(w->finish(0, "the job went away during this iteration"));
  const std::string manifest = read("rank_0/.dump_metadata/manifest.jsonl");
  const size_t second = manifest.find("\"iteration\":2");
  ASSERT_NE(second, std::string::npos) << manifest;
  // Iteration 1 ended at its step mark: whole. Iteration 2 was cut short: no write failed,
  // but it is not whole, and the reason says why.
  EXPECT_NE(manifest.substr(0, second).find("\"whole\":true,\"writes_ok\":true,\"complete\":true"),
            std::string::npos)
      << manifest;
  EXPECT_NE(manifest.find("\"reasons\":[\"the job went away during this iteration\"],"
                          "\"whole\":false,\"writes_ok\":true,\"complete\":false",
                          second),
            std::string::npos)
      << manifest;
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

}  // namespace
}  // namespace dumpd::storage
