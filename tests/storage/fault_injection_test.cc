// Fails every file-system call of a realistic job in turn, and checks after each run that the
// tree holds no partial or temporary file and that the error named the file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "storage/fs/fault_injection.h"
#include "storage/fs/memory_file_system.h"
#include "storage/writer/job_writer.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::OwnedOp;

constexpr uint64_t kTs = 1700000000000000;

// Runs a small but complete job; returns every error the writer reported.
std::vector<Error> runJob(std::shared_ptr<FileSystem> fs, config::Durability durability) {
  std::vector<Error> errors;
  auto note = [&](const Status& s) {
    if (!s) errors.push_back(s.error());
  };
  config::DumpPlan plan = testing::makePlan(config::SavedData::kFull);
  plan.save_kernel_args = true;
  JobOptions o;
  o.durability = durability;
  auto w = JobWriter::create(fs, plan, o);
  if (!w) {
    errors.push_back(w.error());
    return errors;
  }
  JobWriter& job = *w.value();
  for (uint32_t iteration = 0; iteration < 2; ++iteration) {
    OwnedOp op;
    op.iteration = iteration;
    op.tensors.push_back(floatTensor(Io::kInput, 0, {2, 3}, {1, 2, 3, 4, 5, 6}, kTs));
    op.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 3}, {8, 10, 12, 14, 16, 18}, kTs + 1));
    auto r = job.writeOp(op.record());
    if (!r) errors.push_back(r.error());
    OwnedOp long_op;
    long_op.iteration = iteration;
    long_op.op_name = "Default/" + std::string(260, 'L');
    long_op.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {1}, kTs + 2));
    auto l = job.writeOp(long_op.record());
    if (!l) errors.push_back(l.error());
    note(job.writeKernelArgs(0, iteration, "MatMul", "Default/MatMul-op1", {{"a", "b"}}));
    note(job.completeIteration(0, iteration));
    note(job.appendGlobalExecutionOrder(0, iteration));
  }
  auto constant = floatTensor(Io::kOutput, 0, {2}, {1, 2}, kTs + 3);
  note(job.writeConstant(0, "1", constant.view()));
  note(job.writeGraph(0, "ir", "pb"));
  note(job.writeExecutionOrder(0, {"Default/Add-op0"}));
  note(job.finish());
  EXPECT_EQ(job.counters().write_errors, errors.size());
  return errors;
}

std::string baseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The tree holds only whole files: no temporary, every npy complete, every csv/jsonl line whole.
void expectNoPartialFiles(const MemoryFileSystem& fs, const std::string& context) {
  std::set<std::string> mapped;  // short names listed in mapping.csv files
  std::vector<std::string> digit_files;
  for (const auto& e : fs.list()) {
    if (e.kind != MemoryFileSystem::Entry::Kind::kFile) continue;
    std::string name = baseName(e.path);
    EXPECT_FALSE(isTemporaryName(name)) << context << ": " << e.path;
    if (name.size() > 4 && name.substr(name.size() - 4) == ".npy") {
      EXPECT_TRUE(testing::parseNpy(e.data).ok) << context << ": " << e.path;
      if (std::regex_match(name, std::regex("\\d{16}\\.npy"))) digit_files.push_back(e.path);
    }
    if (name.find(".csv") != std::string::npos || name.find(".jsonl") != std::string::npos) {
      EXPECT_TRUE(e.data.empty() || e.data.back() == '\n') << context << ": " << e.path;
    }
    if (name == "statistic.csv") {
      std::istringstream in(e.data);
      std::string line;
      bool first = true;
      while (std::getline(in, line)) {
        if (first) {
          EXPECT_EQ(line.rfind("Op Type,", 0), 0u) << context;
          first = false;
          continue;
        }
        // 10 fixed fields and 3 statistics, each followed by a comma (the shape's is quoted).
        int commas = 0;
        bool quoted = false;
        for (char c : line) {
          if (c == '"') quoted = !quoted;
          if (c == ',' && !quoted) ++commas;
        }
        EXPECT_EQ(commas, 13) << context << ": " << line;
      }
    }
    if (name == "mapping.csv") {
      std::istringstream in(e.data);
      std::string line;
      std::string dir = e.path.substr(0, e.path.rfind('/') + 1);
      while (std::getline(in, line)) mapped.insert(dir + line.substr(0, line.find(',')));
    }
    if (name == "manifest.jsonl") {
      std::istringstream in(e.data);
      std::string line;
      while (std::getline(in, line)) {
        EXPECT_TRUE(nlohmann::json::accept(line)) << context << ": " << line;
      }
    }
  }
  // A file published under a random name always has its mapping line.
  for (const auto& f : digit_files) EXPECT_TRUE(mapped.count(f)) << context << ": " << f;
}

