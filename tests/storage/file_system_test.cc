#include "storage/fs/file_system.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "base/unique_fd.h"
#include "storage/fs/fault_injection.h"
#include "storage/fs/file_copy.h"
#include "storage/fs/memory_file_system.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

using testing::TempDir;

// The same contract tests run against the POSIX and the in-memory implementation.
class FsHarness {
 public:
  virtual ~FsHarness() = default;
  virtual FileSystem& fs() = 0;
  // Regular files beneath the root (root-relative, sorted).
  virtual std::vector<std::string> files() = 0;
  virtual std::optional<std::string> read(const std::string& path) = 0;
  virtual std::optional<uint32_t> mode(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
  // Plants a symlink at `path` pointing outside the root (to a real directory for POSIX).
  virtual void plantSymlink(const std::string& path) = 0;
};

class PosixHarness final : public FsHarness {
 public:
  explicit PosixHarness(PosixOptions options = {}) {
    auto fs = openPosixFileSystem(root_.path(), std::move(options));
    EXPECT_TRUE(fs.has_value());
    fs_ = fs.value();
  }
  FileSystem& fs() override { return *fs_; }
  std::vector<std::string> files() override {
    std::vector<std::string> out;
    for (const auto& f : testing::listFiles(root_.path())) {
      if (!std::filesystem::is_symlink(root_.path() + "/" + f)) out.push_back(f);
    }
    return out;
  }
  std::optional<std::string> read(const std::string& path) override {
    return testing::readFile(root_.path() + "/" + path);
  }
  std::optional<uint32_t> mode(const std::string& path) override {
    struct stat st;
    if (::lstat((root_.path() + "/" + path).c_str(), &st) != 0) return std::nullopt;
    return st.st_mode & 07777;
  }
  bool exists(const std::string& path) override {
    struct stat st;
    return ::lstat((root_.path() + "/" + path).c_str(), &st) == 0;
  }
  void plantSymlink(const std::string& path) override {
    std::string full = root_.path() + "/" + path;
    std::filesystem::create_directories(std::filesystem::path(full).parent_path());
    EXPECT_EQ(::symlink(outside_.path().c_str(), full.c_str()), 0);
  }
  const TempDir& outside() const { return outside_; }
  const std::string& root() const { return root_.path(); }

 private:
  TempDir root_;
  TempDir outside_;
  std::shared_ptr<FileSystem> fs_;
};

class MemoryHarness final : public FsHarness {
 public:
  FileSystem& fs() override { return fs_; }
  std::vector<std::string> files() override {
    std::vector<std::string> out;
    for (const auto& e : fs_.list()) {
      if (e.kind == MemoryFileSystem::Entry::Kind::kFile) out.push_back(e.path);
    }
    return out;
  }
  std::optional<std::string> read(const std::string& path) override { return fs_.readFile(path); }
  std::optional<uint32_t> mode(const std::string& path) override { return fs_.fileMode(path); }
  bool exists(const std::string& path) override { return fs_.exists(path); }
  void plantSymlink(const std::string& path) override { fs_.addSymlink(path, "/etc"); }
  MemoryFileSystem& memory() { return fs_; }

 private:
  MemoryFileSystem fs_;
};

class FileSystemContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "posix") {
      h_ = std::make_unique<PosixHarness>();
    } else if (GetParam() == "posix_copy") {  // linkFile's copy, as without hard links
      h_ = std::make_unique<PosixHarness>(PosixOptions{.hard_links = false});
    } else {
      h_ = std::make_unique<MemoryHarness>();
    }
  }
  FileSystem& fs() { return h_->fs(); }
  std::shared_ptr<Directory> dir(const std::string& path) {
    auto d = fs().openDirectory(path, {.create = true});
    EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().message);
    return d ? d.value() : nullptr;
  }
  std::unique_ptr<FsHarness> h_;
};

INSTANTIATE_TEST_SUITE_P(Impl, FileSystemContractTest,
                         ::testing::Values("posix", "posix_copy", "memory"),
                         [](const auto& info) { return info.param; });

// Publishes file `name` of `d` with `text`.
void commitFile(Directory& d, const std::string& name, const std::string& text,
                uint32_t mode = 0400) {
  auto f = d.newFile(name, mode);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  ASSERT_TRUE(f.value()->write(asBytes(text)));
  ASSERT_TRUE(f.value()->commit());
}

// What the writer does for a repeated tensor: a hard link, or a copy where the file system
// answers that it links nothing here (kUnsupported).
Result<std::unique_ptr<WritableFile>> linkOrCopy(Directory& d, std::string_view existing,
                                                 std::string_view name, uint32_t mode) {
  auto link = d.linkFile(existing, name);
  if (link || link.error().code != ErrorCode::kUnsupported) return link;
  return d.copyFile(existing, name, mode);
}

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

// --- linkFile: another name for a committed file ---

TEST_P(FileSystemContractTest, LinkedFileIsInvisibleUntilCommittedThenReadsTheOriginal) {
  auto d = dir("d");
  commitFile(*d, "a.npy", "tensor bytes");
  auto f = linkOrCopy(*d, "a.npy", "b.npy", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->path(), "d/b.npy");
  // 0 for a hard link; the copy's size where it is a copy.
  EXPECT_EQ(f.value()->bytesWritten(), GetParam() == "posix" ? 0u : 12u);
  EXPECT_FALSE(h_->exists("d/b.npy"));
  std::vector<std::string> before = h_->files();
  ASSERT_EQ(before.size(), 2u);
  EXPECT_TRUE(isTemporaryName(before[0].substr(2))) << before[0];
  ASSERT_TRUE(f.value()->sync());
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->files(), (std::vector<std::string>{"d/a.npy", "d/b.npy"}));
  EXPECT_EQ(h_->read("d/b.npy"), "tensor bytes");
  EXPECT_EQ(h_->read("d/a.npy"), "tensor bytes");
  EXPECT_EQ(h_->mode("d/a.npy"), 0400u);
  EXPECT_EQ(h_->mode("d/b.npy"), 0400u);
}

