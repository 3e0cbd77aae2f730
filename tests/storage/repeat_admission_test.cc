// Repeats (dump once) cost the file system nothing only when they are hard links: a repeat
// past max_links_per_file, or one the file system will not link, writes a new first file that
// passes the payload gate (quota, free space) like any payload and that later repeats link to.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <set>

#include "storage/fs/fault_injection.h"
#include "storage/fs/memory_file_system.h"
#include "storage/writer/job_writer.h"
#include "storage/writer/tensor_memo.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::makePlan;
using testing::OwnedOp;
using testing::TempDir;

constexpr uint64_t kTs = 1700000000000000;
constexpr char kDir[] = "rank_0/Net/0/0";
constexpr size_t kElements = 1024;  // a 4 KiB tensor

// Op "Src" produces y (flagged); op i ("Use{i}") takes y as its input, a repeat.
struct Repeats {
  OwnedOp source;
  std::vector<OwnedOp> uses;
  std::shared_ptr<TensorMemo> memo;

  explicit Repeats(size_t n) {
    std::vector<float> y(kElements);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i) * 0.5f - 7;
    source.op_type = "Src";
    source.op_name = "Default/Src-op0";
    source.tensors.push_back(floatTensor(Io::kOutput, 0, {kElements}, y, kTs));
    memo = std::make_shared<TensorMemo>(0, 0, DType::kFloat32,
                                        std::vector<int64_t>{static_cast<int64_t>(kElements)});
    for (size_t i = 0; i < n; ++i) {
      OwnedOp use;
      use.op_type = "Use";
      use.op_name = "Default/Use-op" + std::to_string(i + 1);
      use.tensors.push_back(floatTensor(Io::kInput, 0, {kElements}, {}, kTs + 1 + i));
      uses.push_back(std::move(use));
    }
  }
  OpRecord sourceRecord() {
    OpRecord r = source.record();
    source.views[0].memo = memo.get();
    return r;
  }
  OpRecord useRecord(size_t i) {
    OpRecord r = uses[i].record();
    uses[i].views[0].same_as = memo.get();
    return r;
  }
};

// Writes the source and every use; returns the summed outcome (every call must succeed).
OpOutcome writeAll(JobWriter& w, Repeats& r) {
  OpOutcome sum;
  auto add = [&](const Result<OpOutcome>& o) {
    EXPECT_TRUE(o.has_value()) << o.error().message;
    if (!o) return;
    sum.tensors_written += o.value().tensors_written;
    sum.tensors_dropped += o.value().tensors_dropped;
    sum.bytes_written += o.value().bytes_written;
    sum.tensors_linked += o.value().tensors_linked;
    sum.repeats_copied += o.value().repeats_copied;
  };
  add(w.writeOp(r.sourceRecord()));
  for (size_t i = 0; i < r.uses.size(); ++i) add(w.writeOp(r.useRecord(i)));
  return sum;
}

std::unique_ptr<JobWriter> makeWriter(std::shared_ptr<FileSystem> fs, JobOptions o) {
  auto w = JobWriter::create(std::move(fs), makePlan(config::SavedData::kTensor), std::move(o));
  EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().message);
  return w ? std::move(w.value()) : nullptr;
}

// The npy files of the iteration directory on disk: inode -> (names, size).
struct Inodes {
  std::map<ino_t, std::vector<std::string>> names;
  std::map<ino_t, uint64_t> size;
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const auto& [ino, s] : size) n += s;
    return n;
  }
  // Names per inode, largest group first.
  std::multiset<size_t, std::greater<>> groups() const {
    std::multiset<size_t, std::greater<>> g;
    for (const auto& [ino, n] : names) g.insert(n.size());
    return g;
  }
};

Inodes inodesIn(const std::string& dir) {
  Inodes out;
  for (const std::string& name : testing::listFiles(dir)) {
    if (name.find(".npy") == std::string::npos) continue;
    struct stat st {};
    EXPECT_EQ(::stat((dir + "/" + name).c_str(), &st), 0) << name;
    out.names[st.st_ino].push_back(name);
    out.size[st.st_ino] = static_cast<uint64_t>(st.st_size);
  }
  return out;
}