class FaultSweepTest : public ::testing::TestWithParam<config::Durability> {};

INSTANTIATE_TEST_SUITE_P(Durability, FaultSweepTest,
                         ::testing::Values(config::Durability::kNone,
                                           config::Durability::kIteration,
                                           config::Durability::kFile),
                         [](const auto& info) {
                           return std::string(config::durabilityName(info.param));
                         });

TEST_P(FaultSweepTest, EveryCallFailingInTurnLeavesOnlyWholeFiles) {
  // A clean run counts the calls.
  auto clean_mem = std::make_shared<MemoryFileSystem>();
  auto clean = std::make_shared<FaultInjectingFileSystem>(clean_mem);
  ASSERT_TRUE(runJob(clean, GetParam()).empty());
  const uint64_t calls = clean->calls();
  ASSERT_GT(calls, 30u);
  expectNoPartialFiles(*clean_mem, "clean run");

  const ErrorCode codes[] = {ErrorCode::kNoSpace, ErrorCode::kIo, ErrorCode::kPermission};
  for (uint64_t i = 0; i < calls; ++i) {
    SCOPED_TRACE("failing call " + std::to_string(i));
    auto mem = std::make_shared<MemoryFileSystem>();
    auto fs = std::make_shared<FaultInjectingFileSystem>(mem);
    ErrorCode code = codes[i % 3];
    fs->failCall(i, code);
    std::vector<Error> errors = runJob(fs, GetParam());
    ASSERT_EQ(fs->faultsInjected(), 1u);
    ASSERT_FALSE(errors.empty()) << "the injected fault was swallowed";
    bool found = false;
    for (const Error& e : errors) {
      if (e.message.find("(injected)") == std::string::npos) continue;
      found = true;
      EXPECT_EQ(e.code, code) << e.message;
      EXPECT_NE(e.message.find("rank_0/"), std::string::npos) << e.message;
    }
    EXPECT_TRUE(found);
    expectNoPartialFiles(*mem, "call " + std::to_string(i));
  }
}

TEST(FaultInjectionJobTest, PersistentNoSpaceIsReportedForEveryTensorWithoutCrashing) {
  auto mem = std::make_shared<MemoryFileSystem>();
  auto fs = std::make_shared<FaultInjectingFileSystem>(mem);
  auto w = JobWriter::create(fs, testing::makePlan(config::SavedData::kFull), {});
  ASSERT_TRUE(w.has_value());
  fs->failEvery(FsOp::kWrite, ErrorCode::kNoSpace);
  for (int i = 0; i < 5; ++i) {
    OwnedOp op;
    op.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {1}, kTs + i));
    auto r = w.value()->writeOp(op.record());
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kNoSpace);
  }
  EXPECT_EQ(w.value()->counters().write_errors, 5u);
  fs->clearFaults();
  OwnedOp ok;
  ok.tensors.push_back(floatTensor(Io::kOutput, 0, {1}, {1}, kTs + 99));
  EXPECT_TRUE(w.value()->writeOp(ok.record()).has_value());
  expectNoPartialFiles(*mem, "after recovery");
}

}  // namespace
}  // namespace dumpd::storage