TEST_P(FileSystemContractTest, CommitOfALinkReplacesAnOlderFile) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  commitFile(*d, "b", "older");
  auto f = linkOrCopy(*d, "a", "b", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(h_->read("d/b"), "older");
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->read("d/b"), "original");
  EXPECT_EQ(h_->read("d/a"), "original");
  EXPECT_EQ(h_->files(), (std::vector<std::string>{"d/a", "d/b"}));
}

// rename() over another name of the same file does nothing: the temporary name must still go.
TEST_P(FileSystemContractTest, LinkingOverAnotherNameOfTheSameFileLeavesNoTemporary) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  for (const char* name : {"b", "b", "a"}) {
    auto f = linkOrCopy(*d, "a", name, 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    ASSERT_TRUE(f.value()->commit()) << name;
  }
  EXPECT_EQ(h_->files(), (std::vector<std::string>{"d/a", "d/b"}));
  EXPECT_EQ(h_->read("d/a"), "original");
  EXPECT_EQ(h_->read("d/b"), "original");
}

TEST_P(FileSystemContractTest, LinkingAMissingFileIsNotFound) {
  auto d = dir("d");
  auto f = linkOrCopy(*d, "missing.npy", "b.npy", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kNotFound);
  EXPECT_NE(f.error().message.find("d/missing.npy"), std::string::npos) << f.error().message;
  EXPECT_TRUE(h_->files().empty());
}

TEST_P(FileSystemContractTest, LinkingASymlinkIsRefusedAndCreatesNothing) {
  h_->plantSymlink("d/escape");
  auto d = dir("d");
  auto f = linkOrCopy(*d, "escape", "b.npy", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kPermission);
  EXPECT_NE(f.error().message.find("d/escape"), std::string::npos) << f.error().message;
  EXPECT_NE(f.error().message.find("symbolic link"), std::string::npos) << f.error().message;
  EXPECT_FALSE(h_->exists("d/b.npy"));
  EXPECT_TRUE(h_->files().empty());
}

TEST_P(FileSystemContractTest, LinkingADirectoryIsInvalidArgument) {
  ASSERT_TRUE(fs().createDirectories("d/sub"));
  auto d = dir("d");
  auto f = linkOrCopy(*d, "sub", "b", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(f.error().message.find("d/sub"), std::string::npos) << f.error().message;
  EXPECT_TRUE(h_->files().empty());
}

TEST_P(FileSystemContractTest, AbortAndDestructionOfALinkLeaveOnlyTheOriginal) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  {
    auto f = linkOrCopy(*d, "a", "b", 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    f.value()->abort();
    f.value()->abort();  // idempotent
  }
  {
    auto f = linkOrCopy(*d, "a", "c", 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
  }  // destroyed without commit
  EXPECT_EQ(h_->files(), std::vector<std::string>{"d/a"});
  EXPECT_EQ(h_->read("d/a"), "original");
  EXPECT_EQ(h_->mode("d/a"), 0400u);
}

TEST_P(FileSystemContractTest, WritingToALinkedFileIsRefused) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  auto f = linkOrCopy(*d, "a", "b", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto s = f.value()->write(asBytes("more"));
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(s.error().message.find("d/b"), std::string::npos) << s.error().message;
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->read("d/a"), "original");
  EXPECT_EQ(h_->read("d/b"), "original");
}

// Where there are no links (posix_copy, memory) linkFile says so and creates nothing; a copy
// is always a file of its own, even where a link would be possible.
TEST_P(FileSystemContractTest, LinkFileRefusedIsUnsupportedAndCopyFileAlwaysCopies) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  auto link = d->linkFile("a", "b");
  if (GetParam() == "posix") {
    ASSERT_TRUE(link.has_value()) << link.error().message;
    EXPECT_EQ(link.value()->bytesWritten(), 0u);
    ASSERT_TRUE(link.value()->commit());
  } else {
    ASSERT_FALSE(link.has_value());
    EXPECT_EQ(link.error().code, ErrorCode::kUnsupported) << link.error().message;
    EXPECT_NE(link.error().message.find("d/a"), std::string::npos) << link.error().message;
    EXPECT_EQ(h_->files(), std::vector<std::string>{"d/a"});
  }
  auto copy = d->copyFile("a", "c", 0440);
  ASSERT_TRUE(copy.has_value()) << copy.error().message;
  EXPECT_EQ(copy.value()->bytesWritten(), 8u);
  EXPECT_FALSE(copy.value()->write(asBytes("more")).has_value());
  ASSERT_TRUE(copy.value()->commit());
  EXPECT_EQ(h_->read("d/c"), "original");
  EXPECT_EQ(h_->mode("d/c"), 0440u);
}

TEST(PosixFileSystemTest, WorksOnAnOPathRootFd) {
  TempDir root;
  int fd = ::open(root.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto fs = makePosixFileSystem(fd);
  ASSERT_TRUE(fs.has_value());
  auto d = fs.value()->openDirectory("a/b", {.create = true, .sync_created = true});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto f = d.value()->newFile("x", 0400);
  ASSERT_TRUE(f.has_value());
  ASSERT_TRUE(f.value()->write(asBytes("1")));
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(testing::readFile(root.path() + "/a/b/x"), "1");
  auto r = fs.value()->openDirectory("", {});
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r.value()->sync());
}

