// JobWriter: concurrent writers, the bound on open directories, leftover temporary files and
// acting as the client.
#include "storage/writer/job_writer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "storage/fs/credentials.h"
#include "storage/fs/memory_file_system.h"
#include "tests/storage/job_writer_fixture.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::JobWriterTest;
using testing::kTs;
using testing::makePlan;
using testing::OwnedOp;
using testing::specExampleOp;

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
