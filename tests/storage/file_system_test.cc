// The FileSystem contract, on POSIX (with and without hard links) and in memory: directories and
// paths, committing, appending, syncing, symlinks, and temporary names.
#include "storage/fs/file_system.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/storage/file_system_fixture.h"

namespace dumpd::storage {
namespace {

using testing::commitFile;
using testing::FileSystemContractTest;
using testing::PosixHarness;

INSTANTIATE_TEST_SUITE_P(Impl, FileSystemContractTest,
                         ::testing::Values("posix", "posix_copy", "memory"),
                         [](const auto& info) { return info.param; });

TEST_P(FileSystemContractTest, CreatesMissingDirectoriesBeneathTheRoot) {
  ASSERT_TRUE(fs().createDirectories("rank_0/Net/0/1"));
  EXPECT_TRUE(h_->exists("rank_0/Net/0/1"));
  auto again = fs().openDirectory("rank_0/Net/0/1", {});
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again.value()->path(), "rank_0/Net/0/1");
}

TEST_P(FileSystemContractTest, OpeningAMissingDirectoryWithoutCreateIsNotFound) {
  auto d = fs().openDirectory("nope/deeper", {});
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code, ErrorCode::kNotFound);
  EXPECT_NE(d.error().message.find("nope"), std::string::npos);
  EXPECT_FALSE(h_->exists("nope"));
}

TEST_P(FileSystemContractTest, RejectsEmptyDotAndDotDotComponents) {
  for (const char* bad : {"a//b", "../x", "a/./b", "/abs", "a/", "..", ".", "a/.."}) {
    auto d = fs().openDirectory(bad, {.create = true});
    ASSERT_FALSE(d.has_value()) << bad;
    EXPECT_EQ(d.error().code, ErrorCode::kInvalidArgument) << bad;
  }
  auto d = dir("ok");
  commitFile(*d, "a", "data");
  for (const char* bad : {"", ".", "..", "a/b"}) {
    EXPECT_FALSE(d->newFile(bad, 0644).has_value()) << bad;
    EXPECT_FALSE(d->openAppend(bad).has_value()) << bad;
    for (const auto& [existing, name] :
         {std::pair<const char*, const char*>{bad, "b"}, {"a", bad}}) {
      auto link = d->linkFile(existing, name);
      ASSERT_FALSE(link.has_value()) << bad;
      EXPECT_EQ(link.error().code, ErrorCode::kInvalidArgument) << bad;
      auto copy = d->copyFile(existing, name, 0644);
      ASSERT_FALSE(copy.has_value()) << bad;
      EXPECT_EQ(copy.error().code, ErrorCode::kInvalidArgument) << bad;
    }
  }
}

TEST_P(FileSystemContractTest, FileIsInvisibleUntilCommitted) {
  auto d = dir("d");
  auto f = d->newFile("x.npy", 0400);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f.value()->path(), "d/x.npy");
  ASSERT_TRUE(f.value()->write(asBytes("hello ")));
  ConstBuffer parts[2] = {asBytes("wor"), asBytes("ld")};
  ASSERT_TRUE(f.value()->write(std::span<const ConstBuffer>(parts, 2)));
  EXPECT_EQ(f.value()->bytesWritten(), 11u);
  std::vector<std::string> before = h_->files();
  ASSERT_EQ(before.size(), 1u);
  EXPECT_TRUE(isTemporaryName(before[0].substr(2))) << before[0];
  ASSERT_TRUE(f.value()->sync());
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->files(), std::vector<std::string>{"d/x.npy"});
  EXPECT_EQ(h_->read("d/x.npy"), "hello world");
  EXPECT_EQ(h_->mode("d/x.npy"), 0400u);
}

TEST_P(FileSystemContractTest, AbortAndDestructionRemoveTheTemporaryFile) {
  auto d = dir("d");
  {
    auto f = d->newFile("a.npy", 0400);
    ASSERT_TRUE(f.value()->write(asBytes("partial")));
    f.value()->abort();
    f.value()->abort();  // idempotent
  }
  {
    auto f = d->newFile("b.npy", 0400);
    ASSERT_TRUE(f.value()->write(asBytes("partial")));
  }  // destroyed without commit
  EXPECT_TRUE(h_->files().empty());
}

TEST_P(FileSystemContractTest, CommitReplacesAnOlderFile) {
  auto d = dir("d");
  for (const char* text : {"old", "new"}) {
    auto f = d->newFile("f", 0644);
    ASSERT_TRUE(f.value()->write(asBytes(text)));
    ASSERT_TRUE(f.value()->commit());
  }
  EXPECT_EQ(h_->read("d/f"), "new");
  EXPECT_EQ(h_->files().size(), 1u);
}

TEST_P(FileSystemContractTest, AppendCreatesThenAppendsAndReportsSize) {
  auto d = dir("d");
  {
    auto a = d->openAppend("statistic.csv");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a.value()->size(), 0u);
    ASSERT_TRUE(a.value()->append("header\n"));
    ASSERT_TRUE(a.value()->append("row1\n"));
    EXPECT_EQ(a.value()->size(), 12u);
    ASSERT_TRUE(a.value()->sync());
    EXPECT_EQ(a.value()->path(), "d/statistic.csv");
  }
  auto again = d->openAppend("statistic.csv");
  EXPECT_EQ(again.value()->size(), 12u);
  ASSERT_TRUE(again.value()->append("row2\n"));
  EXPECT_EQ(h_->read("d/statistic.csv"), "header\nrow1\nrow2\n");
}