TEST(PosixFileSystemTest, RejectsANonDirectoryRoot) {
  TempDir root;
  std::string file = root.path() + "/f";
  ::close(::open(file.c_str(), O_CREAT | O_WRONLY, 0644));
  auto fs = makePosixFileSystem(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_FALSE(fs.has_value());
  EXPECT_FALSE(makePosixFileSystem(-1).has_value());
  EXPECT_FALSE(openPosixFileSystem(root.path() + "/missing").has_value());
}

TEST(PosixFileSystemTest, APlantedFifoDoesNotHangTheAppender) {
  TempDir root;
  ASSERT_EQ(::mkfifo((root.path() + "/statistic.csv").c_str(), 0644), 0);
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("", {});
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("statistic.csv"), std::string::npos);
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

struct stat statOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

TEST(PosixFileSystemTest, ALinkIsAHardLinkToTheOriginal) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("", {});
  commitFile(*d.value(), "a", "original", 0400);
  auto f = d.value()->linkFile("a", "b");  // a link has the original's mode
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), 0u);
  ASSERT_TRUE(f.value()->commit());
  struct stat a = statOf(root.path() + "/a"), b = statOf(root.path() + "/b");
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(b.st_nlink, 2u);
  EXPECT_EQ(b.st_mode & 07777, 0400u);
  EXPECT_EQ(testing::readFile(root.path() + "/b"), "original");
}

TEST(PosixFileSystemTest, ACopyIsAFileOfItsOwnEvenWhereALinkIsPossible) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("", {});
  commitFile(*d.value(), "a", "original", 0400);
  auto f = d.value()->copyFile("a", "b", 0640);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), 8u);
  ASSERT_TRUE(f.value()->commit());
  struct stat a = statOf(root.path() + "/a"), b = statOf(root.path() + "/b");
  EXPECT_NE(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 1u);
  EXPECT_EQ(b.st_mode & 07777, 0640u);
  EXPECT_EQ(testing::readFile(root.path() + "/b"), "original");
}

TEST(PosixFileSystemTest, WithoutHardLinksLinkFileIsUnsupportedAndCopyFileCopies) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path(), PosixOptions{.hard_links = false});
  auto d = fs.value()->openDirectory("", {});
  std::string text(3 * 1024 * 1024 + 7, '\0');  // more than one buffer of a read/write copy
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 131 + i / 4096);
  commitFile(*d.value(), "a", text, 0400);
  auto refused = d.value()->linkFile("a", "b");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnsupported) << refused.error().message;
  EXPECT_EQ(testing::listFiles(root.path()), std::vector<std::string>{"a"});
  auto f = d.value()->copyFile("a", "b", 0640);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), text.size());
  ASSERT_TRUE(f.value()->sync());
  ASSERT_TRUE(f.value()->commit());
  struct stat a = statOf(root.path() + "/a"), b = statOf(root.path() + "/b");
  EXPECT_NE(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 1u);
  EXPECT_EQ(b.st_nlink, 1u);
  EXPECT_EQ(b.st_mode & 07777, 0640u);
  EXPECT_EQ(testing::readFile(root.path() + "/b"), text);
}

TEST(PosixFileSystemTest, ASymlinkToAFileOutsideTheRootIsNotLinked) {
  TempDir root, outside;
  const std::string secret = outside.path() + "/secret";
  writeFile(secret, "secret");
  ASSERT_EQ(::symlink(secret.c_str(), (root.path() + "/s").c_str()), 0);
  for (bool hard_links : {true, false}) {
    auto fs = openPosixFileSystem(root.path(), PosixOptions{.hard_links = hard_links});
    auto d = fs.value()->openDirectory("", {});
    auto link = d.value()->linkFile("s", "b");
    ASSERT_FALSE(link.has_value());
    EXPECT_EQ(link.error().code, ErrorCode::kPermission);
    EXPECT_NE(link.error().message.find("link s"), std::string::npos) << link.error().message;
    auto copy = d.value()->copyFile("s", "b", 0644);
    ASSERT_FALSE(copy.has_value());
    EXPECT_EQ(copy.error().code, ErrorCode::kPermission);
    EXPECT_NE(copy.error().message.find("copy s"), std::string::npos) << copy.error().message;
  }
  EXPECT_EQ(testing::listFiles(root.path()), std::vector<std::string>{"s"});
  EXPECT_EQ(statOf(secret).st_nlink, 1u);
}