// The size of the source's file alone, written in a directory of its own.
uint64_t oneFileBytes(PosixOptions o = {}) {
  TempDir probe;
  auto fs = openPosixFileSystem(probe.path(), std::move(o));
  EXPECT_TRUE(fs.has_value());
  if (!fs) return 0;
  auto w = makeWriter(fs.value(), {});
  Repeats one(0);
  writeAll(*w, one);
  return inodesIn(probe.path() + "/" + kDir).bytes();
}

class RepeatAdmissionTest : public ::testing::Test {
 protected:
  std::shared_ptr<FileSystem> posix(PosixOptions o = {}) {
    auto fs = openPosixFileSystem(root_.path(), std::move(o));
    EXPECT_TRUE(fs.has_value()) << (fs ? "" : fs.error().message);
    return fs ? fs.value() : nullptr;
  }
  std::string dir() const { return root_.path() + "/" + kDir; }

  TempDir root_;
};

TEST_F(RepeatAdmissionTest, LinksAreFreeAndEachNewFirstFileIsChargedWhenTheLimitIsReached) {
  JobOptions o;
  o.max_links_per_file = 2;
  auto w = makeWriter(posix(), o);
  Repeats r(7);
  OpOutcome out = writeAll(*w, r);
  EXPECT_EQ(out.tensors_written, 8u);
  EXPECT_EQ(out.tensors_dropped, 0u);
  EXPECT_EQ(out.tensors_linked, 7u);
  EXPECT_EQ(out.repeats_copied, 2u) << "uses 3 and 6 start new first files";
  Inodes in = inodesIn(dir());
  // The first file and its 2 links, a copy and its 2 links, a copy and its 1 link.
  EXPECT_EQ(in.groups(), (std::multiset<size_t, std::greater<>>{3, 3, 2}));
  EXPECT_EQ(out.bytes_written, in.bytes()) << "every byte on disk is counted, links none";
  for (const auto& [ino, names] : in.names) {
    struct stat st {};
    ASSERT_EQ(::stat((dir() + "/" + names[0]).c_str(), &st), 0);
    EXPECT_LE(st.st_nlink, 3u) << "no file has more than max_links_per_file links + itself";
  }
  const JobCounters c = w->counters();
  EXPECT_EQ(c.tensors_linked, 7u);
  EXPECT_EQ(c.repeats_copied, 2u);
  EXPECT_EQ(c.bytes_written, in.bytes());
}