TEST_P(FileSystemContractTest, SyncFileAndDirectory) {
  auto d = dir("d");
  auto f = d->newFile("f", 0644);
  ASSERT_TRUE(f.value()->commit());
  EXPECT_TRUE(d->syncFile("f"));
  EXPECT_TRUE(d->sync());
  auto missing = d->syncFile("missing");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("d/missing"), std::string::npos);
  auto root = fs().openDirectory("", {});
  ASSERT_TRUE(root.has_value());
  EXPECT_TRUE(root.value()->sync());
}

TEST_P(FileSystemContractTest, ErrorsNameTheFile) {
  auto d = dir("d");
  ASSERT_TRUE(fs().createDirectories("d/sub"));
  auto a = d->openAppend("sub");  // a directory
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("d/sub"), std::string::npos) << a.error().message;
  auto f = d->newFile("sub", 0644);  // commit over a directory fails
  ASSERT_TRUE(f.has_value());
  auto s = f.value()->commit();
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("d/sub"), std::string::npos) << s.error().message;
  EXPECT_TRUE(h_->files().empty());  // the temporary file went away
}

TEST_P(FileSystemContractTest, RefusesToResolveThroughASymlink) {
  h_->plantSymlink("rank_0/escape");
  for (const char* path : {"rank_0/escape", "rank_0/escape/Net/0"}) {
    auto d = fs().openDirectory(path, {.create = true});
    ASSERT_FALSE(d.has_value()) << path;
    EXPECT_EQ(d.error().code, ErrorCode::kPermission) << path;
    EXPECT_NE(d.error().message.find("rank_0/escape"), std::string::npos);
    EXPECT_NE(d.error().message.find("symbolic link"), std::string::npos);
  }
  if (auto* posix = dynamic_cast<PosixHarness*>(h_.get())) {
    EXPECT_TRUE(testing::listFiles(posix->outside().path()).empty());
  }
}

TEST_P(FileSystemContractTest, RefusesToAppendThroughASymlink) {
  h_->plantSymlink("d/statistic.csv");
  auto d = fs().openDirectory("d", {});
  ASSERT_TRUE(d.has_value());
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kPermission);
  EXPECT_NE(a.error().message.find("d/statistic.csv"), std::string::npos);
}

TEST_P(FileSystemContractTest, CommitReplacesASymlinkNotItsTarget) {
  h_->plantSymlink("d/x.npy");
  auto d = fs().openDirectory("d", {});
  auto f = d.value()->newFile("x.npy", 0400);
  ASSERT_TRUE(f.value()->write(asBytes("data")));
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->read("d/x.npy"), "data");
  if (auto* posix = dynamic_cast<PosixHarness*>(h_.get())) {
    EXPECT_FALSE(std::filesystem::is_symlink(posix->root() + "/d/x.npy"));
    EXPECT_TRUE(testing::listFiles(posix->outside().path()).empty());
  }
}

TEST_P(FileSystemContractTest, ReportsFreeBytes) {
  auto free = fs().freeBytes();
  ASSERT_TRUE(free.has_value());
  EXPECT_GT(free.value(), 0u);
}

// A temporary name of this process's pid but another incarnation: an earlier daemon that had
// the same pid (pid 1 of a restarted container).
std::string samePidOtherIncarnation() {
  std::string ours = temporaryName();  // .dumpd-tmp-<pid>-<incarnation>-<n>
  size_t last = ours.rfind('-');
  size_t start = ours.rfind('-', last - 1) + 1;
  std::string other = ours.substr(0, start);
  other.append(ours.compare(start, last - start, "00000000") == 0 ? "00000001" : "00000000");
  return other + "-7";
}

TEST(TemporaryNameTest, CarriesPidAndIncarnation) {
  std::string a = temporaryName(), b = temporaryName();
  EXPECT_NE(a, b);
  EXPECT_TRUE(a.starts_with(".dumpd-tmp-" + std::to_string(::getpid()) + "-")) << a;
  EXPECT_TRUE(isTemporaryName(a) && isOwnTemporaryName(a));
  EXPECT_TRUE(isTemporaryName(samePidOtherIncarnation()));
  EXPECT_FALSE(isOwnTemporaryName(samePidOtherIncarnation()));
  EXPECT_FALSE(isOwnTemporaryName(".dumpd-tmp-999999999-00000000-1"));
  EXPECT_FALSE(isTemporaryName("statistic.csv"));
}

TEST_P(FileSystemContractTest, RemoveStaleTemporariesTakesOnlyLeftoversOfOtherProcesses) {
  auto d = dir("d");
  const std::string stale[] = {".dumpd-tmp-999999999-0badf00d-1", ".dumpd-tmp-1-12345678-7",
                               samePidOtherIncarnation()};
  for (const std::string& name : stale) {
    auto a = d->openAppend(name);
    ASSERT_TRUE(a.has_value());
    ASSERT_TRUE(a.value()->append("partial"));
  }
  auto keep = d->openAppend("statistic.csv");
  ASSERT_TRUE(keep.has_value());
  auto in_progress = d->newFile("x.npy", 0400);  // ours, being written
  ASSERT_TRUE(in_progress.has_value());
  ASSERT_TRUE(in_progress.value()->write(asBytes("data")));

  auto removed = d->removeStaleTemporaries();
  ASSERT_TRUE(removed.has_value()) << removed.error().message;
  EXPECT_EQ(removed.value(), 3u);
  for (const std::string& name : stale) EXPECT_FALSE(h_->exists("d/" + name)) << name;
  EXPECT_TRUE(h_->exists("d/statistic.csv"));
  ASSERT_TRUE(in_progress.value()->commit());
  EXPECT_EQ(h_->read("d/x.npy"), "data");
  EXPECT_EQ(d->removeStaleTemporaries().value(), 0u);
}

}  // namespace
}  // namespace dumpd::storage