// copy_file_range refuses a pipe (EINVAL): the copy goes on through a buffer.
TEST(FileCopyTest, CopiesFromAPipeThroughABuffer) {
  TempDir root;
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const std::string text(5000, 'p');
  ASSERT_EQ(::write(pipe_fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(pipe_fds[1]);
  UniqueFd in(pipe_fds[0]);
  UniqueFd out(::open((root.path() + "/copy").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(out.valid());
  CopyOutcome copied = copyFileData(in.get(), out.get());
  EXPECT_EQ(copied.error, 0);
  EXPECT_EQ(copied.bytes, text.size());
  EXPECT_EQ(testing::readFile(root.path() + "/copy"), text);
}

TEST(FileCopyTest, ReportsTheErrnoOfAFailedWrite) {
  TempDir root;
  const std::string path = root.path() + "/in";
  writeFile(path, "data");
  UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd out(::open(path.c_str(), O_RDONLY | O_CLOEXEC));  // not writable
  CopyOutcome copied = copyFileData(in.get(), out.get());
  EXPECT_EQ(copied.error, EBADF);
  EXPECT_EQ(copied.bytes, 0u);
}

// --- Acting as the client (PosixOptions::act_as), with real uids: root only. ---

const Credentials kClient{1234, 1234, {}};
constexpr uid_t kOtherUser = 1235;

#define SKIP_UNLESS_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: acts as real uids 1234 and 1235"

// mkdir with an owner and an exact mode (the umask does not apply to chmod).
void makeDir(const std::string& path, uid_t uid, gid_t gid, mode_t mode) {
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
  ASSERT_EQ(::chown(path.c_str(), uid, gid), 0) << path;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

void makeFile(const std::string& path, uid_t uid, gid_t gid, mode_t mode, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  ASSERT_EQ(::chown(path.c_str(), uid, gid), 0) << path;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

// The dump root as the daemon gets it: an O_PATH fd (opened here by root).
Result<std::shared_ptr<FileSystem>> actAsClient(const std::string& root,
                                                const Credentials& creds = kClient,
                                                bool hard_links = true) {
  PosixOptions o;
  o.act_as = creds;
  o.hard_links = hard_links;
  return makePosixFileSystem(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC), o);
}

// A TempDir that others may traverse (mkdtemp makes it 0700).
class TraversableTempDir : public TempDir {
 public:
  TraversableTempDir() { ::chmod(path().c_str(), 0755); }
};

TEST(PosixActAsTest, ARootOwnedPrivateRootRefusesTheClientAndCreatesNothing) {
  SKIP_UNLESS_ROOT();
  TempDir root;  // root:root 0700, as a job's dump path made by someone else
  const Credentials before = currentThreadCredentials();
  auto fs = actAsClient(root.path());
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto created = fs.value()->openDirectory("rank_0/Net", {.create = true});
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error().code, ErrorCode::kPermission) << created.error().message;
  auto top = fs.value()->openDirectory("", {});
  ASSERT_FALSE(top.has_value());
  EXPECT_EQ(top.error().code, ErrorCode::kPermission);
  EXPECT_TRUE(testing::listFiles(root.path()).empty());
  EXPECT_FALSE(std::filesystem::exists(root.path() + "/rank_0"));
  // Failed operations gave the credentials back as well.
  EXPECT_EQ(currentThreadCredentials(), before);
}

TEST(PosixActAsTest, ARootOwnedReadOnlyRootRefusesFilesAndDirectories) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir root;  // root:root 0755: the client may look, not write
  auto fs = actAsClient(root.path());
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto f = d.value()->newFile("x.npy", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kPermission);
  EXPECT_NE(f.error().message.find("x.npy"), std::string::npos);
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kPermission);
  auto sub = fs.value()->openDirectory("rank_0", {.create = true});
  ASSERT_FALSE(sub.has_value());
  EXPECT_EQ(sub.error().code, ErrorCode::kPermission);
  EXPECT_TRUE(testing::listFiles(root.path()).empty());
  EXPECT_FALSE(std::filesystem::exists(root.path() + "/rank_0"));
}

TEST(PosixActAsTest, CreatedDirectoriesAndFilesBelongToTheClient) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string root = base.path() + "/dumps";
  makeDir(root, 1234, 1234, 0700);
  auto fs = actAsClient(root);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("rank_0/Net/0/1", {.create = true, .sync_created = true});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto f = d.value()->newFile("t.npy", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  ASSERT_TRUE(f.value()->write(asBytes("data")));
  ASSERT_TRUE(f.value()->commit());
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_TRUE(a.has_value()) << a.error().message;
  ASSERT_TRUE(a.value()->append("row\n"));
  for (const char* p : {"rank_0", "rank_0/Net", "rank_0/Net/0", "rank_0/Net/0/1",
                        "rank_0/Net/0/1/t.npy", "rank_0/Net/0/1/statistic.csv"}) {
    struct stat st;
    ASSERT_EQ(::lstat((root + "/" + p).c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_uid, 1234u) << p;
    EXPECT_EQ(st.st_gid, 1234u) << p;
  }
  EXPECT_EQ(currentThreadCredentials().uid, 0u);
}

// A client may open (O_PATH) another user's private directory when its parent is searchable
// and send that fd as its dump root: nothing in it may be reached.
TEST(PosixActAsTest, AnotherUsersPrivateTreeCannotBeReachedThroughTheRootFd) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string victim = base.path() + "/victim";
  makeDir(victim, kOtherUser, kOtherUser, 0700);
  makeFile(victim + "/f", kOtherUser, kOtherUser, 0644, "theirs");
  makeDir(victim + "/rank_0", kOtherUser, kOtherUser, 0700);
  makeFile(victim + "/rank_0/statistic.csv", kOtherUser, kOtherUser, 0644, "header\n");
  int fd;
  {
    ScopedCredentials as_client;  // the client itself can get this fd
    ASSERT_TRUE(as_client.enter(kClient));
    fd = ::open(victim.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
  }
  PosixOptions o;
  o.act_as = kClient;
  auto fs = makePosixFileSystem(fd, o);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  for (const char* path : {"", "rank_0"}) {
    auto d = fs.value()->openDirectory(path, {});
    ASSERT_FALSE(d.has_value()) << path;
    EXPECT_EQ(d.error().code, ErrorCode::kPermission) << path;
  }
  auto created = fs.value()->openDirectory("rank_1", {.create = true});
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error().code, ErrorCode::kPermission);
  EXPECT_EQ(testing::listFiles(victim), (std::vector<std::string>{"f", "rank_0/statistic.csv"}));
  EXPECT_EQ(testing::readFile(victim + "/f"), "theirs");
  EXPECT_EQ(testing::readFile(victim + "/rank_0/statistic.csv"), "header\n");
}

// The same with a directory the client may read: no file in it can be replaced, appended to
// or created.
TEST(PosixActAsTest, AnotherUsersFilesCannotBeReplacedAppendedToOrAddedTo) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string victim = base.path() + "/victim";
  makeDir(victim, kOtherUser, kOtherUser, 0755);
  makeFile(victim + "/f", kOtherUser, kOtherUser, 0644, "theirs");
  auto fs = actAsClient(victim);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto replace = d.value()->newFile("f", 0644);
  ASSERT_FALSE(replace.has_value());
  EXPECT_EQ(replace.error().code, ErrorCode::kPermission);
  auto append = d.value()->openAppend("f");
  ASSERT_FALSE(append.has_value());
  EXPECT_EQ(append.error().code, ErrorCode::kPermission);
  auto create = d.value()->newFile("g", 0644);
  ASSERT_FALSE(create.has_value());
  EXPECT_EQ(create.error().code, ErrorCode::kPermission);
  EXPECT_EQ(testing::listFiles(victim), std::vector<std::string>{"f"});
  EXPECT_EQ(testing::readFile(victim + "/f"), "theirs");
}

// In a sticky shared directory the client may create its temporary file, but renaming it over
// another user's file needs CAP_FOWNER, which the switch away from fsuid 0 drops.
TEST(PosixActAsTest, AnotherUsersFileInAStickyDirectoryCannotBeReplaced) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string shared = base.path() + "/shared";
  makeDir(shared, 0, 0, 01777);
  makeFile(shared + "/f", kOtherUser, kOtherUser, 0644, "theirs");
  auto fs = actAsClient(shared);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto f = d.value()->newFile("f", 0644);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  ASSERT_TRUE(f.value()->write(asBytes("mine")));
  auto s = f.value()->commit();
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kPermission) << s.error().message;
  EXPECT_FALSE(d.value()->openAppend("f").has_value());
  EXPECT_EQ(testing::readFile(shared + "/f"), "theirs");
  EXPECT_EQ(testing::listFiles(shared), std::vector<std::string>{"f"});  // temp file gone
}