TEST_F(RepeatAdmissionTest, ANewFirstFilePastTheQuotaIsDroppedAndSoIsEveryLaterPayload) {
  const uint64_t file = oneFileBytes();
  ASSERT_GT(file, kElements * 4);
  JobOptions o;
  o.max_links_per_file = 2;
  o.quota_bytes = 2 * file + file / 2;  // the first file and one copy
  auto w = makeWriter(posix(), o);
  Repeats r(7);
  OpOutcome out = writeAll(*w, r);
  // Uses 1-2 link, use 3 copies (the second file), 4-5 link, 6 would copy past the quota.
  EXPECT_EQ(out.tensors_written, 6u);
  EXPECT_EQ(out.tensors_dropped, 2u);
  EXPECT_EQ(out.repeats_copied, 1u);
  Inodes in = inodesIn(dir());
  EXPECT_EQ(in.size.size(), 2u);
  EXPECT_LE(in.bytes(), o.quota_bytes);
  EXPECT_NE(w->counters().stop_reason.find("quota"), std::string::npos)
      << w->counters().stop_reason;
  ASSERT_TRUE(w->completeIteration(0, 0));
  const std::string manifest =
      testing::readFile(root_.path() + "/rank_0/.dump_metadata/manifest.jsonl").value_or("");
  EXPECT_NE(manifest.find("\"dropped\":2"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("job quota"), std::string::npos) << manifest;
}

TEST_F(RepeatAdmissionTest, WithoutHardLinksEveryRepeatIsAPayloadOfTheQuota) {
  const uint64_t file = oneFileBytes({.hard_links = false});
  JobOptions o;
  o.quota_bytes = 3 * file;
  auto w = makeWriter(posix({.hard_links = false}), o);
  Repeats r(10);
  OpOutcome out = writeAll(*w, r);
  EXPECT_EQ(out.tensors_written, 3u);
  EXPECT_EQ(out.repeats_copied, 2u);
  EXPECT_EQ(out.tensors_dropped, 8u);
  EXPECT_EQ(inodesIn(dir()).bytes(), 3 * file);
}

TEST(RepeatAdmissionMemoryTest, TheFreeSpaceFloorHoldsForNewFirstFiles) {
  auto mem = std::make_shared<MemoryFileSystem>();  // no hard links: every repeat copies
  constexpr uint64_t kCapacity = 64 << 10;
  constexpr uint64_t kFloor = 40 << 10;
  mem->setCapacity(kCapacity);
  JobOptions o;
  o.min_free_bytes = kFloor;
  auto w = makeWriter(mem, o);
  Repeats r(20);
  OpOutcome out = writeAll(*w, r);
  EXPECT_GT(out.repeats_copied, 0u);
  EXPECT_GT(out.tensors_dropped, 0u);
  EXPECT_EQ(out.tensors_written + out.tensors_dropped, 21u);
  EXPECT_GE(mem->freeBytes().value(), kFloor) << "copies went below min_free_bytes";
  EXPECT_NE(w->counters().stop_reason.find("min_free_bytes"), std::string::npos)
      << w->counters().stop_reason;
}

// EMLINK on the first file (it has the file system's maximum of links): the refused repeat
// writes a new first file and the next repeat links to that one, not to the full file.
TEST_F(RepeatAdmissionTest, AFileSystemThatRefusesALinkGetsANewFirstFileThatLaterRepeatsLinkTo) {
  auto faults = std::make_shared<FaultInjectingFileSystem>(posix());
  auto w = makeWriter(faults, {});
  Repeats r(3);
  ASSERT_TRUE(w->writeOp(r.sourceRecord()).has_value());
  faults->failCall(faults->calls(), ErrorCode::kUnsupported);  // use 1's link: EMLINK
  OpOutcome out;
  for (size_t i = 0; i < 3; ++i) {
    auto o = w->writeOp(r.useRecord(i));
    ASSERT_TRUE(o.has_value()) << o.error().message;
    out.tensors_linked += o.value().tensors_linked;
    out.repeats_copied += o.value().repeats_copied;
  }
  EXPECT_EQ(faults->faultsInjected(), 1u);
  EXPECT_EQ(out.tensors_linked, 3u);
  EXPECT_EQ(out.repeats_copied, 1u);
  Inodes in = inodesIn(dir());
  EXPECT_EQ(in.groups(), (std::multiset<size_t, std::greater<>>{3, 1}));
  for (const auto& [ino, names] : in.names) {
    if (names.size() == 1) {
      EXPECT_NE(names[0].find("Src"), std::string::npos) << "the full file gets no more links";
    }
  }
}

// Any other link error is the tensor's write error: no copy is made behind it.
TEST_F(RepeatAdmissionTest, ALinkThatFailsForAnotherReasonIsAnErrorNotACopy) {
  auto faults = std::make_shared<FaultInjectingFileSystem>(posix());
  auto w = makeWriter(faults, {});
  Repeats r(1);
  ASSERT_TRUE(w->writeOp(r.sourceRecord()).has_value());
  faults->failCall(faults->calls(), ErrorCode::kIo);
  auto o = w->writeOp(r.useRecord(0));
  ASSERT_FALSE(o.has_value());
  EXPECT_NE(o.error().message.find("(injected)"), std::string::npos) << o.error().message;
  EXPECT_EQ(faults->calls(FsOp::kCopy), 0u);
  EXPECT_EQ(inodesIn(dir()).size.size(), 1u);
  EXPECT_EQ(w->counters().repeats_copied, 0u);
}

}  // namespace
}  // namespace dumpd::storage