TEST(PosixActAsTest, SupplementaryGroupsGrantGroupAccess) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string shared = base.path() + "/shared";
  makeDir(shared, 0, 4321, 0770);
  {
    auto fs = actAsClient(shared, Credentials{1234, 1234, {4321}});
    ASSERT_TRUE(fs.has_value()) << fs.error().message;
    auto d = fs.value()->openDirectory("rank_0", {.create = true});
    ASSERT_TRUE(d.has_value()) << d.error().message;
    auto f = d.value()->newFile("t.npy", 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    ASSERT_TRUE(f.value()->commit());
  }
  {
    auto fs = actAsClient(shared, kClient);  // no group 4321
    ASSERT_TRUE(fs.has_value()) << fs.error().message;
    auto d = fs.value()->openDirectory("rank_1", {.create = true});
    ASSERT_FALSE(d.has_value());
    EXPECT_EQ(d.error().code, ErrorCode::kPermission);
  }
  EXPECT_EQ(testing::listFiles(shared), std::vector<std::string>{"rank_0/t.npy"});
}

// A link is a new entry of the directory: it needs the right to write there, link or copy.
TEST(PosixActAsTest, TheClientsFileCannotBeLinkedInADirectoryItCannotWrite) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir root;  // root:root 0755
  makeFile(root.path() + "/a", 1234, 1234, 0644, "mine");
  for (bool hard_links : {true, false}) {
    auto fs = actAsClient(root.path(), kClient, hard_links);
    ASSERT_TRUE(fs.has_value()) << fs.error().message;
    auto d = fs.value()->openDirectory("", {});
    ASSERT_TRUE(d.has_value()) << d.error().message;
    auto f = linkOrCopy(*d.value(), "a", "b", 0644);
    ASSERT_FALSE(f.has_value()) << hard_links;
    EXPECT_EQ(f.error().code, ErrorCode::kPermission) << f.error().message;
    EXPECT_NE(f.error().message.find("b"), std::string::npos) << f.error().message;
  }
  EXPECT_EQ(testing::listFiles(root.path()), std::vector<std::string>{"a"});
  EXPECT_EQ(statOf(root.path() + "/a").st_nlink, 1u);
  EXPECT_EQ(currentThreadCredentials().uid, 0u);
}

TEST(PosixActAsTest, TheClientLinksAndCopiesItsOwnFiles) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string root = base.path() + "/dumps";
  makeDir(root, 1234, 1234, 0700);
  makeFile(root + "/a", 1234, 1234, 0400, "mine");
  for (bool hard_links : {true, false}) {
    auto fs = actAsClient(root, kClient, hard_links);
    ASSERT_TRUE(fs.has_value()) << fs.error().message;
    auto d = fs.value()->openDirectory("", {});
    ASSERT_TRUE(d.has_value()) << d.error().message;
    const char* name = hard_links ? "link" : "copy";
    auto f = linkOrCopy(*d.value(), "a", name, 0440);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    ASSERT_TRUE(f.value()->commit());
    struct stat st = statOf(root + "/" + name);
    EXPECT_EQ(st.st_uid, 1234u) << name;
    EXPECT_EQ(st.st_gid, 1234u) << name;
    EXPECT_EQ(st.st_mode & 07777, hard_links ? 0400u : 0440u) << name;
    EXPECT_EQ(testing::readFile(root + "/" + name), "mine");
  }
  EXPECT_EQ(statOf(root + "/a").st_nlink, 2u);  // a and link
  EXPECT_EQ(currentThreadCredentials().uid, 0u);
}

// fs.protected_hardlinks: another user's file may be linked only by someone who may read and
// write it. linkat's EPERM is kUnsupported; a copy needs only the right to read it.
TEST(PosixActAsTest, AnotherUsersFileIsCopiedWhereTheKernelForbidsALink) {
  SKIP_UNLESS_ROOT();
  if (testing::readFile("/proc/sys/fs/protected_hardlinks") != "1\n") {
    GTEST_SKIP() << "needs fs.protected_hardlinks = 1";
  }
  TraversableTempDir base;
  const std::string shared = base.path() + "/shared";
  makeDir(shared, 0, 0, 01777);
  makeFile(shared + "/readable", kOtherUser, kOtherUser, 0644, "theirs");
  makeFile(shared + "/private", kOtherUser, kOtherUser, 0600, "secret");
  auto fs = actAsClient(shared);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto link = d.value()->linkFile("readable", "mine");
  ASSERT_FALSE(link.has_value());
  EXPECT_EQ(link.error().code, ErrorCode::kUnsupported) << link.error().message;
  auto copy = d.value()->copyFile("readable", "mine", 0600);
  ASSERT_TRUE(copy.has_value()) << copy.error().message;
  EXPECT_EQ(copy.value()->bytesWritten(), 6u);
  ASSERT_TRUE(copy.value()->commit());
  struct stat st = statOf(shared + "/mine");
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_nlink, 1u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(testing::readFile(shared + "/mine"), "theirs");
  auto refused = linkOrCopy(*d.value(), "private", "stolen", 0600);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kPermission) << refused.error().message;
  EXPECT_NE(refused.error().message.find("private"), std::string::npos);
  EXPECT_EQ(testing::listFiles(shared), (std::vector<std::string>{"mine", "private", "readable"}));
  EXPECT_EQ(statOf(shared + "/private").st_nlink, 1u);
}

// In a sticky directory the client could neither rename nor remove a link to another user's
// file (even one it may read and write, which fs.protected_hardlinks lets it link): a copy.
TEST(PosixActAsTest, AnotherUsersFileInAStickyDirectoryIsCopiedNotLinked) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string shared = base.path() + "/shared";
  makeDir(shared, 0, 0, 01777);
  makeFile(shared + "/f", kOtherUser, kOtherUser, 0666, "theirs");
  auto fs = actAsClient(shared);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto link = d.value()->linkFile("f", "mine");
  ASSERT_FALSE(link.has_value());
  EXPECT_EQ(link.error().code, ErrorCode::kUnsupported) << link.error().message;
  auto f = d.value()->copyFile("f", "mine", 0600);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), 6u);
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(statOf(shared + "/mine").st_uid, 1234u);
  EXPECT_EQ(statOf(shared + "/f").st_nlink, 1u);
  EXPECT_EQ(testing::readFile(shared + "/mine"), "theirs");
  EXPECT_EQ(testing::listFiles(shared), (std::vector<std::string>{"f", "mine"}));
}

// Writer threads are shared by sessions: two threads acting for two uids at once, each in a
// 0700 directory of its own uid (a leaked uid is refused there), each file checked for owner.
TEST(PosixActAsTest, ConcurrentClientsNeverGetEachOthersRights) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  constexpr int kIterations = 1000;
  std::atomic<int> failures{0};
  auto worker = [&](uid_t uid) {
    const std::string root = base.path() + "/" + std::to_string(uid);
    auto fs = actAsClient(root, Credentials{uid, uid, {}});
    if (!fs) {
      failures.fetch_add(kIterations);
      return;
    }
    auto d = fs.value()->openDirectory("rank_0", {.create = true});
    if (!d) {
      failures.fetch_add(kIterations);
      return;
    }
    for (int i = 0; i < kIterations; ++i) {
      std::string name = "t" + std::to_string(i);
      auto f = d.value()->newFile(name, 0400);
      if (!f || !f.value()->commit()) {
        failures.fetch_add(1);
        continue;
      }
      struct stat st;
      if (::lstat((root + "/rank_0/" + name).c_str(), &st) != 0 || st.st_uid != uid ||
          st.st_gid != uid) {
        failures.fetch_add(1);
      }
    }
    if (currentThreadCredentials().uid != 0) failures.fetch_add(1);
  };
  for (uid_t uid : {1234u, 1235u}) makeDir(base.path() + "/" + std::to_string(uid), uid, uid, 0700);
  std::thread a(worker, 1234u);
  std::thread b(worker, 1235u);
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(testing::listFiles(base.path()).size(), 2u * kIterations);
}

// Runs `check` in a forked child (which may then drop privileges for good); "" = passed.
void expectInChild(const std::function<std::string()>& check) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string failure = check();
    if (!failure.empty()) std::fprintf(stderr, "child: %s\n", failure.c_str());
    ::_exit(failure.empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see the child's stderr";
}

TEST(PosixActAsTest, ANonRootDaemonRefusesToActAsAnotherUid) {
  TraversableTempDir base;
  const uid_t self = ::geteuid() == 0 ? 1234 : ::geteuid();
  if (::geteuid() == 0) makeDir(base.path() + "/mine", 1234, 1234, 0700);
  expectInChild([&]() -> std::string {
    if (::geteuid() == 0) {  // become uid 1234 for good, as a daemon run as the job's user
      if (::setgroups(0, nullptr) != 0 || ::setgid(1234) != 0 || ::setuid(1234) != 0) {
        return "cannot drop to uid 1234";
      }
    } else {
      ::mkdir((base.path() + "/mine").c_str(), 0700);
    }
    auto other = actAsClient(base.path(), Credentials{self + 1, self + 1, {}});
    if (other.has_value()) return "acting as another uid was accepted";
    std::string want = "dumpd runs as uid " + std::to_string(self) + " and cannot act as uid " +
                       std::to_string(self + 1) + "; run it as root or as the job's user";
    if (other.error().code != ErrorCode::kPermission || other.error().message != want) {
      return "unexpected error: " + other.error().message;
    }
    // Its own uid is fine: it acts with its own credentials.
    auto mine = actAsClient(base.path() + "/mine", Credentials{self, 4321, {4321}});
    if (!mine) return "acting as itself failed: " + mine.error().message;
    if (!mine.value()->createDirectories("rank_0")) return "creating as itself failed";
    return "";
  });
}

TEST(PosixActAsTest, ARootDaemonThatCannotSwitchIsRefusedAndKeepsItsCredentials) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  expectInChild([&]() -> std::string {
    // Drop CAP_SETUID from the effective set: setfsuid() then silently changes nothing.
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (::syscall(SYS_capget, &header, data) != 0) return "capget failed";
    data[0].effective &= ~(1u << CAP_SETUID);
    if (::syscall(SYS_capset, &header, data) != 0) return "capset failed";
    const Credentials before = currentThreadCredentials();
    auto fs = actAsClient(base.path(), Credentials{1234, 2345, {4321}});
    if (fs.has_value()) return "a file system that cannot switch was accepted";
    if (fs.error().code != ErrorCode::kPermission ||
        fs.error().message.find("setfsuid did not take effect") == std::string::npos) {
      return "unexpected error: " + fs.error().message;
    }
    // The groups and gid switched before the uid failed were rolled back.
    if (currentThreadCredentials() != before) return "credentials not rolled back";
    return "";
  });
}

TEST(PosixFileSystemTest, PermissionDeniedIsReportedAsPermission) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  ASSERT_TRUE(fs.value()->createDirectories("ro"));
  ::chmod((root.path() + "/ro").c_str(), 0500);
  auto d = fs.value()->openDirectory("ro", {});
  auto f = d.value()->newFile("x", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kPermission);
  EXPECT_NE(f.error().message.find("ro/x"), std::string::npos);
  ::chmod((root.path() + "/ro").c_str(), 0700);
}

// RLIMIT_FSIZE makes a write stop part way (a short write, then EFBIG), as a full disk does.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    struct rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() { ::setrlimit(RLIMIT_FSIZE, &saved_); }

 private:
  struct rlimit saved_;
};

TEST(PosixFileSystemTest, AFailedAppendLeavesNoPartialRow) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("", {});
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_TRUE(a.has_value());
  {
    FileSizeLimit limit(100);
    ASSERT_TRUE(a.value()->append(std::string(59, 'a') + "\n"));
    auto s = a.value()->append(std::string(59, 'b') + "\n");  // 40 bytes fit, then EFBIG
    ASSERT_FALSE(s.has_value());
    EXPECT_NE(s.error().message.find("statistic.csv"), std::string::npos);
  }
  EXPECT_EQ(a.value()->size(), 60u);
  EXPECT_EQ(testing::readFile(root.path() + "/statistic.csv"), std::string(59, 'a') + "\n");
  ASSERT_TRUE(a.value()->append("next\n"));
  EXPECT_EQ(testing::readFile(root.path() + "/statistic.csv")->size(), 65u);
}

TEST(PosixFileSystemTest, AFailedWriteLeavesNoFile) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("d", {.create = true});
  {
    FileSizeLimit limit(100);
    auto f = d.value()->newFile("x.npy", 0400);
    std::string big(1000, 'x');
    auto s = f.value()->write(asBytes(big));
    ASSERT_FALSE(s.has_value());
    EXPECT_NE(s.error().message.find("d/x.npy"), std::string::npos);
  }
  EXPECT_TRUE(testing::listFiles(root.path()).empty());
}

TEST(MemoryFileSystemTest, UnsyncedFilesAndEntriesAreLostInACrash) {
  MemoryFileSystem fs;
  auto d = fs.openDirectory("d", {.create = true, .sync_created = true});
  auto write = [&](const char* name, bool sync_file, bool sync_dir) {
    auto f = d.value()->newFile(name, 0400);
    ASSERT_TRUE(f.value()->write(asBytes("data")));
    if (sync_file) {
      ASSERT_TRUE(f.value()->sync());
    }
    ASSERT_TRUE(f.value()->commit());
    if (sync_dir) {
      ASSERT_TRUE(d.value()->sync());
    }
  };
  write("neither", false, false);
  write("file_only", true, false);
  write("both", true, true);
  fs.simulateCrash();
  EXPECT_EQ(fs.readFile("d/both"), "data");
  // "neither" and "file_only" were made durable as entries by the later directory sync, but
  // only "file_only" kept its contents.
  EXPECT_EQ(fs.readFile("d/file_only"), "data");
  EXPECT_EQ(fs.readFile("d/neither"), "");
}

TEST(MemoryFileSystemTest, EntriesWithoutADirectorySyncVanish) {
  MemoryFileSystem fs;
  auto d = fs.openDirectory("d", {.create = true, .sync_created = true});
  auto f = d.value()->newFile("x", 0400);
  ASSERT_TRUE(f.value()->write(asBytes("data")));
  ASSERT_TRUE(f.value()->sync());
  ASSERT_TRUE(f.value()->commit());
  auto sub = fs.openDirectory("d/unsynced/deeper", {.create = true});
  fs.simulateCrash();
  EXPECT_TRUE(fs.exists("d"));
  EXPECT_FALSE(fs.exists("d/x"));
  EXPECT_FALSE(fs.exists("d/unsynced"));
}

TEST(MemoryFileSystemTest, CapacityGivesNoSpaceNamingTheFile) {
  MemoryFileSystem fs;
  fs.setCapacity(10);
  auto d = fs.openDirectory("d", {.create = true});
  auto f = d.value()->newFile("big.npy", 0400);
  auto s = f.value()->write(asBytes("01234567890"));
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kNoSpace);
  EXPECT_NE(s.error().message.find("d/big.npy"), std::string::npos);
  f.value()->abort();
  EXPECT_EQ(fs.usedBytes(), 0u);
  EXPECT_EQ(fs.freeBytes().value(), 10u);
  auto a = d.value()->openAppend("c.csv");
  ASSERT_TRUE(a.value()->append("12345"));
  EXPECT_FALSE(a.value()->append("123456").has_value());
  EXPECT_EQ(fs.readFile("d/c.csv"), "12345");
}

TEST(MemoryFileSystemTest, ACopyCountsAgainstTheCapacity) {
  MemoryFileSystem fs;
  fs.setCapacity(10);
  auto d = fs.openDirectory("d", {.create = true});
  commitFile(*d.value(), "a", "123456");
  auto full = d.value()->copyFile("a", "b", 0400);
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().code, ErrorCode::kNoSpace);
  EXPECT_NE(full.error().message.find("d/b"), std::string::npos) << full.error().message;
  EXPECT_EQ(fs.usedBytes(), 6u);
  EXPECT_FALSE(fs.exists("d/b"));
  fs.setCapacity(20);
  auto f = d.value()->copyFile("a", "b", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), 6u);
  EXPECT_EQ(fs.usedBytes(), 12u);
  f.value()->abort();
  EXPECT_EQ(fs.usedBytes(), 6u);
}

TEST(MemoryFileSystemTest, ACopyIsDurableLikeANewFile) {
  MemoryFileSystem fs;
  auto d = fs.openDirectory("d", {.create = true, .sync_created = true});
  auto link = [&](const char* name, bool sync_file) {
    auto f = d.value()->copyFile("a", name, 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    if (sync_file) {
      ASSERT_TRUE(f.value()->sync());
    }
    ASSERT_TRUE(f.value()->commit());
  };
  commitFile(*d.value(), "a", "data");
  ASSERT_TRUE(d.value()->syncFile("a"));
  link("unsynced", false);
  link("synced", true);
  ASSERT_TRUE(d.value()->sync());
  link("no_directory_sync", true);
  fs.simulateCrash();
  EXPECT_EQ(fs.readFile("d/a"), "data");
  EXPECT_EQ(fs.readFile("d/synced"), "data");
  EXPECT_EQ(fs.readFile("d/unsynced"), "");
  EXPECT_FALSE(fs.exists("d/no_directory_sync"));
}

TEST(FaultInjectionTest, FailsExactlyTheChosenCall) {
  auto base = std::make_shared<MemoryFileSystem>();
  FaultInjectingFileSystem fs(base);
  fs.failCall(2, ErrorCode::kIo);
  auto d = fs.openDirectory("d", {.create = true});  // call 0
  ASSERT_TRUE(d.has_value());
  auto f = d.value()->newFile("x.npy", 0400);  // call 1
  ASSERT_TRUE(f.has_value());
  auto s = f.value()->write(asBytes("abc"));  // call 2: fails
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kIo);
  EXPECT_NE(s.error().message.find("d/x.npy"), std::string::npos);
  EXPECT_NE(s.error().message.find("(injected)"), std::string::npos);
  EXPECT_TRUE(f.value()->write(asBytes("abc")));  // call 3
  EXPECT_EQ(fs.calls(), 4u);
  EXPECT_EQ(fs.calls(FsOp::kWrite), 2u);
  EXPECT_EQ(fs.faultsInjected(), 1u);
}

TEST(FaultInjectionTest, AFailedCommitLeavesNoTemporaryFile) {
  auto base = std::make_shared<MemoryFileSystem>();
  FaultInjectingFileSystem fs(base);
  fs.failEvery(FsOp::kCommit, ErrorCode::kNoSpace);
  auto d = fs.openDirectory("d", {.create = true});
  auto f = d.value()->newFile("x.npy", 0400);
  ASSERT_TRUE(f.value()->write(asBytes("abc")));
  auto s = f.value()->commit();
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kNoSpace);
  for (const auto& e : base->list()) {
    EXPECT_NE(e.kind, MemoryFileSystem::Entry::Kind::kFile) << e.path;
  }
  fs.clearFaults();
  auto g = d.value()->newFile("y.npy", 0400);
  EXPECT_TRUE(g.value()->commit());
}

TEST(FaultInjectionTest, EveryKindCanBeFailedWithEachCode) {
  const std::pair<ErrorCode, const char*> codes[] = {{ErrorCode::kNoSpace, "No space"},
                                                     {ErrorCode::kIo, "Input/output"},
                                                     {ErrorCode::kPermission, "Permission denied"},
                                                     {ErrorCode::kUnsupported, "Too many links"}};
  for (auto [code, text] : codes) {
    auto base = std::make_shared<MemoryFileSystem>();
    FaultInjectingFileSystem fs(base);
    fs.failEvery(FsOp::kAppend, code);
    fs.failEvery(FsOp::kFreeBytes, code);
    fs.failEvery(FsOp::kLink, code);
    fs.failEvery(FsOp::kCopy, code);
    auto d = fs.openDirectory("d", {.create = true});
    auto a = d.value()->openAppend("m.csv");
    auto s = a.value()->append("x");
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error().code, code);
    EXPECT_NE(s.error().message.find(text), std::string::npos) << s.error().message;
    EXPECT_FALSE(fs.freeBytes().has_value());
    auto l = d.value()->linkFile("m.csv", "n.csv");
    ASSERT_FALSE(l.has_value());
    EXPECT_EQ(l.error().code, code);
    EXPECT_NE(l.error().message.find("link d/n.csv: " + std::string(text)), std::string::npos)
        << l.error().message;
    auto c = d.value()->copyFile("m.csv", "n.csv", 0644);
    ASSERT_FALSE(c.has_value());
    EXPECT_EQ(c.error().code, code);
    EXPECT_NE(c.error().message.find("copy d/n.csv: " + std::string(text)), std::string::npos)
        << c.error().message;
    EXPECT_FALSE(base->exists("d/n.csv"));
  }
}

TEST(FaultInjectionTest, ALinkAndACopyAreCountedAsSuchAndTheirCommitAsCommit) {
  auto base = std::make_shared<MemoryFileSystem>();
  FaultInjectingFileSystem fs(base);
  auto d = fs.openDirectory("d", {.create = true});  // call 0
  commitFile(*d.value(), "a", "data");               // calls 1-3
  fs.failCall(4, ErrorCode::kIo);
  auto failed = d.value()->linkFile("a", "b");  // call 4: fails
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().code, ErrorCode::kIo);
  EXPECT_NE(failed.error().message.find("d/b"), std::string::npos);
  EXPECT_NE(failed.error().message.find("(injected)"), std::string::npos);
  EXPECT_EQ(fs.calls(FsOp::kLink), 1u);
  fs.failEvery(FsOp::kCommit, ErrorCode::kNoSpace);
  auto f = d.value()->copyFile("a", "b", 0400);  // call 5
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto s = f.value()->commit();  // call 6: fails, and takes the temporary file away
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kNoSpace);
  EXPECT_EQ(fs.calls(FsOp::kLink), 1u);
  EXPECT_EQ(fs.calls(FsOp::kCopy), 1u);
  EXPECT_EQ(fs.calls(FsOp::kCommit), 2u);
  EXPECT_EQ(fs.calls(), 7u);
  std::vector<std::string> files;
  for (const auto& e : base->list()) {
    if (e.kind == MemoryFileSystem::Entry::Kind::kFile) files.push_back(e.path);
  }
  EXPECT_EQ(files, std::vector<std::string>{"d/a"});
  fs.clearFaults();
  auto g = d.value()->copyFile("a", "b", 0400);
  ASSERT_TRUE(g.has_value());
  ASSERT_TRUE(g.value()->commit());
  EXPECT_EQ(base->readFile("d/b"), "data");
}

}  // namespace
}  // namespace dumpd::storage
